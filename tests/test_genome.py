"""Genomes, gene kinds and genetic operators keep every genome legal."""
from __future__ import annotations

import json
import random

import pytest

from core.genome import ChoiceGene, GeneSpace, Genome, diff, with_gene
from core.search.operators import crossover, crossover_sequence, make_valid, mutate
from tests.helpers import SEQ, toy_space

def test_genome_is_immutable_hashable_and_round_trips():
    space = toy_space()
    g = space.random(random.Random(1))
    again = Genome.from_json(g.to_json())
    assert again == g and hash(again) == hash(g) and again.hash == g.hash
    assert space.from_json(json.loads(g.to_json())) == g
    with pytest.raises(AttributeError):
        g.x = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        g["parallel_config"]["block"] = 7  # type: ignore[index]
    assert len({g, again}) == 1


def test_from_json_rejects_illegal_genomes_with_a_reason():
    space = toy_space()
    raw = space.random(random.Random(2)).to_dict()
    raw["instruction_sequence"]["main_loop"] = ["STG", "LDG", "FFMA"]
    with pytest.raises(ValueError, match="must come before"):
        space.from_json(raw)
    raw = space.random(random.Random(2)).to_dict()
    raw["parallel_config"]["block"] = 33
    with pytest.raises(ValueError, match="block"):
        space.from_json(raw)


def test_sequence_repair_keeps_required_tokens_once_and_in_order():
    fixed = SEQ.repair(["STG", "SYNC", "FFMA", "SYNC", "BOGUS"])
    assert SEQ.validate(fixed) is None
    assert fixed.count("SYNC") == 1 and "LDG" in fixed
    assert fixed.index("LDG") < fixed.index("FFMA") < fixed.index("STG")


def test_one_point_crossover_of_sequences_takes_prefix_then_other_parent():
    rng = random.Random(0)
    a = ("LDG", "SYNC", "FFMA", "STG")
    b = ("PREFETCH", "LDG", "FFMA", "STG")
    for _ in range(50):
        child = crossover_sequence(a, b, SEQ, rng)
        assert SEQ.validate(child) is None
        assert child[0] == "LDG"  # the cut is at least 1: the head always comes from a


@pytest.mark.parametrize("seed", range(5))
def test_operators_keep_genomes_valid(seed):
    space, rng = toy_space(), random.Random(seed)
    pop = [space.random(rng) for _ in range(10)]
    for _ in range(300):
        child = crossover(rng.choice(pop), rng.choice(pop), space, rng)
        child = make_valid(mutate(child, space, 0.3, rng), space, rng)
        if child is not None:
            assert space.validate(child) is None
            pop.append(child)
    assert len({g.hash for g in pop}) > 20


def test_uniform_crossover_mixes_register_map_keys():
    space, rng = toy_space(), random.Random(3)
    a = space.seed_genomes()[0]
    b = a.replace("register_allocation", "regs", {"R0": "acc", "R1": "tmp", "R2": "spill"})
    seen = set()
    for _ in range(200):
        c = crossover(a, b, space, rng)
        seen.add(tuple(sorted(c["register_allocation"]["regs"].items())))
    assert len(seen) > 4  # keys are inherited independently, not all-from-one-parent


def test_mutation_changes_at_least_one_gene():
    space, rng = toy_space(), random.Random(4)
    g = space.random(rng)
    for _ in range(100):
        assert mutate(g, space, 0.0, rng) != g or space.size() == 1


def test_diff_marks_changed_genes():
    space = toy_space()
    a = space.seed_genomes()[0]
    b = a.replace("parallel_config", "block", 256)
    changed = [r for r in diff(a, b) if r["changed"]]
    assert [(r["group"], r["gene"], r["a"], r["b"]) for r in changed] == [("parallel_config", "block", 128, 256)]


def test_gene_space_requires_all_four_groups():
    with pytest.raises(ValueError, match="instruction_sequence"):
        GeneSpace(groups={"parallel_config": (ChoiceGene("b", (1,)),), "memory_pattern": (ChoiceGene("v", (1,)),),
                          "register_allocation": (ChoiceGene("r", (1,)),)})


# ---- canonical genomes ----------------------------------------------------------------------------

def _scalar_layout(g: Genome) -> Genome:
    # toy rule: one element per access has no layout to choose
    return with_gene(g, "memory_pattern", "layout", "coalesced") if g.get("memory_pattern", "vector") == 1 else g


def canonical_space() -> GeneSpace:
    base = toy_space()
    seeds = base.seeds + ({**base.seeds[0], "memory_pattern": {"vector": 1, "layout": "strided"}},
                          {**base.seeds[0], "memory_pattern": {"vector": 1, "layout": "coalesced"}})
    return GeneSpace(base.groups, base.constraints, seeds, canonicalisers=(_scalar_layout,))


def test_twins_have_one_canonical_genome_and_one_hash():
    space = canonical_space()
    a = space.seed_genomes()[0].replace("memory_pattern", "vector", 1)
    b = a.replace("memory_pattern", "layout", "strided")
    assert a != b and a.hash != b.hash  # twins: they differ only in a gene that does not apply
    assert space.canonical(a) == space.canonical(b) and space.canonical(a).hash == space.canonical(b).hash
    assert space.canonical(space.canonical(b)) == space.canonical(b)  # a fixed point
    applies = a.replace("memory_pattern", "vector", 4)
    assert space.canonical(applies) == applies and space.canonical(applies.replace("memory_pattern", "layout", "strided")) != applies


def test_random_seed_and_repaired_genomes_come_canonical():
    space, rng = canonical_space(), random.Random(7)
    seeds = space.seed_genomes()
    assert all(space.canonical(g) == g for g in seeds)
    assert len(seeds) == 2, "two seeds that are twins are one seed"
    drawn = [space.random(rng) for _ in range(200)]
    assert all(space.canonical(g) == g and space.validate(g) is None for g in drawn)
    assert any(g.get("memory_pattern", "vector") == 1 for g in drawn)
    for _ in range(300):
        child = make_valid(mutate(crossover(rng.choice(drawn), rng.choice(drawn), space, rng), space, 0.3, rng), space, rng)
        if child is not None:
            assert space.canonical(child) == child and space.validate(child) is None


def test_mutation_of_a_gene_that_does_not_apply_does_not_count():
    space, rng = canonical_space(), random.Random(5)
    g = space.seed_genomes()[0].replace("memory_pattern", "vector", 1)
    for _ in range(100):
        assert space.canonical(mutate(g, space, 0.0, rng)) != g


def test_canonicalisers_that_never_settle_are_a_gene_space_bug():
    def flip(g: Genome) -> Genome:
        return g.replace("parallel_config", "grid", 2 if g.get("parallel_config", "grid") == 1 else 1)

    base = toy_space()
    space = GeneSpace(base.groups, base.constraints, base.seeds, canonicalisers=(flip,))
    with pytest.raises(RuntimeError, match="fixed point"):
        space.canonical(Genome(base.seeds[0]))


def test_with_gene_returns_the_genome_itself_when_nothing_changes():
    g = toy_space().seed_genomes()[0]
    assert with_gene(g, "parallel_config", "block", 128) is g
    assert with_gene(g, "register_allocation", "regs", "acc", key="R1") is g
    assert with_gene(g, "instruction_sequence", "main_loop", ["LDG", "FFMA", "STG"]) is g
    assert with_gene(g, "register_allocation", "regs", "tmp", key="R1")["register_allocation"]["regs"]["R1"] == "tmp"
