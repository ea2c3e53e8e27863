"""The grammar of ``python -m core``: every command, its flags and their help (the commands themselves are
in :mod:`core.cli`). A bad flag is a :class:`UsageError`: one line on stderr, exit status 2."""
from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, fields

from core.config import RunConfig
from core.objectives import OBJECTIVES

DEFAULT_RUNS_DIR = os.environ.get("ABEBOT_RUNS_DIR", "runs")


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, with the field's own help text."""
    for f in fields(RunConfig):
        if f.name in ("problem", "weights"):
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not MISSING else str
        p.add_argument(flag, type=kind, default=None, help=f"{f.metadata['help']} (default {f.default})",
                       choices=f.metadata.get("choices"))
    example = ",".join(f"{o.name}={o.default_weight}" for o in OBJECTIVES)
    p.add_argument("--weights", default=None,
                   help=f"fitness weights as name=value pairs, objectives left out weigh 0 (default {example}; "
                        f"the positional form {','.join(str(o.default_weight) for o in OBJECTIVES)} also works)")
    p.add_argument("--problem", default=None, help='problem sizes as JSON, e.g. \'{"m": 512, "n": 512, "k": 512}\'')


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="abebot", description="AbeBot: evolve kernels with a genetic algorithm.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="start a new run (prints 'run <id>' first)")
    run.add_argument("--config", default=None, metavar="FILE",
                     help="a JSON run configuration (as in a run's config.json); flags given beside it override it")
    _add_config_flags(run)
    run.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help="folder holding one folder per run")
    run.add_argument("--run-id", default=None, help="id for the new run (default: generated)")
    resume = sub.add_parser("resume", help="continue a stopped, paused, killed or crashed run")
    resume.add_argument("run_id")
    resume.add_argument("--keep-paused", action="store_true",
                        help="a run paused (or stopped) from the dashboard resumes paused, waiting for Resume there")
    resume.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    repair = sub.add_parser("repair", help="rebuild a run's live/ Parquet files from its run.duckdb")
    repair.add_argument("run_id")
    repair.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    runs = sub.add_parser("runs", help="table of runs")
    runs.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    sub.add_parser("workloads", help="workloads and the backends available on this machine")
    bench = sub.add_parser("bench", help="re-measure the champion against every baseline, side by side")
    bench.add_argument("run_id")
    bench.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    bench.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    bench.add_argument("--json", action="store_true", help="print the record (bench.json) as JSON instead of a table")
    export = sub.add_parser("export", help="write the champion (or top k / Pareto set) to a folder")
    export.add_argument("run_id")
    export.add_argument("--out", required=True, help="folder to create")
    export.add_argument("--which", choices=("champion", "top", "pareto"), default="champion")
    export.add_argument("-k", type=int, default=5, help="how many for --which top")
    export.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    export.add_argument("--library", action="store_true",
                        help="write the champion as a one-entry kernel library (docs/library.md), re-timed first")
    _add_check_parser(sub)
    from core.tools.library_cli import add_parser as add_library_parser

    add_library_parser(sub, DEFAULT_RUNS_DIR)
    __import__("core.tools.decode_bench", fromlist=["add_parser"]).add_parser(sub)
    from core.tools import replay, sweep  # python -m core sweep / replay (docs/search.md)

    sweep.add_parser(sub, DEFAULT_RUNS_DIR), replay.add_parser(sub)
    return p


def _add_check_parser(sub) -> None:
    check = sub.add_parser("check", help="run any kernel file through the evolution's protocol (exit 0 ok, 1 rejected)")
    check.add_argument("--workload", default=None, help="workload family, e.g. gemm")
    check.add_argument("--backend", default=None, help="c, cuda or triton")
    check.add_argument("--kernel", default=None, metavar="FILE", help="the kernel source file")
    check.add_argument("--problem", default=None, help='problem settings as JSON, e.g. \'{"m": 512, "n": 512, "k": 512}\'')
    check.add_argument("--entry", default=None, help="entry point name (default: the template's)")
    check.add_argument("--launch", default=None, metavar="JSON", help="keys merged into the seed's launch dict")
    check.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR, help="its .cache is the compile cache")
    check.add_argument("--device", type=int, default=0, help="device index for the backend")
    check.add_argument("--seconds", type=float, default=None, help="timed repetitions per kernel, in seconds (default 0.2)")
    check.add_argument("--json", action="store_true", help="print the result as JSON on stdout (the report goes to stderr)")
    check.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,  # core/evaluation/isolation.py
                       help="compile and run the kernel under Linux namespaces (default: where bubblewrap or unshare works)")
    check.add_argument("--contract", nargs="*", default=None, metavar="W B",
                       help="print the entry contract of workload W on backend B (all pairs when left out) and exit")
