"""``python -m core check`` and the planted-cheat suite.

Every cheat in ``tests/cheats/`` is a hand-written C kernel with the template's own signature that
tries to look fast or right without being either. Each goes through :mod:`core.tools.check` -- the seed's
rendered KernelSource with the cheat's text as its source, evaluated by the real sandboxed
evaluator, exactly as ``python -m core check`` does -- and must be rejected with the right cause.

To stay fast on a two-core runner, most checks share one started :class:`core.tools.check.Checker` per
problem (one sandbox, baselines timed once); a few real ``python -m core check`` subprocesses test
the exit codes and the JSON output, and bad input is tested in-process through ``core.cli.main``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.backends import availability
from core.tools.check import Checker
from core.tools.check_result import format_report, rooflines
from core.tools.contract import contract, contract_pairs, contract_text
from core.cli import main

ROOT = Path(__file__).resolve().parents[1]
CHEATS = ROOT / "tests" / "cheats"
C_UNAVAILABLE = availability("c")
pytestmark = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")

GEMM = {"m": 64, "n": 64, "k": 64}
# The compute floor ~15x the memory floor: room for a memo. Hot caches: under the default cold policy a
# memo's own hash of the inputs reads them from DRAM and costs more than the floor (56 us against a 43 us
# floor on our 2-core VM), so no padding gets it below the floor; the floor check is tested where it can.
GEMM_COMPUTE_BOUND = {"m": 192, "n": 192, "k": 192, "cache": "hot"}
RMSNORM = {"rows": 64, "cols": 256}
OPTIONS = {"timeout_s": 20.0, "stability_launches": 8}


# ---- fixtures and helpers --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("check-runs")


def _checker(runs_dir: Path, workload: str, problem: dict):
    checker = Checker(workload, "c", problem, runs_dir=runs_dir, log_path=runs_dir / f"{workload}-sandbox.log", **OPTIONS)
    checker.start()
    return checker


@pytest.fixture(scope="module")
def gemm(runs_dir):
    checker = _checker(runs_dir, "gemm", GEMM)
    yield checker
    checker.close()


@pytest.fixture(scope="module")
def rmsnorm(runs_dir):
    checker = _checker(runs_dir, "rmsnorm", RMSNORM)
    yield checker
    checker.close()


@pytest.fixture(scope="module")
def gemm_compute_bound(runs_dir):
    """A checker whose measured floors leave room between the memory floor and the suspect floor.
    Peaks measured in a loaded moment can leave none (CI: 6.3 GB/s put the memory floor at 70 us,
    over a 68 us floor capped by numpy's time), so a new sandbox measures them again, up to 3 times."""
    for _ in range(3):
        checker = _checker(runs_dir, "gemm", GEMM_COMPUTE_BOUND)
        roof = rooflines(checker.baseline, checker.min_bytes, checker.flops, None)
        if roof["suspect_below_us"] and roof["memory_us"] < roof["suspect_below_us"]:
            break
        checker.close()
    else:
        pytest.fail(f"no room between the memory floor and the suspect floor in 3 measurements: {roof}")
    yield checker
    checker.close()


@pytest.fixture
def checkers(request):
    """The started checker of a workload by name (fixtures made on first use)."""
    return lambda name: request.getfixturevalue(name)


def cheat(checker: Checker, name: str, **defines) -> dict:
    """Check ``tests/cheats/<name>.c`` (``defines`` prepended as ``#define``s); the result dict."""
    path = CHEATS / f"{name}.c"
    source = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + path.read_text()
    result = checker.check(source, path=str(path))
    json.dumps(result)  # what --json prints
    assert format_report(result)
    return result


def verdict(r: dict) -> str:
    """Status, cause and time, for assertion messages."""
    return f"{r['status']}: {r['cause'] or '(no cause)'}; time {r['time_us']} us; stability {r['stability']}"


# ---- a correct kernel ----------------------------------------------------------------------------

@pytest.mark.parametrize("workload", ["gemm", "rmsnorm"])
def test_the_seeds_own_source_checks_ok_with_every_measurement(checkers, workload):
    checker = checkers(workload)
    r = checker.check(checker.seed.source)
    assert r["ok"] and r["verdict"] == "ok" and r["cause"] == "", verdict(r)
    assert r["time_us"] > 0 and r["time_spread_us"] >= 0
    shapes = checker.workload.shapes(checker.problem)
    assert [e["shape"] for e in r["shape_errors"]] == shapes
    for e in r["shape_errors"]:
        assert ",".join(f"{k}={v}" for k, v in e["shape"].items()) in r["tolerance"]
        assert 0 <= e["max_abs_err"] and 0 <= e["margin_used"] < 1, e
    assert r["evaluation"]["determinism"] == 1.0 and 0 < r["stability"] <= 1
    primary = r["baselines"][r["primary"]]
    assert primary["verified"] and primary["time_us"] > 0
    assert primary["speedup"] == pytest.approx(r["speedup"]) and r["speedup"] > 0  # timed in pairs beside it
    assert r["cache"] == "cold" and isinstance(r["noisy"], bool)
    roof = r["roofline"]
    assert roof["memory_us"] > 0 and roof["compute_us"] > 0 and roof["percent"] > 0
    assert roof["roofline_us"] == max(roof["memory_us"], roof["compute_us"])


def test_the_report_gives_the_verdict_every_shape_every_baseline_and_the_roofline(gemm):
    r = gemm.check(gemm.seed.source, path="seed.c")
    text = format_report(r)
    assert "verdict: ok" in text and "seed.c" in text
    for shape in gemm.workload.shapes(gemm.problem):
        assert ",".join(f"{k}={v}" for k, v in shape.items()) in text
    assert "numpy" in text and "speed-up" in text and "median" in text
    assert "% of the compute-bound roofline" in text
    assert "empty launch" not in text  # a C call has none
    r["roofline"] = {**r["roofline"], "empty_launch_us": 0.75}  # as a GPU's check reports it
    assert "an empty launch 0.75 us" in format_report(r)


def test_entry_and_launch_flags_replace_the_seeds(gemm):
    source = gemm.seed.source.replace("abebot_gemm", "my_gemm")
    kernel = gemm.kernel(source, entry="my_gemm", launch={"threads": 1, "note": "mine"})
    assert kernel.entry == "my_gemm" and kernel.source == source
    assert kernel.launch["argtypes"] == gemm.seed.launch["argtypes"] and kernel.launch["note"] == "mine"
    r = gemm.check(source, entry="my_gemm", launch={"note": "mine"})
    assert r["ok"] and r["entry"] == "my_gemm" and r["launch"]["note"] == "mine", verdict(r)
    missing = gemm.check(source)  # the seed's entry name is not in this file
    assert missing["status"] in ("crashed", "compile_error") and "abebot_gemm" in missing["cause"], verdict(missing)


W4A16 = {"m": 2, "n": 256, "k_groups": 4}


def test_the_report_shows_the_one_time_repack_of_a_kernel_reading_repacked_weights(runs_dir):
    """W4A16's C template repacks GPTQ's words into column panels for a kernel whose launch says
    ``layout: panels``: check reports that repack's time (``repack_us``, apart from the timed
    launches) in the result and the text; a kernel reading GPTQ's own words shows none."""
    checker = _checker(runs_dir, "w4a16", W4A16)
    try:
        space = checker.evaluator.template.gene_space()
        genome = space.seed_genomes()[0].replace("memory_pattern", "layout", "panels")
        kernel = checker.evaluator.template.render(space.canonical(genome))
        assert kernel.launch["layout"] == "panels" and checker.seed.launch["layout"] == "gptq"
        r = checker.check(kernel.source, launch=kernel.launch, path="panels.c")
        plain = checker.check(checker.seed.source, path="gptq.c")
    finally:
        checker.close()
    assert r["ok"] and plain["ok"], (verdict(r), verdict(plain))
    json.dumps(r)
    assert r["repack_us"] > 0 and r["repack_us"] == r["evaluation"]["repack_us"]
    text = format_report(r)
    assert f"repack: {r['repack_us']:.2f} us once per case" in text, text
    assert plain["repack_us"] is None and "repack" not in format_report(plain)
    words = W4A16["n"] * W4A16["k_groups"] * 16 * 4
    assert r["extra_bytes"] >= words > plain["extra_bytes"]
    assert f"{words} bytes of repacked weights" in format_report({**r, "repack_bytes": words})


# ---- the planted cheats --------------------------------------------------------------------------

@pytest.mark.parametrize("workload", ["gemm", "rmsnorm"])
def test_a_kernel_that_skips_work_when_the_output_is_written_is_rejected(checkers, workload):
    r = cheat(checkers(workload), f"{workload}_skip_when_written")
    assert r["status"] == "wrong_result", verdict(r)
    assert "nan_output" in r["cause"] or "timed launch" in r["cause"], verdict(r)


def test_an_answer_memoised_by_address_fails_on_new_inputs_in_the_same_buffers(gemm):
    """Timing rotates over cases, so it need never bring an address back (the H200's GPU cheat suite
    passed a memo by address once timing stopped re-launching a case at once): verification does."""
    r = cheat(gemm, "gemm_memo_by_address")
    assert r["status"] == "wrong_result" and "new inputs in the same buffers" in r["cause"], verdict(r)


@pytest.mark.parametrize("workload", ["gemm", "rmsnorm"])
def test_a_kernel_that_memoises_by_address_is_rejected(checkers, workload):
    r = cheat(checkers(workload), f"{workload}_memo_by_address")
    assert r["status"] == "wrong_result", verdict(r)


def test_a_kernel_that_memoises_only_its_last_call_by_address_is_rejected(checkers):
    """One memo slot, the last call's (the H200 suite's memo_by_address): the launch on new inputs in the
    same buffers must follow the launch on those buffers, with no other case between (call 71: batched
    verification launched the other shapes in between, and the cheat was ``ok``)."""
    r = cheat(checkers("rmsnorm"), "rmsnorm_memo_by_address", SLOTS=1)
    assert r["status"] == "wrong_result" and "new inputs in the same buffers" in r["cause"], verdict(r)


def test_a_kernel_that_memoises_by_a_fingerprint_of_its_inputs_is_rejected(gemm):
    r = cheat(gemm, "gemm_memo_by_fingerprint")
    assert r["status"] == "wrong_result", verdict(r)


def test_a_kernel_computing_in_lower_precision_than_its_dtype_is_rejected_on_verification(gemm):
    r = cheat(gemm, "gemm_low_precision")
    assert r["status"] == "wrong_result" and "wrong_result on m=" in r["cause"], verdict(r)


@pytest.mark.parametrize("name", ["gemm_write_before_output", "gemm_write_after_output", "rmsnorm_write_after_output"])
def test_a_kernel_writing_just_outside_its_output_is_rejected(checkers, name):
    r = cheat(checkers(name.split("_")[0]), name)
    assert r["status"] == "wrong_result" and "out_of_bounds_write" in r["cause"], verdict(r)


@pytest.mark.parametrize("workload", ["gemm", "rmsnorm"])
def test_a_kernel_right_only_for_its_first_calls_is_rejected(checkers, workload):
    r = cheat(checkers(workload), f"{workload}_right_first_calls")
    assert r["status"] in ("wrong_result", "unstable"), verdict(r)
    if r["status"] == "wrong_result":
        assert "timed launch" in r["cause"], verdict(r)


def test_a_kernel_nondeterministic_beyond_tolerance_is_rejected(gemm):
    r = cheat(gemm, "gemm_nondeterministic_large")
    assert r["status"] in ("unstable", "wrong_result"), verdict(r)


def test_a_kernel_nondeterministic_within_tolerance_is_ok_but_not_fully_stable(gemm):
    r = cheat(gemm, "gemm_nondeterministic_last_bit")
    assert r["ok"], verdict(r)
    assert r["stability"] < 1.0 and r["evaluation"]["determinism"] < 1.0, verdict(r)


def test_a_memo_padded_to_just_above_the_memory_floor_is_suspect(gemm_compute_bound):
    checker = gemm_compute_bound
    for _ in range(3):
        roof = rooflines(checker.baseline, checker.min_bytes, checker.flops, None)
        spin_us = (roof["memory_us"] * roof["suspect_below_us"]) ** 0.5  # above a byte-only roofline, below the floor
        r = cheat(checker, "gemm_padded_to_memory_floor", SPIN_NS=int(spin_us * 1000))
        if r["status"] == "suspect":
            break
        # Let through: either a loaded moment stretched the cheat to the floor, or the time below the floor
        # made the sandbox measure its peaks again, found them higher (a loaded moment had under-measured
        # them: CI once measured 106 GFLOP/s) and lowered its floor under the cheat. Aim below the sandbox's
        # floor as it is now.
        checker.baseline = checker.evaluator.remeasure_baselines(every=True)
    assert r["status"] == "suspect", f"{verdict(r)}; {roof}"
    assert r["time_us"] >= roof["memory_us"], verdict(r)


def test_a_kernel_reading_the_previous_calls_output_is_rejected(gemm):
    r = cheat(gemm, "gemm_previous_output")
    assert r["status"] == "wrong_result", verdict(r)


# ---- the command line ----------------------------------------------------------------------------

def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "check", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "2"})


