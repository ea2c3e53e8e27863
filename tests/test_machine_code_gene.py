"""The machine_code gene group: off by default (genomes, hashes and stored genomes unchanged), and
when a run turns it on, an edit list that mutates, crosses over slot by slot and stays canonical."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random

import pytest

from core.backends.ptx.carry import carried
from core.backends.ptx.edits import canonical
from core.genome import GROUPS, Genome
from core.search.operators import crossover, make_valid, mutate
from core.workloads import get_workload
from tests.helpers import SIMULATED_GPU

PAIRS = [("rmsnorm", "cuda"), ("rmsnorm", "triton"), ("rope", "cuda"), ("rope", "triton"), ("w4a16", "cuda"),
         ("w4a16", "triton")]
OLD = {"parallel_config": {"block": 128}, "memory_pattern": {"vec": 4}, "register_allocation": {"acc": "registers"},
       "instruction_sequence": {"steps": ["LDG", "FFMA", "STG"]}}


def template(workload: str, backend: str, machine_code: bool):
    w = get_workload(workload)
    t = w.template(backend, w.validate_problem({}, backend), dataclasses.replace(SIMULATED_GPU, backend=backend))
    t.machine_code = machine_code
    return t


def old_hash(genome: Genome) -> str:
    """The hash as genome.py computed it before the optional groups existed: the four groups only."""
    text = json.dumps({g: genome.to_dict()[g] for g in GROUPS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_a_genome_without_edits_keeps_its_json_and_hash():
    g = Genome(OLD)
    assert "machine_code" not in g.to_json()
    assert g.hash == old_hash(g) == "acaa912886e856e2"  # as the code before the group computed it
    assert Genome({**OLD, "machine_code": {"edits": []}}) == g
    assert Genome.from_json(g.to_json()).hash == g.hash


@pytest.mark.parametrize("workload,backend", PAIRS)
def test_seed_genomes_and_sources_are_unchanged_with_the_group_off_or_empty(workload, backend):
    off, on = template(workload, backend, False), template(workload, backend, True)
    for seed_off, seed_on in zip(off.gene_space().seed_genomes(), on.gene_space().seed_genomes()):
        assert seed_off == seed_on and seed_off.hash == old_hash(seed_off)
        assert off.render(seed_off).source == on.render(seed_on).source
        assert on.gene_space().from_json(seed_off.to_json()) == seed_off  # a stored genome loads as it was


@pytest.mark.parametrize("workload,backend", PAIRS[:2])
def test_the_space_gains_the_group_only_when_the_run_turns_it_on(workload, backend):
    off, on = template(workload, backend, False).gene_space(), template(workload, backend, True).gene_space()
    assert [n for n, _ in off.genes()] == [n for n, _ in on.genes()][:-1]
    assert list(on.genes())[-1][0] == "machine_code"
    assert "machine_code" not in off.groups


def test_a_space_without_the_group_refuses_a_genome_with_edits():
    space = template("rmsnorm", "triton", False).gene_space()
    raw = {**space.seed_genomes()[0].to_dict(), "machine_code": {"edits": ["nc:ld.global#0"]}}
    with pytest.raises(ValueError, match="no machine_code group"):
        space.from_json(raw)
    assert "no machine_code group" in space.validate(Genome(raw))


def test_the_c_backend_never_gains_the_group():
    w = get_workload("gemm")
    t = w.template("c", w.validate_problem({}, "c"), None)
    t.machine_code = True
    assert "machine_code" not in t.gene_space().groups


def test_rendering_a_genome_with_edits_carries_them_in_the_source():
    t = template("rope", "cuda", True)
    seed = t.gene_space().seed_genomes()[0]
    g = seed.replace("machine_code", "edits", ("nc:ld.global#0", "maxnreg:*=64"))
    source = t.render(g).source
    assert carried(source) == ("nc:ld.global#0", "maxnreg:*=64")
    assert source.startswith(t.render(seed).source) and source.splitlines()[-1].startswith("// abebot machine_code:")
    triton = template("rope", "triton", True)
    assert carried(triton.render(triton.gene_space().seed_genomes()[0].replace(
        "machine_code", "edits", ("cop:ld.global#1=cs",))).source) == ("cop:ld.global#1=cs",)


def test_mutation_and_crossover_keep_the_edit_list_canonical_and_legal():
    space = template("rmsnorm", "triton", True).gene_space()
    rng = random.Random(7)
    gene = space.gene("machine_code", "edits")
    g = space.seed_genomes()[0]
    seen = set()
    for _ in range(60):
        g = make_valid(mutate(g, space, 0.5, rng), space, rng) or g
        edits = g["machine_code"]["edits"]
        assert gene.validate(edits) is None and edits == canonical(edits)
        seen.add(len(edits))
    assert max(seen) > 0


def test_crossover_keeps_each_slot_from_a_parent():
    space = template("rmsnorm", "triton", True).gene_space()
    seed = space.seed_genomes()[0]
    a = seed.replace("machine_code", "edits", canonical(["nc:ld.global#0", "cop:ld.global#2=cs", "maxnreg:*=64"]))
    b = seed.replace("machine_code", "edits", canonical(["cop:ld.global#2=cg", "move:fma#1=-2"]))
    rng = random.Random(3)
    for _ in range(40):
        child = crossover(a, b, space, rng)["machine_code"]["edits"]
        assert set(child) <= set(a["machine_code"]["edits"]) | set(b["machine_code"]["edits"])
        assert sum(e.startswith("cop:ld.global#2=") for e in child) == 1  # both parents fill that slot


def test_the_gene_refuses_non_canonical_or_malformed_lists():
    gene = template("rmsnorm", "triton", True).gene_space().gene("machine_code", "edits")
    assert "canonical" in gene.validate(("nc:ld.global#0", "cop:ld.global#0=cs"))
    assert "unknown kind" in gene.validate(("frob:ld.global#0",))
    assert gene.from_json(["nc:ld.global#0", "cop:ld.global#0=cs"]) == ("cop:ld.global#0=cs", "nc:ld.global#0")


def test_the_surrogate_features_genomes_with_and_without_edits_alike():
    from types import SimpleNamespace

    from core.search.surrogate import _features

    plain = Genome(OLD)
    edited = Genome({**OLD, "machine_code": {"edits": ["nc:ld.global#0"]}})
    x = _features([SimpleNamespace(genome=plain), SimpleNamespace(genome=edited)], {})
    assert x.shape == (2, 5) and x[0, 1] != x[1, 1]
