"""Accelerated soak of one run: a tiny CPU workload for many generations while everything around it breaks.

What it does to a real ``python -m core run`` (then ``resume``), on the C backend:

* kill -9 of the worker's whole process group at random moments (a random delay after the
  resumed worker has committed at least one generation, so the run always moves on), then resume;
* crash bursts in the sandbox: the compiler is ``$CC`` (a documented knob of the C backend), here a
  wrapper that links a constructor into every candidate kernel (those compiled into the run's cache;
  not the helpers the sandbox builds for itself); the constructor raises SIGSEGV while the burst flag
  file exists, so during a burst every candidate the sandbox loads kills it, as a crashing kernel
  would (the worker itself never loads kernels);
* the disk filling up: the threshold ``$ABEBOT_MIN_FREE_BYTES`` is set below the free space at the
  start and a filler file (fallocate) takes the free space under it; the run must show a disk-full
  pause and resume by itself when the filler goes;
* a REAL full disk during compiles (``--full-disks``): the runs folder, compile cache (``.cache``)
  included, is a small tmpfs mounted for the soak (``mount -t tmpfs``: root; where mount is refused the
  event is skipped and the report says why); when a compile is in flight (a compiler process under the
  worker; the wrapper holds each compile 1 s during the event, so the compile meets the full disk) a
  filler file takes the tmpfs to ENOSPC and is held, then deleted. The run must show a pause,
  resume by itself, store no candidate as failed for want of space, and lose or duplicate nothing;
* the dashboard (``streamlit run app.py``, headless on a localhost port) stopped and started again
  while the run goes on, its health URL and page checked each time;
* a Stop and a Pause written to control.json, each resumed from the CLI, and damaged live/ files (the
  newest individuals and generations parts).

After every kill it opens the database (read-only, the worker being dead) and checks that every
generation committed before is still there unchanged, that generation numbers are 0..N with no gap
and that no generation holds more individuals than the population. It samples the worker's RSS and
the database's size against the committed generation, and the RSS and memory mappings (lines of
``/proc/<pid>/maps``) of the sandbox (the worker's child, the judge) and of the launcher (the judge's
child that loads the kernels). Long form::

    nice -n 19 python -m benchmarks.tools.soak --minutes 25 --quiet-fraction 0.5 --full-disks 2 \
        --control-cycles 2 --mirror-damages 2 --report benchmarks/reports/soak/report.md

``tests/test_soak.py`` runs the short form through :func:`run_soak`.
"""
from __future__ import annotations

import argparse
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
from benchmarks.tools.soak_machine import (compilers, fill_to_enospc, maps as _maps, read_from as _read_from,  # noqa: E402
                                           rss as _rss, sandbox_pid, launcher_pid, size as _size, tree_size as _tree_size)
from store.runs import read_json  # noqa: E402

FREE_MARGIN = 2 << 30  # the disk-full threshold sits this far below the free space at the start
TMPFS_MIN_FREE = 4 << 20  # on the soak's tmpfs: the threshold, ABEBOT_MIN_FREE_BYTES
TMPFS_CACHE_BYTES = 32 << 20  # on the soak's tmpfs: the compile cache's cap, ABEBOT_CACHE_BYTES
ENOSPC_TEXT = (os.strerror(errno.ENOSPC), "Errno 28", "ENOSPC", os.strerror(errno.EDQUOT))