def _seed_file(checker: Checker, folder: Path) -> Path:
    path = folder / "seed_gemm.c"
    path.write_text(checker.seed.source)
    return path


def test_the_command_line_exits_0_for_an_ok_kernel_and_prints_json(gemm, tmp_path):
    kernel = _seed_file(gemm, tmp_path)
    r = cli("--workload", "gemm", "--backend", "c", "--kernel", str(kernel), "--problem", json.dumps(GEMM),
            "--runs-dir", str(tmp_path / "runs"), "--seconds", "0.05", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] and result["status"] == "ok" and result["kernel"] == str(kernel)
    assert len(result["shape_errors"]) == len(gemm.workload.shapes(gemm.problem)) and result["baselines"]
    assert "verdict: ok" in r.stderr  # the report goes to stderr beside --json
    assert (tmp_path / "runs" / ".cache").is_dir()


def test_the_command_line_exits_1_for_a_rejected_kernel(tmp_path):
    r = cli("--workload", "gemm", "--backend", "c", "--kernel", str(CHEATS / "gemm_memo_by_address.c"),
            "--problem", json.dumps(GEMM), "--runs-dir", str(tmp_path / "runs"), "--seconds", "0.05")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "verdict: REJECTED wrong_result" in r.stdout and "Traceback" not in r.stderr


