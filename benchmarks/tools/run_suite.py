#!/usr/bin/env python3
"""Run a device suite: one declarative file of ``benchmarks/suites/`` in place of a shell script.

    python3 -m benchmarks.tools.run_suite benchmarks/suites/NAME.json OUT [--set VAR=VALUE ...] [--dry-run]

A device call is then a suite file plus this one command, run from the repository root. A suite
is a JSON object:

- ``suite``: its name; ``script`` / ``calls``: the old ``benchmarks/gpu_*.sh`` it replaces and the
  device calls that script ran (``benchmarks/raw/CALL.tar.xz`` hold their output, most with the
  exact command in ``CALL/COMMAND.txt``); ``about``: what it measures;
- ``vars``: named strings (genomes, mostly) that ``{NAME}`` in a step's arguments stands for,
  besides ``{OUT}`` (the output folder); ``--set NAME=VALUE`` replaces one for a run;
- ``steps``, run in order, each one of
  ``{"tool": "gpu_kernel_sweep", "args": [...]}`` (``python3 -m benchmarks.tools.TOOL ARGS``),
  ``{"run": [...]}`` (any other command: ``ncu ...``, ``python3 -m core ...``) or
  ``{"echo": "text"}``, with optional ``timeout`` (seconds; a step past it is killed and the suite
  goes on, as ``timeout`` did in the scripts), ``log`` (a file under OUT that takes stdout and
  stderr; the first step to name a log starts it, ``"append": true`` adds to it), ``stderr``
  (``"inherit"`` or a file under OUT, when it is not the log's) and ``pipe`` (commands the output
  goes through first, such as ``[["grep", "-E", "WRONG|us$"], ["head", "-12"]]``) and ``when``
  (a string such as ``"{PAIRS}"``: the step runs only if it expands to something non-empty);
- ``show``: shell lines run at the end, with ``$OUT`` set, that print the summary the call reports.

A failed step does not stop the suite (the scripts ran under ``set -u`` only); the exit status is
the number of steps that failed or timed out (at most 100).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")


def load(path: Path) -> dict:
    suite = json.loads(path.read_text())
    for i, step in enumerate(suite.get("steps", [])):
        kinds = [k for k in ("tool", "run", "echo") if k in step]
        if len(kinds) != 1:
            raise ValueError(f"{path}: step {i} needs exactly one of tool, run, echo")
    return suite


def expand(text: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def command(step: dict, values: dict[str, str]) -> list[str]:
    if "tool" in step:
        argv = [sys.executable, "-m", f"benchmarks.tools.{step['tool']}", *step.get("args", [])]
    else:
        argv = list(step["run"])
    return [expand(a, values) for a in argv]


def as_shell(step: dict, values: dict[str, str]) -> str:
    """The step as one shell line (for --dry-run and the log of what ran)."""
    if "echo" in step:
        line = "echo " + shlex.quote(expand(step["echo"], values))
    else:
        line = " ".join(shlex.quote(a) for a in command(step, values))
        if step.get("timeout"):
            line = f"timeout {step['timeout']} {line}"
    for cmd in step.get("pipe", []):
        line += " 2>&1 | " + " ".join(shlex.quote(expand(a, values)) for a in cmd)
    if step.get("log"):
        line += (" >> " if step.get("append") else " > ") + shlex.quote(str(Path(values["OUT"]) / step["log"]))
        line += "" if step.get("stderr") else " 2>&1"
    return line


def run_step(step: dict, values: dict[str, str], out: Path) -> int:
    sink = None
    if step.get("log"):
        (out / step["log"]).parent.mkdir(parents=True, exist_ok=True)
        sink = open(out / step["log"], "a" if step.get("append") else "w")
    try:
        if "echo" in step:
            print(expand(step["echo"], values), file=sink or sys.stdout, flush=True)
            return 0
        err = subprocess.STDOUT if sink else None
        if step.get("stderr") and step["stderr"] != "inherit":
            err = open(out / step["stderr"], "a")
        elif step.get("stderr") == "inherit":
            err = None
        filters = [[expand(a, values) for a in cmd] for cmd in step.get("pipe", [])]
        head = subprocess.Popen(command(step, values), cwd=ROOT, stdout=subprocess.PIPE if filters else sink,
                                stderr=subprocess.STDOUT if filters else err)
        procs, prev = [head], head
        for i, cmd in enumerate(filters):
            last = i == len(filters) - 1
            p = subprocess.Popen(cmd, cwd=ROOT, stdin=prev.stdout, stdout=sink if last else subprocess.PIPE,
                                 stderr=sink or None)
            prev.stdout.close()
            procs.append(p)
            prev = p
        try:
            head.wait(timeout=step.get("timeout"))
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
            print(f"[run_suite] timed out after {step['timeout']} s: {as_shell(step, values)}", file=sys.stderr)
            for p in procs[1:]:
                p.wait()
            return 124
        for p in procs[1:]:
            p.wait()
        return head.returncode
    finally:
        if sink:
            sink.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", type=Path, help="a file of benchmarks/suites/")
    ap.add_argument("out", type=Path, help="the output folder (made if missing)")
    ap.add_argument("--set", action="append", default=[], metavar="VAR=VALUE", help="replace one of the suite's vars")
    ap.add_argument("--dry-run", action="store_true", help="print the steps as shell lines and run nothing")
    args = ap.parse_args(argv)
    suite = load(args.suite)
    out = args.out.resolve()
    values = {k: str(v) for k, v in suite.get("vars", {}).items()}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or name not in values:
            ap.error(f"--set {item}: not one of the suite's vars ({', '.join(values) or 'none'})")
        values[name] = value
    values = {k: expand(v, values) for k, v in values.items()}
    values["OUT"] = str(out)
    lines = [as_shell(s, values) for s in suite["steps"] if "when" not in s or expand(s["when"], values)]
    if args.dry_run:
        print("\n".join(lines + ["# show", *suite.get("show", [])]))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    (out / "SUITE.txt").write_text(f"# {args.suite} ({suite.get('script', '')})\n" + "\n".join(lines) + "\n")
    os.environ["PYTHONUNBUFFERED"] = "1"
    failed = 0
    for step in suite["steps"]:
        if "when" in step and not expand(step["when"], values):
            continue
        failed += run_step(step, values, out) != 0
    for line in suite.get("show", []):
        subprocess.run(["bash", "-c", line], cwd=ROOT, env={**os.environ, "OUT": str(out)})
    return min(failed, 100)


if __name__ == "__main__":
    raise SystemExit(main())
