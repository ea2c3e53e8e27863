"""The bad-input sweep: every hostile command line gets one line on stderr and exit status 2, with no
traceback and nothing written (issue 36, item 9).

The CLI runs in this process (``core.cli.main``), so the whole sweep takes seconds. The folder the
commands run in (the runs folder, a run in it, the working directory) is compared before and after.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from core.cli import main
from core.config import RunConfig
from store import RunWriter

RUN = ["run", "--workload", "gemm", "--backend", "c", "--problem", '{"m": 32, "n": 32, "k": 32}']
CHECK = ["check", "--workload", "gemm", "--backend", "c"]
BIG = str(10 ** 30)

# (id, argv); RUNS and the names below are filled in by the fixture: RUNS the runs folder, DONE a
# finished run, STOPPED a stopped run, BADCFG a run whose config.json is garbage, ZEROCFG one whose
# config.json is /dev/zero, OTHERCFG one whose config.json names another workload, NODB a run without
# run.duckdb, BADDB one with a garbage run.duckdb, KERNEL a C kernel file, JUNK a file of garbage
# JSON, ARRAY a file holding a JSON array, UNKNOWN a config with an unknown key, DIR a folder.
CASES: list[tuple[str, list[str]]] = [
    # -- the command itself
    ("no command", []),
    ("unknown command", ["fly"]),
    ("unknown global flag", ["--frobnicate"]),
    # -- run: names
    ("run unknown workload", ["run", "--workload", "nope", "--backend", "c"]),
    ("run unknown backend", ["run", "--workload", "gemm", "--backend", "fortran"]),
    ("run workload without that backend", ["run", "--workload", "nope_nope", "--backend", "cuda"]),
    ("run unknown flag", [*RUN, "--turbo"]),
    ("run unknown selection", [*RUN, "--selection", "roulette"]),
    ("run unknown init", [*RUN, "--init", "magic"]),
    # -- run: numbers
    *[(f"run population {v}", [*RUN, "--population", v]) for v in ("1", "0", "-3", "abc", "2.5", "5000", BIG, "")],
    *[(f"run generations {v}", [*RUN, "--generations", v]) for v in ("-1", "abc", "1e3", "2000000", BIG)],
    *[(f"run hours {v}", [*RUN, "--hours", v]) for v in ("-1", "inf", "nan", "-inf", "1e9", "abc", "1e400")],
    *[(f"run seed {v}", [*RUN, "--seed", v]) for v in ("-1", "abc", "1.5")],
    *[(f"run mutation rate {v}", [*RUN, "--mutation-rate", v]) for v in ("2", "-0.1", "nan", "inf", "x")],
    *[(f"run crossover rate {v}", [*RUN, "--crossover-rate", v]) for v in ("1.5", "-1", "nan")],
    *[(f"run elites {v}", [*RUN, "--elites", v]) for v in ("-1", "16", "100", "x")],
    *[(f"run parent fraction {v}", [*RUN, "--parent-fraction", v]) for v in ("0", "2", "nan", "-inf")],
    *[(f"run tournament size {v}", [*RUN, "--tournament-size", v]) for v in ("1", "1000", "x")],
    *[(f"run stability launches {v}", [*RUN, "--stability-launches", v]) for v in ("1", "1000000000", "-5")],
    *[(f"run timeout {v}", [*RUN, "--timeout-s", v]) for v in ("inf", "nan", "0", "-5", "1e300", "abc", "1e400")],
    *[(f"run compile workers {v}", [*RUN, "--compile-workers", v]) for v in ("-1", "1000", "x")],
    *[(f"run baseline checks {v}", [*RUN, "--baseline-checks", v]) for v in ("1", "10", "x")],
    *[(f"run device {v}", [*RUN, "--device", v]) for v in ("-1", "99", "x", BIG)],
    *[(f"run devices {v}", [*RUN, "--devices", v]) for v in ("abc", "0,x", "99", "-1", "0;rm -rf /")],
    *[(f"run cluster {v}", [*RUN, "--cluster", v]) for v in ("bogus", "local:0", "local:x", "local:-1", "http://x")],
    ("run cluster and devices", [*RUN, "--cluster", "local:1", "--devices", "0"]),
    ("run no budget", [*RUN, "--generations", "0", "--hours", "0"]),
    # -- run: weights
    *[(f"run weights {v!r}", [*RUN, "--weights", v]) for v in (
        "time=abc", "time=-1", "speed=1", "", "time=inf", "time=nan", "0,0,0", "1,2", "time=1,time=2",
        "time=0,memory=0", "=1", "time", "1,2,3,4")],
    # -- run: the problem
    *[(f"run problem {v!r}", ["run", "--workload", "gemm", "--backend", "c", "--problem", v]) for v in (
        "{", "[]", '"x"', "null", '{"m": -1}', '{"m": "abc"}', '{"m": 1e30}', '{"bogus": 1}', '{"m": 0}',
        '{"m": 1.5}', '{"m": true}', '{"m": 100000000000}', "NaN")],
    # -- run: ids, folders, start_from
    *[(f"run id {v!r}", [*RUN, "--run-id", v]) for v in ("../evil", "a/b", ".hidden", "x" * 100, "", "DONE", "-x",
                                                           "a b", "é")],
    *[(f"run start from {v!r}", [*RUN, "--start-from", v]) for v in ("../x", "nope", "BADCFG", "a/b")],
    # -- run: --config
    ("run config /dev/zero", ["run", "--config", "/dev/zero"]),
    ("run config missing", ["run", "--config", "RUNS/no-such.json"]),
    ("run config folder", ["run", "--config", "DIR"]),
    ("run config garbage", ["run", "--config", "JUNK"]),
    ("run config array", ["run", "--config", "ARRAY"]),
    ("run config unknown key", ["run", "--config", "UNKNOWN"]),
    ("run config kernel file", ["run", "--config", "KERNEL"]),
    ("run config /dev/null", ["run", "--config", "/dev/null"]),
    ("run config /proc/self/mem", ["run", "--config", "/proc/self/mem"]),
    # -- resume
    ("resume no id", ["resume"]),
    *[(f"resume id {v!r}", ["resume", v]) for v in ("../x", "nope", ".cache", "a/b", "", "x" * 100)],
    ("resume garbage config", ["resume", "BADCFG"]),
    ("resume endless config", ["resume", "ZEROCFG"]),
    ("resume config of another workload", ["resume", "OTHERCFG"]),
    ("resume without database", ["resume", "NODB"]),
    ("resume garbage database", ["resume", "BADDB"]),
    ("resume unknown flag", ["resume", "STOPPED", "--fast"]),
    ("resume runs dir missing", ["resume", "STOPPED", "--runs-dir", "RUNS/nowhere"]),
    # -- export
    *[(f"export k {v}", ["export", "DONE", "--out", "OUT", "--which", "top", "-k", v]) for v in (
        "-1", "0", "abc", "1.5", BIG, "1000000")],
    ("export unknown which", ["export", "DONE", "--out", "OUT", "--which", "best"]),
    ("export no out", ["export", "DONE"]),
    ("export out exists", ["export", "DONE", "--out", "DIR"]),
    ("export out /dev/null", ["export", "DONE", "--out", "/dev/null"]),
    ("export unknown run", ["export", "nope", "--out", "OUT"]),
    ("export escaping run id", ["export", "../x", "--out", "OUT"]),
    ("export run without database", ["export", "NODB", "--out", "OUT"]),
    # -- bench
    *[(f"bench rounds {v}", ["bench", "DONE", "--rounds", v]) for v in ("0", "-1", "101", "abc", BIG)],
    ("bench unknown run", ["bench", "nope"]),
    ("bench escaping run id", ["bench", "../../etc"]),
    ("bench garbage config", ["bench", "BADCFG"]),
    # -- repair
    ("repair unknown run", ["repair", "nope"]),
    ("repair escaping run id", ["repair", "../x"]),
    ("repair garbage database", ["repair", "BADDB"]),
    ("repair without database", ["repair", "NODB"]),
    # -- check
    ("check nothing", ["check"]),
    ("check no kernel", [*CHECK]),
    ("check unknown workload", ["check", "--workload", "nope", "--backend", "c", "--kernel", "KERNEL"]),
    ("check unknown backend", ["check", "--workload", "gemm", "--backend", "nope", "--kernel", "KERNEL"]),
    ("check kernel missing", [*CHECK, "--kernel", "RUNS/none.c"]),
    ("check kernel folder", [*CHECK, "--kernel", "DIR"]),
    ("check kernel /dev/zero", [*CHECK, "--kernel", "/dev/zero"]),
    ("check kernel /dev/urandom", [*CHECK, "--kernel", "/dev/urandom"]),
    *[(f"check problem {v!r}", [*CHECK, "--kernel", "KERNEL", "--problem", v]) for v in ("{", "[]", '{"m": -5}')],
    *[(f"check launch {v!r}", [*CHECK, "--kernel", "KERNEL", "--launch", v]) for v in (
        "{", "[1]", '{"argtypes": "nonsense"}', '{"argtypes": ["ptr", "quaternion"]}', '{"threads": "many"}',
        '{"threads": -4}', '{"mr": 1.5}', '{"extra": "x"}')],
    *[(f"check entry {v!r}", [*CHECK, "--kernel", "KERNEL", "--entry", v]) for v in (
        "", "1abc", "no_such_function", "a;b", "abebot_gemm x")],
    *[(f"check seconds {v}", [*CHECK, "--kernel", "KERNEL", "--seconds", v]) for v in ("0", "-1", "inf", "nan", "61",
                                                                                          "x")],
    *[(f"check device {v}", [*CHECK, "--kernel", "KERNEL", "--device", v]) for v in ("-1", "99", "x")],
    *[(f"check contract {' '.join(v)}", ["check", "--contract", *v]) for v in (
        ("gemm", "c", "x"), ("nope",), ("gemm", "nope"))],
]

# A Python exception's name leading the message ("abebot: error: OverflowError: ...") means it was not handled.
RAW = re.compile(r"^abebot: error: [A-Z]\w*(Error|Exception):")
KERNEL_TEXT = "void abebot_gemm(const float *a, const float *b, float *c, int m, int n, int k) {}\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    """A runs folder holding runs in every state the cases name, and the files they read."""
    root = tmp_path_factory.mktemp("bad_input")
    runs = root / "runs"
    runs.mkdir()
    cfg = json.loads(RunConfig(workload="gemm", backend="c", population=4, generations=2,
                               problem={"m": 32, "n": 32, "k": 32}).to_json())
    names = {}
    for name, status in (("DONE", "finished"), ("STOPPED", "stopped"), ("BADCFG", "stopped"), ("ZEROCFG", "stopped"),
                         ("OTHERCFG", "stopped"), ("NODB", "stopped"), ("BADDB", "stopped")):
        run_id = name.lower()
        w = RunWriter.create(runs, run_id, cfg)
        w.set_status(status)
        w.close()
        names[name] = run_id
    (runs / "badcfg" / "config.json").write_text("{not json")
    (runs / "zerocfg" / "config.json").unlink()
    (runs / "zerocfg" / "config.json").symlink_to("/dev/zero")
    (runs / "othercfg" / "config.json").write_text(json.dumps({**cfg, "workload": "rmsnorm", "problem": {}}))
    (runs / "nodb" / "run.duckdb").unlink()
    (runs / "baddb" / "run.duckdb").write_bytes(b"garbage" * 1000)
    files = root / "files"
    files.mkdir()
    (files / "k.c").write_text(KERNEL_TEXT)
    (files / "junk.json").write_text("{,,,")
    (files / "array.json").write_text("[1, 2]")
    (files / "unknown.json").write_text(json.dumps({**cfg, "warp_drive": 9}))
    (files / "folder").mkdir()
    names.update(RUNS=str(runs), KERNEL=str(files / "k.c"), JUNK=str(files / "junk.json"),
                 ARRAY=str(files / "array.json"), UNKNOWN=str(files / "unknown.json"), DIR=str(files / "folder"),
                 OUT=str(root / "out"), ROOT=str(root))
    return names


def _argv(args: list[str], world: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        for key in ("RUNS", "KERNEL", "JUNK", "ARRAY", "UNKNOWN", "DIR", "OUT"):
            if a == key or a.startswith(key + "/"):
                a = world[key] + a[len(key):]
        out.append(world.get(a, a) if a in ("DONE", "STOPPED", "BADCFG", "ZEROCFG", "OTHERCFG", "NODB", "BADDB") else a)
    if out and out[0] in ("run", "resume", "export", "bench", "repair", "check") and "--runs-dir" not in out:
        out += ["--runs-dir", world["RUNS"]]
    return out


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its size and modification time (links not followed)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size if not p.is_dir() else 0, st.st_mtime_ns)
    return out


def test_the_sweep_has_more_than_a_hundred_cases():
    assert len(CASES) >= 119 and len({name for name, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("args", [a for _, a in CASES], ids=[n for n, _ in CASES])
def test_bad_input_gets_one_line_and_exit_2_with_nothing_written(world, args, capsys, monkeypatch):
    monkeypatch.chdir(world["ROOT"])
    monkeypatch.setenv("ABEBOT_RUNS_DIR", world["RUNS"])
    argv = _argv(args, world)
    before = _tree(Path(world["ROOT"]))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's --help and the like; none of these cases should get there
        code = exc.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (argv, code, captured.out[-500:], captured.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("abebot: error: "), captured.err
    assert "Traceback" not in captured.err and not RAW.search(lines[0]), lines[0]  # said, not dumped
    if os.environ.get("ABEBOT_SHOW_BAD_INPUT"):
        with open(os.environ["ABEBOT_SHOW_BAD_INPUT"], "a") as f:
            f.write(f"{' '.join(args)[:60]:60} -> {lines[0]}\n")
    assert _tree(Path(world["ROOT"])) == before, argv