def test_the_command_line_exits_2_for_bad_input_with_one_line_on_stderr(tmp_path):
    r = cli("--workload", "conv9d", "--backend", "c", "--kernel", str(CHEATS / "gemm_low_precision.c"),
            "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "unknown workload" in r.stderr
    assert not (tmp_path / "runs").exists()


BAD = [
    (["--workload", "conv9d"], "unknown workload"),
    (["--backend", "vulkan"], "unknown backend"),
    (["--kernel", "no-such-kernel.c"], "no such file"),
    (["--kernel", "tests"], "is a folder"),
    (["--problem", "{not json"], "--problem is not valid JSON"),
    (["--problem", "[64]"], "--problem must be a JSON object"),
    (["--problem", '{"q": 3}'], "no setting q"),
    (["--problem", '{"m": 0}'], "m must be an integer"),
    (["--launch", "{not json"], "--launch is not valid JSON"),
    (["--launch", '"threads"'], "--launch must be a JSON object"),
    (["--entry", "not a name"], "is not a function name"),
    (["--device", "7"], "--device 7 does not exist"),
    (["--seconds", "0"], "--seconds must be"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    runs = tmp_path / "runs"
    base = ["check", "--workload", "gemm", "--backend", "c", "--kernel", str(CHEATS / "gemm_low_precision.c"),
            "--runs-dir", str(runs)]
    assert main(base + args) == 2  # later flags win in argparse
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message.lower() in err.lower(), err
    assert not runs.exists()


def test_check_without_a_kernel_or_with_too_many_contract_names_is_bad_input(tmp_path, capsys):
    assert main(["check", "--workload", "gemm", "--backend", "c", "--runs-dir", str(tmp_path / "r")]) == 2
    assert "--kernel" in capsys.readouterr().err
    assert main(["check", "--contract", "gemm", "c", "more"]) == 2
    assert "at most" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_backend_not_available_here_is_bad_input(tmp_path, capsys):
    if availability("cuda") is None:
        pytest.skip("a CUDA GPU is present here")
    assert main(["check", "--workload", "gemm", "--backend", "cuda", "--kernel", str(CHEATS / "gemm_low_precision.c"),
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "not available here" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_busy_device_is_refused_with_exit_2(tmp_path, capsys):
    from core.run.device_lock import hold_device

    runs = tmp_path / "runs"
    with hold_device(runs, "c", 0, "run held-by-test"):
        code = main(["check", "--workload", "gemm", "--backend", "c", "--kernel", str(CHEATS / "gemm_low_precision.c"),
                     "--problem", json.dumps(GEMM), "--runs-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 2 and "busy" in err and "held-by-test" in err, err
    assert not (runs / ".cache").exists()


# ---- the entry contract --------------------------------------------------------------------------

@pytest.mark.parametrize("pair", contract_pairs(), ids=lambda p: f"{p[0]}-{p[1]}")
def test_the_contract_names_the_entry_every_tensor_and_how_it_is_launched(pair):
    from core.workloads import get_workload

    c = contract(*pair)
    assert c["entry"]
    wl = get_workload(pair[0])
    names = {t.name for t in wl.tensors(c["problem"])}
    bound = " ".join(what for what, _ in c["arguments"])
    assert all(f"`{n}`" in bound for n in names), (names, c["arguments"])
    if c["language"] == "python":
        assert c["launch_def"].startswith("def launch(")
        assert len(c["parameters"]) >= len(c["arguments"])
    else:
        assert c["signature"] and c["entry"] in c["signature"]
        assert len(c["parameters"]) == len(c["arguments"]), (c["signature"], c["arguments"])
        if "argtypes" in c["launch"]:
            assert len(c["launch"]["argtypes"]) == len(c["parameters"])
    if c["language"] == "cuda":
        assert c["grid_example"]["grid"][0] >= 1 and c["grid_example"]["block"][0] >= 32
        assert c["bind_reads"] and "def bind" in c["bind_source"]


def test_the_contract_doc_holds_the_generated_contract():
    doc = (ROOT / "docs" / "contract.md").read_text()
    assert "# Bring your own kernel" in doc and "## The entry contract" in doc
    assert contract_text() in doc, ("docs/contract.md's entry contract differs: "
                                    "paste `python -m core check --contract` into it")


def test_a_wrong_result_shows_the_failing_shapes_own_error_in_the_per_shape_table(gemm):
    r = cheat(gemm, "gemm_low_precision")
    assert r["status"] == "wrong_result", verdict(r)
    failing = r["shape_errors"][-1]  # verification stops at the first shape that fails
    assert failing["max_abs_err"] > 0 and failing["max_abs_err"] == r["max_abs_err"], r["shape_errors"]
    shape = ",".join(f"{k}={v}" for k, v in failing["shape"].items())
    row = next(line for line in format_report(r).splitlines() if shape in line and "max_abs_err" in line)
    assert f"max_abs_err {failing['max_abs_err']:.3g}" in row, format_report(r)


# ---- odd kernel files: fail fast, name the user's own file ---------------------------------------

def test_a_compile_error_comes_before_any_baseline_and_names_the_users_file(tmp_path, capsys):
    kernel = tmp_path / "mine.c"
    kernel.write_text("void abebot_gemm( {\n  int x = ;\n}\n")
    runs = tmp_path / "runs"
    rc = main(["check", "--workload", "gemm", "--backend", "c", "--kernel", str(kernel), "--problem", json.dumps(GEMM),
               "--runs-dir", str(runs), "--json"])
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert rc == 1 and result["status"] == "compile_error", err
    assert result["baselines"] == {} and result["time_us"] is None  # no sandbox, no baseline timing
    assert result["cause"].startswith("mine.c:1:") and str(runs) not in out + err and ".cache" not in out + err, err
    assert "compiler log:" in err and "baselines: not timed" in err


@pytest.mark.parametrize("content, why", [(b"", "is empty"), (b"  \n\t\n", "is empty"),
                                          (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe", "binary"),
                                          (b"\xff\xfe\xfa int", "not a UTF-8 text file")])
def test_an_empty_or_binary_kernel_file_is_bad_input_naming_the_file(tmp_path, capsys, content, why):
    kernel = tmp_path / "mine.c"
    kernel.write_bytes(content)
    runs = tmp_path / "runs"
    assert main(["check", "--workload", "gemm", "--backend", "c", "--kernel", str(kernel), "--runs-dir", str(runs)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and why in err and str(kernel) in err, err
    assert "--kernel" not in err and not runs.exists()


def test_a_check_leaves_no_sandbox_log_behind(gemm, tmp_path):
    import tempfile

    from core.tools.check import check_kernel

    log = Path(tempfile.gettempdir()) / f"abebot-check-{os.getpid()}.log"
    log.unlink(missing_ok=True)
    kernel = _seed_file(gemm, tmp_path)
    result = check_kernel("gemm", "c", kernel, problem=GEMM, runs_dir=tmp_path / "runs", timing_target_s=0.05,
                          stability_launches=4)
    assert result["ok"], verdict(result)
    assert not log.exists()
