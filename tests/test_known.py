"""KnownMeasures: every genome of a run is known, only the ones in use are held in memory."""
from __future__ import annotations

import pytest

from core.search.known import KnownMeasures
from core.run.rows import compact_measure, known_measures
from dashboard.synthetic import build_run
from store.writer import RunWriter


class Store:
    """A run database stand-in that counts its reads."""

    def __init__(self, rows: dict[str, dict]):
        self.rows, self.reads = rows, []

    def evaluations(self, hashes):
        hashes = list(hashes)
        self.reads.append(hashes)
        return {h: self.rows[h] for h in hashes if h in self.rows}


def measure(t: float) -> dict:
    return {"status": "ok", "time_us": t, "source": "x" * 1000, "launch": {"threads": 4}}


def test_committed_measures_leave_memory_and_come_back_from_the_store():
    store = Store({})
    known = KnownMeasures(store.evaluations, compact=compact_measure)
    for i in range(10):
        known[f"g{i}"] = measure(float(i))
    store.rows = {f"g{i}": {"genome_hash": f"g{i}", **measure(float(i))} for i in range(10)}
    known.committed(stored=[f"g{i}" for i in range(10)], keep=["g0", "g1"])
    assert known.held == 2 and len(known) == 10 and set(known) == {f"g{i}" for i in range(10)}
    assert "source" not in known["g0"] and not store.reads  # held: compact, no read
    assert "g7" in known and not store.reads  # membership never reads
    assert known["g7"]["time_us"] == 7.0 and "source" not in known["g7"] and store.reads == [["g7"]]
    assert known["g7"]["time_us"] == 7.0 and len(store.reads) == 1  # held until the next commit
    got = known.load(["g3", "g4", "g0"])
    assert [m["time_us"] for m in got.values()] == [3.0, 4.0, 0.0] and store.reads[-1] == ["g3", "g4"]
    known["g10"] = measure(10.0)
    known.committed(stored=[], keep=["g0"])  # what was read back goes at the next commit; g10 is not stored yet
    assert known.held == 2 and known["g10"]["time_us"] == 10.0 and len(store.reads) == 2


def test_a_never_measured_genome_is_unknown_and_a_lost_row_says_so():
    known = KnownMeasures(Store({}).evaluations, stored=["gone"])
    assert "nope" not in known and known.get("nope") is None
    with pytest.raises(KeyError, match="nope"):
        known.load(["nope"])
    with pytest.raises(KeyError, match="not in the run database"):
        known["gone"]


def test_a_measure_the_store_did_not_get_stays_held():
    """Under nsga2 a child that lost its place is measured but never stored: it stays known."""
    known = KnownMeasures(Store({}).evaluations, compact=compact_measure)
    known["loser"], known["survivor"] = measure(1.0), measure(2.0)
    known.committed(stored=["survivor"], keep=[])
    assert known.held == 1 and known["loser"]["time_us"] == 1.0 and "source" not in known["loser"]


def test_a_run_database_backs_the_worker_known_measures(tmp_path):
    run_id = build_run(tmp_path, generations=6, population=4)
    writer = RunWriter.open(tmp_path / run_id)
    try:
        stored = writer.evaluations()
        known = known_measures(writer)
        assert known.held == 0 and set(known) == set(stored) and len(stored) > 4
        h = sorted(stored)[0]
        assert known[h] == compact_measure(stored[h])
        assert known.load(sorted(stored)[:3]) == {k: compact_measure(stored[k]) for k in sorted(stored)[:3]}
        assert writer.evaluations([h, "never"]) == {h: stored[h]} and writer.evaluations([]) == {}
    finally:
        writer.close()
