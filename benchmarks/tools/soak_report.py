"""Figures of a soak (:mod:`benchmarks.tools.soak`): growth per 1,000 generations, and the Markdown report.

The soak writes its report when it ends; to render it again from the samples it saved (after a change
to this module), with the soak's work folder still there::

    python -m benchmarks.tools.soak_report benchmarks/reports/soak/report.json
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

FREE_MARGIN = 2 << 30  # as benchmarks.tools.soak's


def per_thousand(samples: list[dict], logical: dict[int, int]) -> list[dict]:
    """For each block of 1,000 committed generations: the database file and its WAL at the block's last
    sample, live/ growth scaled to 1,000 generations, the data stored in the block (``logical``:
    block -> bytes of its rows as JSON) and the worker's largest RSS seen in it."""
    blocks: dict[int, list[dict]] = {}
    for s in samples:
        if s["generation"] >= 0:
            blocks.setdefault(s["generation"] // 1000, []).append(s)
    out, data = [], 0
    for block, rows in sorted(blocks.items()):
        first, last = rows[0], rows[-1]
        span = last["generation"] - first["generation"]
        data += logical.get(block, 0)
        out.append({"block": f"{block * 1000}-{block * 1000 + 999}", "generations_seen": f"{first['generation']}-{last['generation']}",
                    "db_file": last.get("db_file_bytes", last["db_bytes"]), "wal": last.get("wal_bytes", 0),
                    "footprint_per_data": last["db_bytes"] / data if data else 0.0, "data": logical.get(block, 0),
                    "live_per_1000": (last["live_bytes"] - first["live_bytes"]) * (1000 / span if span else 0.0),
                    "rss_max": max(r["rss_bytes"] for r in rows),
                    "sandbox_rss_max": max((r.get("sandbox_rss_bytes") or 0 for r in rows), default=0),
                    "sandbox_maps_max": max((r.get("sandbox_maps") or 0 for r in rows), default=0),
                    "launcher_rss_max": max((r.get("launcher_rss_bytes") or 0 for r in rows), default=0),
                    "launcher_maps_max": max((r.get("launcher_maps") or 0 for r in rows), default=0)})
    return out


def sandbox_slopes(samples: list[dict], warmup_s: float = 20.0, min_span: int = 50, role: str = "sandbox") -> list[dict]:
    """The sandbox's RSS and memory mappings per 1,000 generations inside each sandbox process (a crash,
    a kill or a restart starts a new one), by least squares after its first ``warmup_s`` seconds; the
    kernel launcher's (the sandbox's child that loads the kernels) with ``role="launcher"``."""
    pid_key, rss_key, maps_key = f"{role}_pid", f"{role}_rss_bytes", f"{role}_maps"
    boxes: dict[int, list[dict]] = {}
    for s in samples:
        if s.get(pid_key) and s.get(maps_key) is not None and s.get(rss_key):
            boxes.setdefault(s[pid_key], []).append(s)
    out = []
    for pid, rows in boxes.items():
        t0 = rows[0]["t"]
        rows = [r for r in rows if r["t"] - t0 >= warmup_s and r["generation"] >= 0]
        if len(rows) < 3 or rows[-1]["generation"] - rows[0]["generation"] < min_span:
            continue
        xs = [r["generation"] for r in rows]
        out.append({"pid": pid, "generations": f"{xs[0]}-{xs[-1]}", "span": xs[-1] - xs[0],
                    "rss_start": rows[0][rss_key], "rss_end": rows[-1][rss_key],
                    "maps_start": rows[0][maps_key], "maps_end": rows[-1][maps_key],
                    "rss_per_1000": _slope(xs, [r[rss_key] for r in rows]) * 1000,
                    "maps_per_1000": _slope(xs, [r[maps_key] for r in rows]) * 1000})
    return sorted(out, key=lambda r: int(r["generations"].split("-")[0]))


def rss_slopes(samples: list[dict], warmup_s: float = 20.0, min_span: int = 50) -> list[dict]:
    """RSS growth per 1,000 generations inside each worker process (a kill starts a new one), by least
    squares after its first ``warmup_s`` seconds (imports, the sandbox and the first kernels)."""
    segs: dict[int, list[dict]] = {}
    for s in samples:
        segs.setdefault(s["segment"], []).append(s)
    out = []
    for seg, rows in sorted(segs.items()):
        t0 = rows[0]["t"]
        rows = [r for r in rows if r["t"] - t0 >= warmup_s and r["generation"] >= 0]
        if len(rows) < 3 or rows[-1]["generation"] - rows[0]["generation"] < min_span:
            continue
        xs, ys = [r["generation"] for r in rows], [r["rss_bytes"] for r in rows]
        half = next(i for i, x in enumerate(xs) if x - xs[0] >= (xs[-1] - xs[0]) / 2)
        out.append({"segment": seg, "generations": f"{xs[0]}-{xs[-1]}", "span": xs[-1] - xs[0], "rss_start": ys[0], "rss_end": ys[-1],
                    "rss_per_1000": _slope(xs, ys) * 1000, "rss_per_1000_late": _slope(xs[half:], ys[half:]) * 1000})
    return out


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 with fewer than two distinct xs)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def write_report(res, opts, soak, path: Path) -> None:
    """The soak's report as Markdown at ``path`` (its folder is created)."""
    gens = res.generations
    n = len(gens)
    import duckdb

    con = duckdb.connect(str(soak.dir / "run.duckdb"), read_only=True)
    try:
        inds, kernels = (con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("individuals", "kernels"))
        statuses = con.execute("SELECT status, count(*) FROM individuals GROUP BY 1 ORDER BY 2 DESC").fetchall()
        logical: dict[int, int] = {}
        for t in ("individuals", "kernels"):  # the data itself: every stored row as JSON text
            for b, n_bytes in con.execute(f"SELECT generation // 1000, sum(length(to_json({t}))) FROM {t} GROUP BY 1").fetchall():
                logical[int(b)] = logical.get(int(b), 0) + int(n_bytes)
        known_per_genome = _known_bytes(con)
    finally:
        con.close()
    blocks, slopes = per_thousand(res.samples, logical), rss_slopes(res.samples)
    full_disks = getattr(res, "full_disks", []) or []
    notes = getattr(res, "notes", []) or []
    longest = max(slopes, key=lambda r: r["span"], default=None)
    db = soak.dir / "run.duckdb"
    lines = [
        "# Soak report", "",
        f"Command: `nice -n {getattr(res, 'nice', 0)} {res.command}` (from the repository root)", "",
        f"Machine: {platform.node()} · {platform.processor() or platform.machine()} · "
        f"{_cpus()} CPUs (shared with other work) · " + _when(res), "",
        f"Run: `{opts.workload}` on the C backend, problem `{opts.problem}`, population {opts.population}, 1 elite, "
        "2 baseline timings per generation, seed " + str(opts.seed) + ".", "",
        "## Outcome", "",
        f"- Problems found: **{len(res.problems)}**" + "".join(f"\n  - {p}" for p in res.problems),
        *[f"- Skipped: {n}" for n in notes],
        f"- Wall time {res.wall_s:.0f} s; generations committed: **{n}** (0..{gens[-1] if gens else '-'}), "
        f"{n / res.wall_s * 60 if res.wall_s else 0:.0f} per minute including every disturbance; final status "
        f"`{res.final_status}`.",
        f"- Individuals stored {inds} ({inds / n if n else 0:.2f} per generation; population {opts.population}); "
        f"distinct kernels {kernels}; statuses: " + ", ".join(f"{s} {c}" for s, c in statuses) + ".",
        f"- Integrity checks (database opened read-only after every kill and at the end): {len(res.checks)}, "
        "each: generation numbers 0..N with no gap, every generation holding exactly the population, every "
        "generation committed before unchanged (md5 of its individuals), the heartbeat's last generation present.",
        "",
        f"## kill -9 ({len(res.kills)})", "",
        "| # | at s | heartbeat generation before the kill |", "|---|---|---|",
        *[f"| {i + 1} | {k['t']} | {k['heartbeat_generation']} |" for i, k in enumerate(res.kills)], "",
        f"## Crash bursts in the sandbox ({len(res.bursts)})", "",
        f"Each burst makes every kernel loaded by the sandbox raise SIGSEGV for at least {opts.burst_s:.0f} s and "
        "until a crashed candidate is stored (a constructor linked in by a `$CC` wrapper, active while a flag file "
        f"exists). Candidates stored as `crashed` over the whole run: **{res.crashed_rows}**.", "",
        "| # | at s | seconds | candidates crashed (from live/) |", "|---|---|---|---|",
        *[f"| {i + 1} | {b['t']} | {b['seconds']} | {b['crashed']} |" for i, b in enumerate(res.bursts)], "",
        f"## Disk full ({len(res.pauses)})", "",
        (f"The runs folder was a tmpfs of {opts.tmpfs_mib} MiB; `ABEBOT_MIN_FREE_BYTES` was {soak.min_free >> 20} MiB; "
         f"a filler file (`posix_fallocate`) left {soak.margin >> 20} MiB less than that free, was held, then deleted."
         if getattr(soak, "min_free", 0) and soak.min_free < FREE_MARGIN else
         f"`ABEBOT_MIN_FREE_BYTES` was the free space at the start minus {soak.margin >> 30} GiB; a filler file "
         "(`posix_fallocate`) took the free space under it, was held, then deleted."), "",
        "| at s | paused | heartbeat status | no commit while paused | resumed by itself | s until resumed | message |",
        "|---|---|---|---|---|---|---|",
        *[f"| {p['t']} | {p['paused']} | {p['status']} | {p['held_generation']} | {p['resumed']} | {p['seconds']} | "
          f"{p['message']} |" for p in res.pauses], "",
        f"## Full disk during compiles ({len(full_disks)})", "",
        f"The runs folder, its compile cache `.cache` included, on a tmpfs of {opts.tmpfs_mib} MiB (`mount -t tmpfs`); "
        "when a compiler process was running under the worker, a filler file took the tmpfs to ENOSPC (fallocate in "
        f"halving chunks, then 512-byte writes until refused), was held {opts.full_hold_s:.0f} s, then deleted. "
        "`compile waited`: the worker's log says a compile found the disk full and waited for room; `commit waited`: a "
        "commit failed with ENOSPC and was retried. Candidates stored as failed with a full-disk error over the "
        f"whole run: **{getattr(res, 'disk_lethal', 0)}**.", "",
        "| at s | compiling at fill | filled MiB | free after fill | paused | heartbeat status | compile waited | "
        "commit waited | no commit while full | resumed by itself | s until resumed | message |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[f"| {f['t']} | {f['compiling_at_fill']} | {f['filled_bytes'] / 2**20:.1f} | {f['free_after_fill']} B | "
          f"{f['paused']} | {f['status']} | {f['compile_waited']} | {f['commit_waited']} | {f['held_generation']} | "
          f"{f['resumed']} | {f['seconds']} | {f['message']} |" for f in full_disks], "",
        f"## Stop and Pause from control.json, resumed from the CLI ({len(res.controls)})", "",
        "A Stop (the worker exits) or a Pause (then a kill -9, as a reboot would) written to control.json as the "
        "dashboard writes it; then `python -m core resume`, which must clear it, say so, and commit a generation.", "",
        "| at s | command | obeyed | status | resumed and ran | said so | control.json after |",
        "|---|---|---|---|---|---|---|",
        *[f"| {c['t']} | {c['command']} | {c['obeyed']} | {c['status']} | {c['resumed_and_ran']} | {c['said_so']} | "
          f"{c['control_after']} |" for c in res.controls], "",
        f"## Damaged live/ files ({len(res.mirrors)})", "",
        "The newest `gen_*.parquet` of `live/individuals/` and of `live/generations/` truncated to half while the "
        "run goes on; the next commit must rewrite them from run.duckdb.", "",
        "| at s | files | reader said | rewritten | individual rows readable | generation rows readable |",
        "|---|---|---|---|---|---|",
        *[f"| {m['t']} | {m['file']} | {m['reader_said']} | {m['rewritten']} | {m['rows_readable']} | "
          f"{m.get('generations_readable', '-')} |" for m in res.mirrors], "",
        f"## Dashboard restarts ({max(len(res.dashboard) - 1, 0)})", "",
        "`streamlit run app.py` headless on 127.0.0.1, stopped (SIGTERM) and started again while the run went on; "
        "`/_stcore/health` and `/` fetched after every start.", "",
        "| at s | health | page answers | start s |", "|---|---|---|---|",
        *[f"| {d['t']} | {d['health']} | {d['page_answers']} | {d['start_s']} |" for d in res.dashboard], "",
        "## Growth per 1,000 generations", "",
        f"Final database {_mb(_size(db))} (checkpointed on the last stop) for {n} generations: "
        f"{_mb(_size(db) / n * 1000 if n else 0)} per 1,000 generations, {_size(db) / sum(logical.values()):.2f} bytes on "
        f"disk per byte of data stored (every row of individuals and kernels as JSON text, {_mb(sum(logical.values()))}). "
        f"Samples every second ({len(res.samples)}); the WAL grows until DuckDB checkpoints it into the file, so the "
        "file grows in steps and the file + WAL is what the disk holds at a moment.", "",
        "| generations | seen | data stored in the block | database file at its end | WAL at its end | "
        "(file + WAL) / data so far | live/ growth per 1,000 gen | worker RSS max |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {b['block']} | {b['generations_seen']} | {_mb(b['data'])} | {_mb(b['db_file'])} | {_mb(b['wal'])} | "
          f"{b['footprint_per_data']:.2f} | {_mb(b['live_per_1000'])} | {_mb(b['rss_max'])} |" for b in blocks], "",
        "Worker RSS inside one process (each kill starts a new one; least squares after 20 s of warm-up, segments "
        "of at least 50 generations; short segments still include the warm-up of caches):", "",
        "| process | generations | RSS after warm-up | RSS at end | RSS growth per 1,000 gen | same, second half |",
        "|---|---|---|---|---|---|",
        *[f"| {s['segment']} | {s['generations']} | {_mb(s['rss_start'])} | {_mb(s['rss_end'])} | "
          f"{_mb(s['rss_per_1000'])} | {_mb(s['rss_per_1000_late'])} |" for s in slopes], "",
        "The sandbox (the worker's child, the judge, which checks outputs and never loads a kernel) and the launcher "
        "(the judge's child that loads and runs the kernels, `core/evaluation/launcher.py`; both found under the worker "
        "in /proc each second): their RSS and memory mappings (lines of `/proc/<pid>/maps`), largest per block of "
        "1,000 generations, then per process (a crash burst, a kill or a restart starts a new one; least squares "
        "after 20 s of warm-up, processes of at least 50 generations):", "",
        "| generations | sandbox RSS max | sandbox mappings max | launcher RSS max | launcher mappings max |",
        "|---|---|---|---|---|",
        *[f"| {b['block']} | {_mb(b['sandbox_rss_max'])} | {b['sandbox_maps_max']} | "
          f"{_mb(b.get('launcher_rss_max'))} | {b.get('launcher_maps_max') or '-'} |" for b in blocks], "",
        "| process | pid | generations | RSS after warm-up | RSS at end | RSS growth per 1,000 gen | mappings after warm-up "
        "| mappings at end | mappings per 1,000 gen |", "|---|---|---|---|---|---|---|---|---|",
        *[f"| {role} | {b['pid']} | {b['generations']} | {_mb(b['rss_start'])} | {_mb(b['rss_end'])} | "
          f"{_mb(b['rss_per_1000'])} | {b['maps_start']} | {b['maps_end']} | {b['maps_per_1000']:.1f} |"
          for role in ("sandbox", "launcher") for b in sandbox_slopes(res.samples, role=role)], "",
        *([f"In the longest process ({longest['generations']}) the worker's RSS grew by "
           f"{_per_individual(longest['rss_per_1000'], opts.population)} kB per individual stored over the whole "
           f"process and by {_per_individual(longest['rss_per_1000_late'], opts.population)} kB over its second "
           f"half, against {sum(logical.values()) / inds / 1e3:.1f} kB of data per individual. The worker holds "
           "in memory the hash of every genome of the run, so that none is evaluated twice, and the measures "
           "of the population only (`core/search/known.py`); a committed measure is read back from the database when "
           f"needed. Those hashes take {known_per_genome:.0f} bytes per genome (tracemalloc, this run's genomes). "
           "The rest is split by allocator, commit by commit, in a run left alone by "
           "`python -m benchmarks.tools.worker_tracemalloc DIR 900 150 4 --breakdown` (Python's arenas, glibc's heap, "
           "Arrow, DuckDB's buffers, mapped files, the anonymous rest); the writer reopens its database every 256 "
           "commits (`store/writer.py`), which gives DuckDB's share back; docs/multihost.md has the figures. A "
           "process between kills lives a few hundred generations at most here, so its slope is mostly warm-up "
           "(the evaluator's bounded cache of 4,096 machine codes, the compile cache, DuckDB's cache).", ""]
          if longest and inds else []),
        "## Checks", "", *[f"- {c}" for c in res.checks], "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    import dataclasses
    import json

    path.with_suffix(".json").write_text(json.dumps(dataclasses.asdict(res), indent=0))  # every sample, for re-analysis


