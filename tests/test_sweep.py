"""``python -m core sweep``: a gene space measured through the normal evaluator into a resumable table."""
from __future__ import annotations

import itertools
import json

import pytest

from core.genome import Genome
from core.search.space import SpaceError, enumerate_space, sample_space, subspace
from core.search.table import COLUMNS, read_header, read_rows, row_from_measures, write_part
from tests.helpers import cli

SWEEP = ["sweep", "--workload", "rmsnorm", "--backend", "c", "--problem", '{"rows": 4, "cols": 128}',
         "--vary", "row_reuse", "--repeats", "2", "--seconds", "0.01"]


def test_enumeration_lists_every_legal_canonical_genome_once(toy_space):
    fixed = subspace(toy_space, toy_space.seed_genomes()[0], ["block", "vector", "layout"])
    genomes = enumerate_space(fixed)
    brute = {(b, v, lay) for b, v, lay in itertools.product((32, 64, 128, 256, 512), (1, 2, 4, 8), ("coalesced", "strided"))
             if b * v <= 1024}
    assert {(g["parallel_config"]["block"], g["memory_pattern"]["vector"], g["memory_pattern"]["layout"])
            for g in genomes} == brute
    assert len({g.hash for g in genomes}) == len(genomes) == len(brute)
    assert all(g["parallel_config"]["grid"] == 1 for g in genomes)  # not varied: the seed's value


def test_a_space_with_a_free_sequence_gene_cannot_be_listed_but_can_be_sampled(toy_space):
    with pytest.raises(SpaceError, match="sequence"):
        enumerate_space(toy_space)
    a, b = sample_space(toy_space, 20, seed=1), sample_space(toy_space, 20, seed=1)
    assert a == b and len({g.hash for g in a}) == 20 and all(toy_space.validate(g) is None for g in a)
    with pytest.raises(SpaceError, match="no gene 'nope'"):
        subspace(toy_space, a[0], ["nope"])


def test_a_row_keeps_every_sample_and_the_median(tmp_path):
    ms = [{"status": "ok", "time_us": t, "speedup": 10 / t, "memory_bytes": 8, "stability": 1.0, "cache": "cold"}
          for t in (3.0, 1.0, 2.0)]
    row = row_from_measures('{"a": 1}', "h1", ms)
    assert row["time_samples_us"] == [3.0, 1.0, 2.0] and row["time_us"] == 2.0 and row["speedup"] == 5.0
    write_part(tmp_path, [row, row_from_measures("{}", "h2", [{"status": "timeout", "cause": "slow"}])])
    rows = read_rows(tmp_path)
    assert [r["genome_hash"] for r in rows] == ["h1", "h2"] and set(rows[0]) == set(COLUMNS)
    assert rows[1]["status"] == "timeout" and rows[1]["time_us"] is None


def test_sweep_measures_through_the_evaluator_records_the_header_and_resumes(tmp_path):
    out = tmp_path / "sw"
    first = cli(*SWEEP, "--out", str(out), "--limit", "1", runs_dir=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    assert len(read_rows(out)) == 1
    second = cli(*SWEEP, "--out", str(out), runs_dir=tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "1 recorded, measuring 1 x 2" in second.stdout
    rows, header = read_rows(out), read_header(out)
    assert len(rows) == 2 and len({r["genome_hash"] for r in rows}) == 2
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(len(r["time_samples_us"]) == 2 and r["speedup_samples"] for r in ok)
    for key in ("workload", "backend", "problem", "cache", "device", "toolchain", "timer_version", "command", "baseline"):
        assert header.get(key), key
    assert header["mode"] == "exhaustive" and header["space_genomes"] == 2
    for r in rows:
        assert Genome.from_json(r["genome"]).hash == r["genome_hash"]
    assert [p.name for p in out.glob("rows-*.parquet")] == ["rows-00000.parquet"]  # finished: compacted
    third = cli(*SWEEP, "--out", str(out), runs_dir=tmp_path)
    assert third.returncode == 0 and "measuring 0" in third.stdout


@pytest.mark.parametrize("extra, says", [
    (["--vary", "stages"], "sequence"),
    (["--vary", "nope"], "no gene 'nope'"),
    (["--repeats", "0"], "--repeats must be"),
    (["--problem", "{"], "not valid JSON"),
    (["--devices", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,"
                   "36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,"
                   "68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,"
                   "100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119,120,121,122,123,"
                   "124,125,126,127,128"], "does not exist"),
])
def test_sweep_bad_input_is_one_line_and_exit_2(tmp_path, extra, says):
    out = cli(*SWEEP, *extra, "--out", str(tmp_path / "o"), runs_dir=tmp_path)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "o").exists()


def test_sweep_refuses_a_folder_it_did_not_write_and_another_sweeps_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "sweep.json").write_text(json.dumps({"workload": "gemm", "backend": "c", "problem": {}}))
    for target, says in (("file", "is a file"), ("full", "not a sweep folder"), ("other", "holds a sweep with")):
        out = cli(*SWEEP, "--out", str(tmp_path / target), runs_dir=tmp_path)
        assert out.returncode == 2 and says in out.stderr, out.stderr
    assert (tmp_path / "full" / "mine.txt").read_text() == "x"
