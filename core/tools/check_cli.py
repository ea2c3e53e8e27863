"""``python -m core check``: a kernel you wrote, through the protocol evolution uses (docs/contract.md)."""
from __future__ import annotations

import argparse
import json
import sys


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when the kernel is ``ok``, 1 when it is rejected; bad input raises (exit 2)."""
    from core.tools.check import EXIT_OK, EXIT_REJECTED, check_kernel
    from core.tools.check_result import format_report
    from core.tools.contract import contract_text

    if args.contract is not None:
        if len(args.contract) > 2:
            raise ValueError("--contract takes at most a workload and a backend")
        print(contract_text(*args.contract))
        return EXIT_OK
    missing = [f"--{n}" for n in ("workload", "backend", "kernel") if getattr(args, n) is None]
    if missing:
        raise ValueError(f"check needs {', '.join(missing)} (or --contract)")
    if args.seconds is not None and not 0 < args.seconds <= 60:
        raise ValueError("--seconds must be in (0, 60]")
    options = {} if args.seconds is None else {"timing_target_s": args.seconds}
    result = check_kernel(args.workload, args.backend, args.kernel, problem=args.problem, entry=args.entry,
                          launch=args.launch, runs_dir=args.runs_dir, device=args.device, isolate=args.isolate,
                          say=lambda line: print(line, file=sys.stderr, flush=True), **options)
    report = format_report(result)
    if args.json:
        print(report, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(report)
    return EXIT_OK if result["ok"] else EXIT_REJECTED