BURST_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
/* Linked into every kernel by the soak's compiler wrapper: crashes the process loading it during a burst. */
__attribute__((constructor)) static void abebot_soak_crash_burst(void) {
    const char *flag = getenv("ABEBOT_SOAK_CRASH_FLAG");
    if (flag && access(flag, F_OK) == 0) raise(SIGSEGV);
}
"""


@dataclass
class Options:
    minutes: float = 15.0
    generations: int = 1_000_000  # stop at whichever comes first
    kills: int = 12
    crash_bursts: int = 4
    burst_s: float = 4.0
    disk_pauses: int = 2
    pause_hold_s: float = 6.0
    dashboard_restarts: int = 2
    control_cycles: int = 0  # each: a Stop, and a Pause then a kill -9, from control.json, resumed from the CLI
    mirror_damages: int = 0  # a truncated live/ file, which the next commit must rewrite
    full_disks: int = 0  # the runs folder's tmpfs filled to ENOSPC while a candidate compiles
    tmpfs_mib: int = 256  # that tmpfs's size (mounted only when full_disks > 0)
    full_hold_s: float = 6.0
    quiet_fraction: float = 0.3  # the last part of the soak runs without kills, for a clean RSS slope
    population: int = 4
    workload: str = "rmsnorm"
    problem: str = '{"rows": 4, "cols": 32}'
    seed: int = 7
    kill_delay_s: tuple[float, float] = (0.0, 20.0)
    work_dir: Path | None = None
    port: int = 8765
    log: bool = True


@dataclass
class Result:
    command: str = ""
    run_id: str = ""
    generations: list[int] = field(default_factory=list)
    kills: list[dict] = field(default_factory=list)
    bursts: list[dict] = field(default_factory=list)
    pauses: list[dict] = field(default_factory=list)
    dashboard: list[dict] = field(default_factory=list)
    controls: list[dict] = field(default_factory=list)  # a Stop or a Pause from control.json, resumed by `resume`
    mirrors: list[dict] = field(default_factory=list)  # a damaged live/ file and whether the next commit rewrote it
    full_disks: list[dict] = field(default_factory=list)  # the tmpfs filled to ENOSPC during a compile
    notes: list[str] = field(default_factory=list)  # what was skipped and why (a refused mount)
    disk_lethal: int = 0  # candidates stored failed with a full-disk error (must stay 0)
    nice: int = field(default_factory=lambda: os.getpriority(os.PRIO_PROCESS, 0))  # the soak's niceness
    started_at: float = field(default_factory=time.time)  # epoch seconds
    samples: list[dict] = field(default_factory=list)  # t, generation, segment, rss_bytes, db_(file_)bytes, wal_bytes, live_bytes
    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    crashed_rows: int = 0
    wall_s: float = 0.0
    final_status: str = ""


class Soak:
    """One soaked run and the processes around it."""

    def __init__(self, opts: Options):
        self.o = opts
        self.work = Path(opts.work_dir or tempfile.mkdtemp(prefix="abebot-soak-")).absolute()
        self.runs = self.work / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        self.res = Result(run_id=f"soak-{opts.workload}-{opts.seed}")
        self.tmpfs = opts.full_disks > 0 and self._mount_tmpfs()
        self.run_id = self.res.run_id
        self.dir = self.runs / self.run_id
        self.flag = self.work / "crash-burst.flag"
        self.slow_flag = self.work / "slow-compile.flag"
        self.filler = self.runs / ".soak-filler"
        self.proc: subprocess.Popen | None = None
        self.dash: subprocess.Popen | None = None
        self.segment = 0
        self.fingerprints: dict[int, str] = {}
        self.margin = min(FREE_MARGIN, TMPFS_MIN_FREE // 2) if self.tmpfs else FREE_MARGIN
        self.min_free = TMPFS_MIN_FREE if self.tmpfs else shutil.disk_usage(self.runs).free - self.margin
        self.env = dict(os.environ, CC=str(self._compiler()), ABEBOT_SOAK_CRASH_FLAG=str(self.flag),
                        ABEBOT_DISK_POLL_S="0.5", ABEBOT_RUNS_DIR=str(self.runs), PYTHONUNBUFFERED="1",
                        ABEBOT_MIN_FREE_BYTES=str(self.min_free))
        if self.tmpfs:
            self.env["ABEBOT_CACHE_BYTES"] = str(TMPFS_CACHE_BYTES)
        self._stop = threading.Event()

    def _mount_tmpfs(self) -> bool:
        """Mount a tmpfs of ``tmpfs_mib`` on the runs folder; False (and a note) where mount is refused."""
        try:
            out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.o.tmpfs_mib}m", "tmpfs", str(self.runs)],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            out = subprocess.CompletedProcess([], 1, "", str(exc))
        if out.returncode != 0:
            why = (out.stderr or out.stdout).strip().splitlines()
            self.res.notes.append(f"full disk during compiles skipped: mount -t tmpfs refused "
                                  f"({why[0] if why else f'exit {out.returncode}'})")
            return False
        return True

    def _unmount_tmpfs(self) -> None:
        """Copy the run folder off the tmpfs (the compile cache stays), unmount it, put the copy where the
        run was: the report and a later look read it there."""
        keep = self.work / "run-off-tmpfs"
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(self.dir, keep, ignore=shutil.ignore_patterns("worker.lock"))
        for flags in ([], ["-l"]):
            if subprocess.run(["umount", *flags, str(self.runs)], capture_output=True).returncode == 0:
                break
        self.tmpfs = False
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.move(str(keep), str(self.dir))

    def say(self, line: str) -> None:
        if self.o.log:
            print(f"[soak {time.strftime('%H:%M:%S')}] {line}", flush=True)

    def _compiler(self) -> Path:
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
        (self.work / "burst.c").write_text(BURST_C)
        wrapper = self.work / "burst-cc.sh"
        # candidates only (compiled into the run's cache): a helper the sandbox builds for itself with $CC
        # (core/backends/cpu_cache.py) stays sound, so a sandbox started during a burst still times its baseline.
        # While the slow flag exists a compile waits 1 s before the compiler runs: the full-disk event
        # fills the disk in that second, so the compile meets ENOSPC whatever the machine's speed
        wrapper.write_text(f'#!/bin/sh\n[ -e "{self.slow_flag}" ] && sleep 1\n'
                           f'case " $* " in *" -shared "*"{self.runs / ".cache" / "c"}/"*) '
                           f'exec {cc} "$@" "{self.work / "burst.c"}";; esac\n'
                           f'exec {cc} "$@"\n')
        wrapper.chmod(0o755)
        return wrapper

    # -- the worker ------------------------------------------------------------------------------
    def start_worker(self) -> None:
        o = self.o
        if self.segment == 0:
            args = ["run", "--workload", o.workload, "--backend", "c", "--population", str(o.population),
                    "--generations", str(o.generations), "--elites", "1", "--stability-launches", "2",
                    "--baseline-checks", "2", "--seed", str(o.seed), "--problem", o.problem,
                    "--run-id", self.run_id]
        else:
            args = ["resume", self.run_id]
        out = open(self.work / "worker.out", "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "core", *args, "--runs-dir", str(self.runs)], cwd=ROOT,
                                     env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.segment += 1

    def heartbeat(self) -> dict:
        hb = read_json(self.dir / "heartbeat.json")
        return hb if isinstance(hb, dict) else {}

    def committed(self) -> int:
        return int(self.heartbeat().get("generation", -1))

    def wait_for(self, test, timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if test():
                return True
            if self.proc is not None and self.proc.poll() is not None:
                self.res.problems.append(f"worker exited with {self.proc.returncode} while waiting for {what}")
                return False
            time.sleep(0.1)
        self.res.problems.append(f"timed out after {timeout:.0f} s waiting for {what}")
        return False

    def kill_worker(self, reason: str) -> None:
        gen = self.committed()
        os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and its sandbox, no chance to clean up
        self.proc.wait(timeout=30)
        self.res.kills.append({"t": round(self.elapsed(), 1), "heartbeat_generation": gen, "reason": reason})
        self.verify(f"after kill {len(self.res.kills)}", heartbeat_generation=gen)

    # -- checks ----------------------------------------------------------------------------------
    def verify(self, when: str, heartbeat_generation: int | None = None) -> None:
        """Committed generations are contiguous, unchanged since the last look and never duplicated."""
        import duckdb

        con = duckdb.connect(str(self.dir / "run.duckdb"), read_only=True)
        try:
            gens = [g for (g,) in con.execute("SELECT generation FROM generations ORDER BY generation").fetchall()]
            rows = con.execute(
                "SELECT generation, count(*), md5(string_agg(genome_hash || ':' || coalesce(CAST(fitness AS VARCHAR), '')"
                " || ':' || status || ':' || origin, ',' ORDER BY genome_hash, origin)) FROM individuals GROUP BY ALL"
            ).fetchall()
            self.res.crashed_rows = con.execute("SELECT count(*) FROM individuals WHERE status = 'crashed'").fetchone()[0]
            like = " OR ".join("coalesce(cause, '') ILIKE ?" for _ in ENOSPC_TEXT)
            disk_lethal = con.execute(f"SELECT count(*) FROM individuals WHERE status <> 'ok' AND ({like})",
                                      [f"%{t}%" for t in ENOSPC_TEXT]).fetchone()[0]
        finally:
            con.close()
        prints = {g: fp for g, _, fp in rows}
        if gens != list(range(len(gens))):
            self.res.problems.append(f"{when}: generation numbers not contiguous ({_gaps(gens)})")
        partial = [g for g, n, _ in rows if n != self.o.population]
        if partial:
            self.res.problems.append(f"{when}: generations {partial[:5]} do not hold exactly {self.o.population} individuals")
        if set(prints) != set(gens):
            self.res.problems.append(f"{when}: individuals and generations disagree on which generations exist")
        changed = [g for g, fp in self.fingerprints.items() if prints.get(g) != fp]
        if changed:
            self.res.problems.append(f"{when}: committed generations lost or changed: {changed[:5]}")
        if heartbeat_generation is not None and heartbeat_generation > (gens[-1] if gens else -1):
            self.res.problems.append(f"{when}: heartbeat said generation {heartbeat_generation} was committed, "
                                     f"the database ends at {gens[-1] if gens else None}")
        if disk_lethal > self.res.disk_lethal:
            self.res.problems.append(f"{when}: {disk_lethal} candidates stored as failed with a full-disk error")
        self.res.disk_lethal = disk_lethal
        self.fingerprints = prints
        self.res.generations = gens
        self.res.checks.append(f"{when}: generations 0..{gens[-1] if gens else -1} contiguous, "
                               f"{len(self.fingerprints)} unchanged")

    # -- samplers and disturbances ---------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def sampler(self) -> None:
        while not self._stop.wait(1.0):
            proc = self.proc
            if proc is None or proc.poll() is not None:
                continue
            rss = _rss(proc.pid)
            if rss is None:
                continue
            db, wal = _size(self.dir / "run.duckdb"), _size(self.dir / "run.duckdb.wal")
            box = sandbox_pid(proc.pid)
            launcher = launcher_pid(box) if box else None  # the process that loads the kernels (issue 36, item 1)
            self.res.samples.append({"t": round(self.elapsed(), 1), "generation": self.committed(), "segment": self.segment,
                                     "rss_bytes": rss, "db_bytes": db + wal, "db_file_bytes": db, "wal_bytes": wal,
                                     "live_bytes": _tree_size(self.dir / "live"), "sandbox_pid": box,
                                     "sandbox_rss_bytes": _rss(box) if box else None,
                                     "sandbox_maps": _maps(box) if box else None, "launcher_pid": launcher,
                                     "launcher_rss_bytes": _rss(launcher) if launcher else None,
                                     "launcher_maps": _maps(launcher) if launcher else None})

    def crashed_live(self) -> int:
        """Candidates stored as crashed, read from live/ as the dashboard reads them."""
        from store.reader import RunReader

        try:
            inds = RunReader(self.dir).individuals(columns=["status"])
        except Exception:  # a live file replaced under us: the next look sees the new one
            return -1
        return int((inds["status"] == "crashed").sum()) if "status" in inds else 0

    def disk_lethal_live(self) -> int:
        """Candidates stored as failed with a full-disk error, read from live/ (the worker holds the database)."""
        from store.reader import RunReader

        try:
            inds = RunReader(self.dir).individuals(columns=["status", "cause"])
        except Exception:  # noqa: BLE001 - a live file replaced under us: the check at the end reads the database
            return 0
        if "cause" not in inds:
            return 0
        bad = inds[inds["status"] != "ok"]["cause"].fillna("").astype(str)
        return int(sum(any(t.lower() in c.lower() for t in ENOSPC_TEXT) for c in bad))

    def crash_burst(self) -> None:
        """Kernels crash while the flag exists: at least ``burst_s``, and on until a crash is stored
        (a burst that falls on a resume's start-up would otherwise crash nothing), at most 4 times as long."""
        t, before = self.elapsed(), self.crashed_live()
        self.flag.touch()
        time.sleep(self.o.burst_s)
        while self.crashed_live() <= before and self.elapsed() - t < 4 * self.o.burst_s and not self._stop.is_set():
            time.sleep(0.5)
        self.flag.unlink(missing_ok=True)
        after = self.crashed_live()
        self.res.bursts.append({"t": round(t, 1), "seconds": round(self.elapsed() - t, 1), "crashed": after - before})
        self.say(f"crash burst of {self.elapsed() - t:.0f} s: {after - before} candidates crashed")

    def disk_pause(self) -> None:
        """Take the free space under the threshold, see the run pause, give it back, see it resume."""
        t = self.elapsed()
        free = shutil.disk_usage(self.runs).free
        need = free - self.min_free + self.margin  # leaves `margin` less than the threshold free
        with open(self.filler, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, min(need, max(free - (64 << 20), 1)) if not self.tmpfs else max(need, 1))
        paused = self.wait_for(lambda: self.heartbeat().get("paused_for") == "disk", 120, "the disk-full pause")
        hb = self.heartbeat()
        gen_at_pause = self.committed()
        time.sleep(self.o.pause_hold_s)
        held = self.committed() == gen_at_pause
        if paused and not held:
            self.res.problems.append("a generation was committed during the disk-full pause")
        self.filler.unlink(missing_ok=True)
        resumed = self.wait_for(lambda: self.heartbeat().get("status") == "running" and self.committed() > gen_at_pause,
                                180, "the run to resume after the disk-full pause")
        self.res.pauses.append({"t": round(t, 1), "paused": paused, "status": hb.get("status"), "message": hb.get("message"),
                                "held_generation": held, "resumed": resumed, "seconds": round(self.elapsed() - t, 1)})
        self.say(f"disk pause: paused={paused} resumed={resumed} ({hb.get('message', '')[:80]})")

    def full_disk(self) -> None:
        """When a compile is in flight, fill the runs folder's tmpfs to ENOSPC, hold it, delete the filler:
        the run must pause (a compile waiting for room, or the check before a commit), resume by itself,
        and store no candidate as failed for want of space."""
        t, log = self.elapsed(), self.dir / "worker.log"
        log_from = _size(log)
        deadline, compiling = time.monotonic() + 120, False
        self.slow_flag.touch()
        try:
            while time.monotonic() < deadline and not compiling and self.proc.poll() is None:
                compiling = bool(compilers(self.proc.pid))
                time.sleep(0.02)
            filled = fill_to_enospc(self.filler)
        finally:
            self.slow_flag.unlink(missing_ok=True)
        free_after_fill = shutil.disk_usage(self.runs).free
        paused = self.wait_for(lambda: self.heartbeat().get("paused_for") == "disk", 120, "the pause on a full disk")
        hb, gen_at_pause = self.heartbeat(), self.committed()
        time.sleep(self.o.full_hold_s)
        held = self.committed() == gen_at_pause
        self.filler.unlink(missing_ok=True)
        resumed = self.wait_for(lambda: self.heartbeat().get("status") == "running" and self.committed() > gen_at_pause,
                                180, "the run to resume after the full disk")
        text = _read_from(log, log_from)
        row = {"t": round(t, 1), "compiling_at_fill": compiling, "filled_bytes": filled,
               "free_after_fill": free_after_fill, "paused": paused, "status": hb.get("status"),
               "message": hb.get("message"), "compile_waited": "a compile found the disk full" in text,
               "commit_waited": "not committed, the disk is full" in text, "held_generation": held,
               "resumed": resumed, "seconds": round(self.elapsed() - t, 1)}
        row["disk_lethal_live"] = self.disk_lethal_live()
        self.res.full_disks.append(row)
        if not (paused and resumed) or row["disk_lethal_live"]:
            self.res.problems.append(f"a full disk during compiles was not ridden out: {row}")
        self.say(f"full disk: {row}")

    def control_then_resume(self, command: str) -> None:
        """A Stop (the worker exits) or a Pause (then the worker is killed, as by a reboot) written to
        control.json as the dashboard writes it; then ``resume`` from the CLI must clear it and run."""
        from store.control import read_control, write_control

        t, gen = self.elapsed(), self.committed()
        write_control(self.dir, command)
        if command == "stop":
            obeyed = self.wait_for(lambda: self.proc.poll() is not None, 240, "the worker to obey a stop")
            status = self.heartbeat().get("status")
        else:
            obeyed = self.wait_for(lambda: self.heartbeat().get("status") == "paused", 240, "the worker to pause")
            status = self.heartbeat().get("status")
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.verify(f"after the {command} request")
        before = self.committed()
        self.start_worker()  # `python -m core resume`
        ran = self.wait_for(lambda: self.committed() > before, 240, f"a generation after resuming a {command}")
        out = (self.work / "worker.out").read_text(errors="replace")
        said = f"asked the run to be {'stopped' if command == 'stop' else 'paused'}; cleared: resuming" in out
        row = {"t": round(t, 1), "command": command, "generation": gen, "obeyed": obeyed, "status": status,
               "resumed_and_ran": ran, "said_so": said, "control_after": read_control(self.dir)}
        self.res.controls.append(row)
        if not (obeyed and ran and said):
            self.res.problems.append(f"a {command} from control.json was not resumed from the CLI: {row}")
        self.say(f"{command} from control.json, resumed from the CLI: {row}")

    def damage_mirror(self) -> None:
        """Truncate the newest gen file of live/individuals/ and of live/generations/; the next commit
        must rewrite them (readers say one line meanwhile)."""
        import pyarrow.parquet as pq

        from store.reader import LiveDamaged, RunReader

        t = self.elapsed()
        targets = []
        for dataset in ("individuals", "generations"):
            files = sorted((self.dir / "live" / dataset).glob("gen_*.parquet"))
            if not files:
                continue
            try:
                data = files[-1].read_bytes()
                files[-1].write_bytes(data[: len(data) // 2])
                targets.append(files[-1])
            except OSError:
                continue  # compacted away under us: nothing damaged
        if not targets:
            return
        try:
            RunReader(self.dir).individuals()
            RunReader(self.dir).generations()
            seen = "no error (rewritten already)"
        except LiveDamaged as exc:
            seen = str(exc).split(" (")[0]
        gen = self.committed()
        self.wait_for(lambda: self.committed() > gen + 1, 240, "two commits after damaging live/")

        def readable(target: Path) -> bool:
            try:
                return not target.exists() or pq.read_table(target).num_rows > 0
            except Exception:  # noqa: BLE001 - still damaged
                return False

        ok = all(readable(target) for target in targets)
        rows = len(RunReader(self.dir).individuals()) if ok else None
        gens = len(RunReader(self.dir).generations()) if ok else None
        row = {"t": round(t, 1), "file": ", ".join(f"{p.parent.name}/{p.name}" for p in targets), "reader_said": seen,
               "rewritten": ok, "rows_readable": rows, "generations_readable": gens}
        self.res.mirrors.append(row)
        if not ok:
            self.res.problems.append(f"a damaged live/ file was not rewritten by the next commit: {row}")
        self.say(f"damaged {row['file']}: {row}")

    def start_dashboard(self) -> dict:
        with socket.socket() as probe:  # a page answered by someone else's server would prove nothing
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the last server's TIME_WAITs are fine
            probe.bind(("127.0.0.1", self.o.port))
        t = time.monotonic()
        self.dash = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address",
             "127.0.0.1", "--server.port", str(self.o.port), "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=self.env, stdout=open(self.work / "dashboard.out", "a"), stderr=subprocess.STDOUT,
            start_new_session=True)
        base = f"http://127.0.0.1:{self.o.port}"
        health = page = None
        while time.monotonic() - t < 90 and health != "ok":
            health = _get(f"{base}/_stcore/health")
            time.sleep(0.3)
        page = _get(base + "/")
        ok = health == "ok" and page is not None and "<html" in page.lower()
        row = {"t": round(self.elapsed(), 1), "health": health, "page_answers": ok, "start_s": round(time.monotonic() - t, 1)}
        self.res.dashboard.append(row)
        if not ok:
            self.res.problems.append(f"dashboard did not answer after a (re)start: health={health!r}")
        return row

    def stop_dashboard(self) -> None:
        if self.dash and self.dash.poll() is None:
            os.killpg(self.dash.pid, signal.SIGTERM)
            try:
                self.dash.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.dash.pid, signal.SIGKILL)
                self.dash.wait()

    # -- the schedule ----------------------------------------------------------------------------
    def run(self) -> Result:
        o = self.o
        rng = random.Random(o.seed)
        self.t0 = time.monotonic()
        budget = o.minutes * 60
        noisy_until = budget * (1 - o.quiet_fraction)
        events = sorted([(rng.uniform(0.1, 0.9) * noisy_until, "burst") for _ in range(o.crash_bursts)] +
                        [(budget * (i + 1) / (o.disk_pauses + 1) * 0.9, "disk") for i in range(o.disk_pauses)] +
                        [(budget * (i + 1) / (o.dashboard_restarts + 1), "dash") for i in range(o.dashboard_restarts)] +
                        [(noisy_until * (i + 0.3) / max(o.control_cycles, 1), c) for i in range(o.control_cycles)
                         for c in ("stop", "pause")] +
                        [(noisy_until * (i + 0.6) / max(o.mirror_damages, 1), "mirror") for i in range(o.mirror_damages)] +
                        [(noisy_until * (i + 0.45) / max(o.full_disks, 1), "full") for i in range(o.full_disks)
                         if self.tmpfs])
        kill_every = noisy_until / max(o.kills, 1)
        sampler = threading.Thread(target=self.sampler, daemon=True)
        sampler.start()
        if o.dashboard_restarts:
            self.start_dashboard()
        self.start_worker()
        self.wait_for(lambda: self.committed() >= 0, 180, "generation 0")
        next_kill = rng.random() * kill_every  # the k-th kill falls at a random moment of slot k
        try:
            while self.elapsed() < budget and not self.res.problems:
                if self.proc.poll() is not None:
                    if self.heartbeat().get("status") == "finished":
                        break
                    self.res.problems.append(f"worker exited by itself with {self.proc.returncode}")
                    break
                if events and events[0][0] <= self.elapsed():
                    _, kind = events.pop(0)
                    if kind == "burst":
                        threading.Thread(target=self.crash_burst, daemon=True).start()
                    elif kind == "disk":
                        self.disk_pause()
                    elif kind in ("stop", "pause"):
                        self.control_then_resume(kind)
                    elif kind == "mirror":
                        self.damage_mirror()
                    elif kind == "full":
                        self.full_disk()
                    else:
                        self.stop_dashboard()
                        self.say(f"dashboard restarted: {self.start_dashboard()}")
                    continue
                if len(self.res.kills) < o.kills and self.elapsed() >= next_kill:
                    self.kill_worker("scheduled")
                    self.say(f"kill {len(self.res.kills)} at generation {self.res.generations[-1]}; resuming")
                    self.start_worker()
                    resumed_at = self.res.generations[-1]
                    self.wait_for(lambda: self.committed() > resumed_at, 180, "a generation after resume")
                    # a random moment: some way into a later generation, never before the next slot
                    next_kill = max(self.elapsed() + rng.uniform(*o.kill_delay_s),
                                    (len(self.res.kills) + rng.random()) * kill_every)
                    continue
                time.sleep(0.2)
        finally:
            self.finish()
        return self.res

    def finish(self) -> None:
        self.flag.unlink(missing_ok=True)
        self.slow_flag.unlink(missing_ok=True)
        self.filler.unlink(missing_ok=True)
        if self.proc is not None and self.proc.poll() is None:
            from store.control import write_control

            write_control(self.dir, "stop")
            try:
                self.proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.res.problems.append("the worker did not stop within 180 s of a stop request")
        self._stop.set()
        self.stop_dashboard()
        self.res.final_status = str(self.heartbeat().get("status"))
        self.verify("at the end")
        self.res.wall_s = round(self.elapsed(), 1)
        if self.tmpfs:
            self._unmount_tmpfs()


def _gaps(gens: list[int]) -> str:
    missing = sorted(set(range(gens[-1] + 1)) - set(gens)) if gens else []
    return f"missing {missing[:5]}" if missing else f"duplicates or a bad start: {gens[:5]}"


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode(errors="replace").strip() if r.status == 200 else None
    except OSError:
        return None


def run_soak(opts: Options) -> Result:
    """Run the soak described by ``opts`` and return what happened (``problems`` empty when it held)."""
    return Soak(opts).run()


def parse_options(argv: list[str]) -> tuple[Options, Path]:
    """The soak's options and the report's path from its command-line arguments."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="wall-clock length of the soak")
    ap.add_argument("--generations", type=int, default=1_000_000, help="stop after this many generations")
    ap.add_argument("--kills", type=int, default=12, help="kill -9's of the worker (all before the quiet part)")
    ap.add_argument("--crash-bursts", type=int, default=4)
    ap.add_argument("--burst-s", type=float, default=4.0, help="shortest crash burst")
    ap.add_argument("--disk-pauses", type=int, default=2)
    ap.add_argument("--dashboard-restarts", type=int, default=2, help="0: no dashboard")
    ap.add_argument("--control-cycles", type=int, default=1, help="each: a Stop and a Pause from control.json, "
                    "resumed from the CLI")
    ap.add_argument("--mirror-damages", type=int, default=1, help="live/ files truncated, to be rewritten")
    ap.add_argument("--full-disks", type=int, default=0, help="fills of the runs folder's tmpfs to ENOSPC while a "
                    "candidate compiles (mounts the tmpfs: root)")
    ap.add_argument("--tmpfs-mib", type=int, default=256, help="size of that tmpfs")
    ap.add_argument("--quiet-fraction", type=float, default=0.3, help="last part of the soak without kills")
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--work-dir", type=Path, default=None, help="kept afterwards (default: a fresh temporary folder)")
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "reports" / "soak" / "report.md",
                    help="the Markdown report; every sample goes beside it as .json")
    a = ap.parse_args(argv)
    return Options(minutes=a.minutes, generations=a.generations, kills=a.kills, crash_bursts=a.crash_bursts,
                   burst_s=a.burst_s, disk_pauses=a.disk_pauses, dashboard_restarts=a.dashboard_restarts,
                   control_cycles=a.control_cycles, mirror_damages=a.mirror_damages, full_disks=a.full_disks,
                   tmpfs_mib=a.tmpfs_mib,
                   quiet_fraction=a.quiet_fraction, population=a.population, seed=a.seed, port=a.port,
                   work_dir=a.work_dir), a.report


def main(argv: list[str] | None = None) -> int:
    from benchmarks.tools.soak_report import write_report

    argv = sys.argv[1:] if argv is None else argv
    opts, report = parse_options(argv)
    soak = Soak(opts)
    soak.res.command = " ".join(["python", "-m", "benchmarks.tools.soak", *argv])
    res = soak.run()
    write_report(res, opts, soak, report)
    print(f"report: {report}; problems: {len(res.problems)}")
    return 1 if res.problems else 0


if __name__ == "__main__":
    sys.exit(main())