def _known_bytes(con) -> float:
    """Bytes per genome of what a worker keeps of every genome of the run: the hashes in its
    :class:`core.search.known.KnownMeasures` (built as a resumed worker builds it, with nothing held)."""
    import tracemalloc

    from core.search.known import KnownMeasures

    tracemalloc.start()
    try:  # the hashes are read inside the trace: the worker's set owns its strings
        known = KnownMeasures(None, (r[0] for r in con.execute("SELECT DISTINCT genome_hash FROM individuals").fetchall()))
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return used / len(known) if len(known) else 0.0


def _per_individual(rss_per_1000_generations: float, population: int) -> str:
    return f"{rss_per_1000_generations / (population * 1000) / 1e3:.1f}"


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _when(res) -> str:
    """The soak's start and end (UTC), and when the report was rendered if later."""
    now, start = time.time(), getattr(res, "started_at", None)
    fmt = lambda t, f="%Y-%m-%d %H:%M": time.strftime(f, time.gmtime(t))  # noqa: E731
    if not start:
        return f"rendered {fmt(now)} UTC"
    end = start + res.wall_s
    text = f"soak {fmt(start)}-{fmt(end, '%H:%M')} UTC"
    return text + (f" (report rendered again from report.json at {fmt(now, '%H:%M')})" if now - end > 120 else "")


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def main(argv: list[str]) -> int:
    """Render the report again from a soak's saved samples (its command gives the options)."""
    import json
    import shlex
    import sys
    from types import SimpleNamespace

    root = Path(__file__).resolve().parents[2]
    from benchmarks.tools.soak import FREE_MARGIN, TMPFS_MIN_FREE, Result, parse_options

    saved = Path(argv[0])
    res = Result(**json.loads(saved.read_text()))
    words = shlex.split(res.command)  # python -m benchmarks.tools.soak ARGS...
    opts, report = parse_options(words[words.index("benchmarks.tools.soak") + 1:])
    on_tmpfs = opts.full_disks > 0 and not res.notes
    write_report(res, opts, SimpleNamespace(dir=opts.work_dir / "runs" / res.run_id, min_free=TMPFS_MIN_FREE if on_tmpfs else 0,
                                            margin=TMPFS_MIN_FREE // 2 if on_tmpfs else FREE_MARGIN), report)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
