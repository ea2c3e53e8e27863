"""``python -m core replay TABLE``: run search strategies against a recorded sweep, without hardware.

Each strategy is replayed from seeds 0..S-1 (:func:`core.search.replay.run`) and summarised
(:mod:`core.search.replay_report`): a table on stdout, or the whole record (curves included) with
``--json``. ``--save`` also writes the record into the sweep folder (``replays/``), where the
dashboard's Replay page finds it.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

REPLAY_STRATEGIES = ("ga", "random", "tpe", "cmaes", "nsga2")


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="run strategies against a recorded sweep table (no hardware needed)")
    p.add_argument("table", help="the sweep folder (python -m core sweep --out)")
    p.add_argument("--strategy", default="ga,random", help=f"comma-separated: {', '.join(REPLAY_STRATEGIES)}")
    p.add_argument("--budget", type=int, default=50, help="evaluations per replay")
    p.add_argument("--seeds", type=int, default=20, help="replays per strategy (seeds 0..S-1)")
    p.add_argument("--init", choices=("random", "seeds"), default="random", help="the GA's initial population")
    p.add_argument("--population", type=int, default=8, help="genomes per generation")
    p.add_argument("--elites", type=int, default=2, help="the GA's elites")
    p.add_argument("--surrogate", type=int, default=0, help="the GA's surrogate filter k (0: off)")
    p.add_argument("--json", action="store_true", help="print the whole record (curves too) as JSON")
    p.add_argument("--save", action="store_true", help="also write the record to TABLE/replays/ for the dashboard")


def _check(args: argparse.Namespace) -> list[str]:
    from core.cli_parser import UsageError

    names = [s.strip() for s in args.strategy.split(",") if s.strip()]
    bad = [s for s in names if s not in REPLAY_STRATEGIES]
    if not names or bad:
        raise UsageError(f"--strategy: unknown {bad[0] if bad else '(none)'!r} (choose from: {', '.join(REPLAY_STRATEGIES)})")
    for name, lo, hi in (("budget", 1, 100_000), ("seeds", 1, 1000), ("population", 2, 4096), ("elites", 0, 4095),
                         ("surrogate", 0, 64)):
        if not lo <= getattr(args, name) <= hi:
            raise UsageError(f"--{name} must be from {lo} to {hi}")
    if not Path(args.table).is_dir():
        raise UsageError(f"no sweep folder {args.table}")
    return list(dict.fromkeys(names))


def replay(table_dir: Path, strategies: list[str], budget: int, seeds: int, init: str = "random", population: int = 8,
           elites: int = 2, surrogate: int = 0) -> dict:
    """The replay record: settings, every run (trace and curve) and the summary per strategy."""
    from core.search import replay as engine
    from core.search.replay_report import summarise

    table = engine.load(table_dir)
    t0 = time.monotonic()
    runs = [engine.run(table, s, budget, seed, init, population, elites, surrogate if s in ("ga", "nsga2") else 0)
            for s in strategies for seed in range(seeds)]
    return {"table": str(table_dir), "workload": table.header["workload"], "backend": table.header["backend"],
            "device": table.header.get("device"), "mode": table.header.get("mode"),
            "settings": {"strategies": strategies, "budget": budget, "seeds": seeds, "init": init,
                         "population": population, "elites": elites, "surrogate": surrogate},
            "seconds": round(time.monotonic() - t0, 2), "runs": runs, "summary": summarise(runs, table, budget)}


def format_table(record: dict) -> str:
    """The summary as a plain-text table."""
    s = record["summary"]
    lines = [f"{record['workload']}/{record['backend']} on {record.get('device')}: {s['genomes']} genomes "
             f"({record.get('mode')}), best known {s['best_known_us']:.3f} us; budget {s['budget']}, "
             f"{record['settings']['seeds']} seeds, init {record['settings']['init']}"]
    head = ("strategy", "to 2% (median)", "reached 2%", "to 5% (median)", "reached 5%", "score vs random",
            "best@25 us", "best@50 us", "wins@25", "wins@50", "not_recorded", "surrogate hits")
    rows = []
    for name, m in s["strategies"].items():
        wins = m.get("wins_over_random", {})
        n = m["seeds"]
        rows.append((name, _num(m["evals_to_2pct_median"]), f"{m['reached_2pct']}/{n}", _num(m["evals_to_5pct_median"]),
                     f"{m['reached_5pct']}/{n}", f"{m['score_median']:+.3f}", _num(m["best_at"].get(25), 3),
                     _num(m["best_at"].get(50), 3), _wins(wins.get(25), n), _wins(wins.get(50), n),
                     str(m["not_recorded"]), _num(m.get("surrogate_hit_rate_median"), 2)))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _num(v, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if digits else f"{v:g}"


def _wins(v, n: int) -> str:
    return "-" if v is None else f"{v}/{n}"


def cmd_replay(args: argparse.Namespace) -> int:
    strategies = _check(args)
    record = replay(Path(args.table), strategies, args.budget, args.seeds, args.init, args.population, args.elites,
                    args.surrogate)
    if args.save:
        folder = Path(args.table) / "replays"
        folder.mkdir(exist_ok=True)
        name = re.sub(r"[^a-z0-9_-]+", "-", f"{'-'.join(strategies)}-b{args.budget}-s{args.seeds}-{args.init}"
                                           f"-p{args.population}" + (f"-k{args.surrogate}" if args.surrogate else ""))
        (folder / f"{name}.json").write_text(json.dumps(record, default=str))
    print(json.dumps(record, default=str) if args.json else format_table(record))
    return 0
