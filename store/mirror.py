"""The live/ mirror of a run's database: the Parquet files the dashboard reads, written by the run's
one writer after each committed generation, checked against what it wrote and rebuilt from the
database when one is damaged, truncated or missing (a mixin of :class:`store.writer.RunWriter`, which
owns the connection, the lock and ``_seen``/``_live_dirty``)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from store.live_files import DATASETS, LEGACY_GENERATIONS, Part, covered, live_parts
from store.runs import atomic_write_bytes, atomic_write_json, fsync_dir
from store.schema import arrow_schema, select_list

log = logging.getLogger(__name__)
# Chunks of generations rows of one span merged into one once there are this many: a 72-hour run's
# generations/ holds a few dozen files at most (7 gen files and 7 chunks a level: 9 for 5,000
# generations), and each row is rewritten once a level (log8 of the run's length), not at every commit
# as the one file was.
MERGE_CHUNKS = 8
GENERATIONS_EVERY = 8  # generations rows per first chunk (individuals and kernels: the writer's compact_every)


class LiveMirror:
    """The live/ Parquet mirror's half of :class:`store.writer.RunWriter`."""

    def _mirror(self, generation: int, ind: pa.Table, new: pa.Table, gen: pa.Table, baseline_text: str | None) -> None:
        """Mirror the committed ``generation`` to live/: a new part in each dataset's folder (its
        individuals, its new kernels, its generations row), earlier parts untouched but for merges. When a live file changed under us (damaged,
        deleted) or an earlier mirror failed, live/ is repaired from the database instead, which
        writes this generation too. Failures are logged, never raised: the commit stands."""
        try:
            if self._live_dirty or self._live_changed():
                self._sync_live(full=self._live_dirty)  # after a failure, read everything: it may be why
                return
            if baseline_text is not None:
                atomic_write_json(self._live / "baseline.json", json.loads(baseline_text))
            self._write_part("individuals", generation, ind)
            if new.num_rows:
                self._write_part("kernels", generation, new)
            self._write_part("generations", generation, gen)
        except Exception as exc:  # live/ is derived: repaired at the next commit, the run goes on
            log.warning("live/ mirror of generation %s failed: %s", generation, exc)
            self._live_dirty = True

    def repair_live(self) -> list[str]:
        """Read every live file in full and rewrite from the database each one that is missing,
        damaged or disagrees with it; the names repaired (``python -m core repair``)."""
        with self._mutex:
            self.repaired = []
            self._sync_live(full=True)
            return list(self.repaired)

    def _repair_live(self, full: bool) -> None:
        try:
            self._sync_live(full=full)
        except Exception as exc:  # e.g. a full disk: the database is intact, live/ is retried at the next commit
            log.warning("live/ of run %s could not be repaired: %s", self.run_id, exc)
            self._live_dirty = True

    def _live_changed(self) -> bool:
        """Whether a live file this writer wrote or verified has changed, vanished or appeared since."""
        for dataset in DATASETS:
            parts = live_parts(self._live / dataset, include_covered=True)
            known = [p for p in self._seen if p.parent.name == dataset]
            if len(parts) != len(known) or any(self._seen.get(p.path) != _stat(p.path) for p in parts):
                return True
        return False

    def _put(self, path: Path, table: pa.Table) -> None:
        write_parquet(path, table)
        self._seen[path] = _stat(path)

    def _drop(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._seen.pop(path, None)

    def _write_part(self, dataset: str, generation: int, table: pa.Table) -> None:
        self._put(self._live / dataset / f"gen_{generation:08d}.parquet", table)
        self._compact(dataset)

    def _compact(self, dataset: str) -> None:
        """Merge the gen files into one chunk once there are ``compact_every`` of them; for the
        generations rows (a few hundred bytes a generation), also :data:`MERGE_CHUNKS` chunks of one
        span into one, level by level.

        Gen files only ever lie above the last chunk, so chunks never overlap.
        """
        folder = self._live / dataset
        singles = [p for p in live_parts(folder) if p.path.name.startswith("gen_")]
        if len(singles) >= self._every(dataset):
            self._merge(dataset, singles)
        while dataset == "generations":
            chunks = [p for p in live_parts(folder) if p.path.name.startswith("chunk_")]
            span = chunks[-1].last - chunks[-1].first if chunks else None
            tail = []
            for p in reversed(chunks):
                if p.last - p.first != span:
                    break
                tail.insert(0, p)
            if len(tail) < MERGE_CHUNKS:
                return
            self._merge(dataset, tail[-MERGE_CHUNKS:])

    def _every(self, dataset: str) -> int:
        """Gen files merged into a chunk: for the generations rows, read whole by every page, fewer."""
        return min(self.compact_every, GENERATIONS_EVERY) if dataset == "generations" else self.compact_every

    def _merge(self, dataset: str, parts: list[Part]) -> None:
        """Write ``parts`` (consecutive) as one chunk, then delete them."""
        folder = self._live / dataset
        schema = arrow_schema(dataset, self.terms)
        merged = pa.concat_tables([pq.read_table(p.path, schema=schema) for p in parts])
        self._put(folder / f"chunk_{parts[0].first:08d}_{parts[-1].last:08d}.parquet", merged)
        for p in parts:  # readers ignore parts a wider chunk covers, and retry if one vanishes
            self._drop(p.path)
        fsync_dir(folder)

    def _sync_live(self, full: bool = False) -> None:
        """Make live/ match the database: rewrite damaged files, write missing tail generations,
        rebuild if inconsistent.

        Every file's row count is checked against the database; a file is read in full when
        ``full`` or when it changed since this writer wrote or verified it.
        """
        for dataset in DATASETS:
            folder = self._live / dataset
            folder.mkdir(parents=True, exist_ok=True)
            for stale in folder.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
            counts = dict(self._db.execute(f"SELECT generation, count(*) FROM {dataset} GROUP BY generation").fetchall())
            committed = sorted(counts)
            for p in covered(folder):  # leftovers of a compaction cut short
                self._drop(p.path)
            for p in live_parts(folder):
                self._check_part(dataset, p, counts, full)
            parts = live_parts(folder)
            claimed_max = max((p.last for p in parts), default=None)
            have = set(committed)
            done = {g for g in committed if claimed_max is not None and g <= claimed_max}
            ok = (claimed_max is None or claimed_max in have) and all(
                any(p.first <= g <= p.last for p in parts) for g in done) and all(
                p.first in have for p in parts if p.path.name.startswith("gen_"))
            if not ok:
                log.warning("live/%s of run %s disagrees with run.duckdb: rebuilding", dataset, self.run_id)
                for p in parts:
                    self._drop(p.path)
                self.repaired.append(f"{dataset}/ (rebuilt)")
                done, parts = set(), []
            self._rebuild(dataset, [g for g in committed if g not in done], chunked=not parts)
        if (self._live / LEGACY_GENERATIONS).exists():  # a run from before live/generations/: now read from there
            (self._live / LEGACY_GENERATIONS).unlink()
            log.info("live/%s of run %s replaced by live/generations/", LEGACY_GENERATIONS, self.run_id)
        base = self.baseline()
        if base is not None:
            atomic_write_json(self._live / "baseline.json", base)
        self._live_dirty = False

    def _check_part(self, dataset: str, part: "Part", counts: dict, full: bool) -> None:
        """Rewrite ``part`` from the database (or remove it, when the database holds none of its
        generations) unless it reads back with the database's row count."""
        expected = sum(n for g, n in counts.items() if part.first <= g <= part.last)
        sig = _stat(part.path)
        try:
            if full or self._seen.get(part.path) != sig:
                rows = pq.read_table(part.path).num_rows  # every page, not just the footer
            else:
                rows = pq.read_metadata(part.path).num_rows
            if rows == expected and expected:
                self._seen[part.path] = sig
                return
            why = f"{rows} rows, the database has {expected}"
        except Exception as exc:  # truncated, garbage, unreadable
            why = _first_line(exc)
        log.warning("live/%s/%s of run %s is damaged (%s): rewriting it from run.duckdb",
                    dataset, part.path.name, self.run_id, why)
        self.repaired.append(f"{dataset}/{part.path.name}")
        if not expected:
            self._drop(part.path)
            return
        table = self._db.sql(
            f"SELECT {select_list(dataset)} FROM {dataset} WHERE generation BETWEEN {part.first} AND {part.last} "
            "ORDER BY generation, rowid").to_arrow_table().cast(arrow_schema(dataset, self.terms))
        self._put(part.path, table)

    def _rebuild(self, dataset: str, gens: list[int], chunked: bool) -> None:
        """Write ``gens`` of ``dataset`` from the database.

        Into an empty folder (``chunked``) as whole chunks plus gen files for the remainder; above
        existing files as gen files, then compacted, so chunks keep lying below every gen file.
        """
        folder, every = self._live / dataset, self._every(dataset)
        for i in range(0, len(gens), every):
            group = gens[i:i + every]
            table = self._db.sql(
                f"SELECT {select_list(dataset)} FROM {dataset} WHERE generation BETWEEN {group[0]} AND {group[-1]} "
                "ORDER BY generation, rowid").to_arrow_table().cast(arrow_schema(dataset, self.terms))
            if chunked and len(group) == every:
                self._put(folder / f"chunk_{group[0]:08d}_{group[-1]:08d}.parquet", table)
            else:
                for g in group:
                    self._put(folder / f"gen_{g:08d}.parquet", table.filter(pc.equal(table["generation"], g)))
        self._compact(dataset)


def write_parquet(path: Path, table: pa.Table) -> None:
    """Atomically replace ``path`` with ``table`` (temp name in the same folder, fsync, rename).

    The folder is not fsynced: after a power cut a lost rename leaves an older live/, which
    :meth:`RunWriter.open` repairs from the database; the file fsync keeps a kept rename from
    pointing at unwritten data.
    """
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, compression="zstd")
    atomic_write_bytes(path, buf.getvalue().to_pybytes(), durable=True, fsync_folder=False)


def _stat(path: Path) -> tuple[int, int, int] | None:
    """What tells a file we wrote from one changed since: size, mtime and inode (None when missing)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
