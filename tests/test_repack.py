"""A template's one-time repacking of the weights (``Template.repack``), with W4A16's C template.

Its ``panels`` layout is the first user: the GPTQ words repacked once per case so that each tile's
columns have their words contiguous along K. The harness gives the repack copies of the workload's
declared weights and nothing else, times it apart from the launches, hands what it made to
``bind``, keeps it unchanged (checked, and restored before every timed launch) and counts its bytes
as memory; the protocol reports the time as ``repack_us``, which the store keeps (schema 4).
"""
from __future__ import annotations

import dataclasses
import json
import shutil

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from core.backends import availability
from core.evaluation.checks import LaunchChecks
from core.evaluation.harness import Harness
from core.evaluation.timing import rotation
from core.workloads import get_workload
from core.workloads.w4a16 import W4A16Workload
from core.workloads.w4a16.c import PANELS, CW4A16Template, panels

C_UNAVAILABLE = availability("c")
needs_c = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")
SMALL = {"m": 4, "n": 64, "k_groups": 2}


@pytest.fixture(scope="module")
def backend():
    if C_UNAVAILABLE is not None:
        pytest.skip(f"C backend: {C_UNAVAILABLE}")
    from core.backends.c import CBackend

    return CBackend()


@pytest.fixture(scope="module")
def runtime(backend):
    return backend.make_runtime()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("repack-cache")


def _setup(backend, problem: dict, template_class=CW4A16Template):
    wl = get_workload("w4a16")
    prob = wl.validate_problem({**SMALL, **problem}, "c")
    return wl, prob, template_class(wl, prob, backend.device)


def _genome(tpl, layout: str, vector_width: int = 16, cols: int = 2):
    g = tpl.gene_space().seed_genomes()[1].replace("parallel_config", "threads", 1)
    g = g.replace("memory_pattern", "layout", layout).replace("memory_pattern", "vector_width", vector_width)
    rm = dict(g["register_allocation"]["register_map"], cols=cols)
    return tpl.gene_space().canonical(g.replace("register_allocation", "register_map", rm))


def _load(backend, runtime, cache, tpl, genome):
    return runtime.load(backend.compile(tpl.render(genome), cache))


# ---- the layout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [1, 4, 16, 32])
def test_panels_put_each_tiles_words_contiguous_along_k(p):
    """Word kw of column c0 + j of a panel of width W starting at c0 is at c0 * KW + kw * W + j;
    the columns after the last full panel are panels of 1 (each column's words in a row)."""
    g, n = 3, 67
    q = np.random.default_rng(p).integers(-2**31, 2**31 - 1, size=(g, 16, n), dtype=np.int64).astype(np.int32)
    flat = panels(q, p)
    words, kw_total = q.reshape(g * 16, n), g * 16
    assert flat.dtype == np.int32 and flat.shape == (g * 16 * n,) and flat.flags["C_CONTIGUOUS"]
    head = n // p * p
    for c in range(n):
        c0, width = (c // p * p, p) if c < head else (c, 1)
        for kw in (0, 1, kw_total - 1):
            assert flat[c0 * kw_total + kw * width + (c - c0)] == words[kw, c]


# ---- the harness -----------------------------------------------------------------------------------

@needs_c
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("vector_width,cols", [(1, 1), (8, 1), (16, 2)])
def test_a_panels_kernel_verifies_on_every_shape_and_reads_only_the_repacked_words(
        backend, runtime, cache, zero_points, vector_width, cols):
    wl, prob, tpl = _setup(backend, {"zero_points": zero_points})
    kernel = _load(backend, runtime, cache, tpl, _genome(tpl, "panels", vector_width, cols))
    assert kernel.launch_params["layout"] == "panels"
    harness = Harness(wl, tpl, runtime, prob)
    for seed, shape in enumerate(wl.shapes(prob)):
        case = harness.make_case(shape, seed)
        harness.launch(kernel, case)
        assert harness.check(case).ok, shape
        assert set(case.packed[id(kernel)]) == {PANELS}
    assert len(harness.repacks) == len(wl.shapes(prob)) and all(s > 0 for _, s in harness.repacks)

    class NoRepack(CW4A16Template):  # the same kernel handed GPTQ's words: it must read wrong ones
        def repack(self, kernel, arrays, weights, shape):
            return {}

    plain = Harness(wl, NoRepack(wl, prob, backend.device), runtime, prob)
    case = plain.make_case(wl.shapes(prob)[1], 5)
    plain.launch(kernel, case)
    assert plain.check(case).cause == "wrong_result"


@needs_c
def test_a_gptq_kernel_makes_no_repack_and_the_panels_one_holds_a_copy_of_qweight(backend, runtime, cache):
    wl, prob, tpl = _setup(backend, {})
    gptq = _load(backend, runtime, cache, tpl, _genome(tpl, "gptq"))
    pan = _load(backend, runtime, cache, tpl, _genome(tpl, "panels"))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[0], 1)
    harness.launch(gptq, case)
    assert harness.check(case).ok and harness.packed_bytes(gptq, case) == 0 and not harness.repacks
    harness.reset_outputs(case)
    harness.launch(pan, case)
    assert harness.check(case).ok
    assert harness.packed_bytes(pan, case) == case.data["qweight"].nbytes == SMALL["n"] * SMALL["k_groups"] * 16 * 4


class _Spy(CW4A16Template):
    """Records what its repack was handed."""

    seen: list = []

    def repack(self, kernel, arrays, weights, shape):
        type(self).seen.append((dict(weights), dict(shape)))
        return super().repack(kernel, arrays, weights, shape)


@needs_c
@pytest.mark.parametrize("zero_points", [False, True])
def test_the_repack_is_handed_copies_of_the_declared_weights_only(backend, runtime, cache, zero_points):
    """x changes with every launch (permuted rows): a repack that saw it could precompute y."""
    wl, prob, tpl = _setup(backend, {"zero_points": zero_points}, _Spy)
    _Spy.seen = []
    kernel = _load(backend, runtime, cache, tpl, _genome(tpl, "panels"))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[0], 3)
    harness.launch(kernel, case)
    assert harness.check(case).ok
    (weights, shape), = _Spy.seen
    declared = {"qweight", "scales"} | ({"zeros"} if zero_points else set())
    assert set(weights) == declared == set(wl.weights(prob)) and shape == case.shape
    for name, w in weights.items():
        assert np.array_equal(w, case.pristine[name])
        for buf in list(case.data.values()) + list(case.pristine.values()) + list(case.flats.values()):
            assert not np.shares_memory(w, buf), f"{name} handed to the repack aliases a case buffer"
    harness.launch(kernel, case)  # bound once: no second repack on the same case
    assert len(_Spy.seen) == 1


class _Corrupting(CW4A16Template):
    """Repacks, then flips one nibble of the repacked words."""

    def repack(self, kernel, arrays, weights, shape):
        out = super().repack(kernel, arrays, weights, shape)
        out[PANELS][len(out[PANELS]) // 2] ^= 0x3
        return out


class _Scribbling(CW4A16Template):
    """Writes into the canonical weights it was handed and returns nothing (a no-op: they are copies)."""

    def repack(self, kernel, arrays, weights, shape):
        weights["qweight"][...] = 0
        weights["scales"][...] = 0
        return {}


class _Shadowing(CW4A16Template):
    """Tries to replace an activation or the output under its own name in bind()'s tensors."""

    def repack(self, kernel, arrays, weights, shape):
        return {"x": np.zeros((shape["m"], shape["k_groups"], 128), np.float32)}


@needs_c
def test_hostile_repacks_fail(backend, runtime, cache):
    wl, prob, tpl = _setup(backend, {}, _Corrupting)
    kernel = _load(backend, runtime, cache, tpl, _genome(tpl, "panels"))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[1], 2)
    harness.launch(kernel, case)
    assert harness.check(case).cause == "wrong_result"  # against the reference of the canonical weights

    wl, prob, tpl = _setup(backend, {}, _Scribbling)
    gptq = _load(backend, runtime, cache, tpl, _genome(tpl, "gptq"))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[0], 4)
    harness.launch(gptq, case)
    assert harness.check(case).ok  # the case's weights were never handed out

    wl, prob, tpl = _setup(backend, {}, _Shadowing)
    harness = Harness(wl, tpl, runtime, prob)
    with pytest.raises(ValueError, match="'x', a name of the workload's own tensors"):
        harness.launch(kernel, harness.make_case(wl.shapes(prob)[0], 5))


@needs_c
def test_a_kernel_that_writes_its_repacked_weights_is_caught_in_verification_and_in_timing(backend, runtime, cache):
    """The repacked words are writable memory the kernel keeps: a memo stashed there is caught by
    the check, and by the timed launches' checks (which never rewrite the weights: they check them)."""
    from core.evaluation.checks import LaunchChecks

    wl, prob, tpl = _setup(backend, {})
    good = tpl.render(_genome(tpl, "panels"))
    source = good.source.replace("void abebot_w4a16(", "static void inner_w4a16(") + (
        "\nvoid abebot_w4a16(const float *x, const int32_t *qweight, const float *scales, const uint8_t *zeros,\n"
        "                  float *y, int m, int n, int G) {\n"
        "  inner_w4a16(x, qweight, scales, zeros, y, m, n, G);\n"
        "  ((int32_t *)qweight)[(size_t)n * G * 16 - 1] ^= 1;\n}\n")
    bad = runtime.load(backend.compile(dataclasses.replace(good, source=source), cache))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[0], 6)
    harness.launch(bad, case)
    result = harness.check(case)
    assert result.cause == "input_modified" and PANELS in result.detail
    cases = [harness.make_case(wl.shapes(prob)[0], 7)]
    harness.prepare(bad, cases[0])
    checks = LaunchChecks(harness, cases, 8)
    for i in range(3):
        checks.before(i)
        harness.launch(bad, cases[0])
        checks.after(i)
    assert not checks.verify().ok  # its outputs went wrong with the weights, and the weights are named
    assert harness.weights_changed(cases[0]) == f"repacked weight {PANELS!r}"


class _NoisyWeights(W4A16Workload):
    """Declares the activations a weight: the harness must refuse it."""

    def weights(self, problem):
        return ("x", "qweight")


def test_a_weight_along_the_permuted_dimension_is_refused(backend, runtime):
    wl = _NoisyWeights()
    prob = wl.validate_problem(SMALL, "c")
    with pytest.raises(ValueError, match="'x' spans 'm'"):
        Harness(wl, CW4A16Template(wl, prob, backend.device), runtime, prob)


@needs_c
def test_timed_launches_on_repacked_weights_pass_every_check(backend, runtime, cache):
    """Permuted rows of x and decoy outputs between launches leave the weights, so the one repack
    per case stays right for every launch; a launch that corrupts the repack is caught."""
    wl, prob, tpl = _setup(backend, {})
    kernel = _load(backend, runtime, cache, tpl, _genome(tpl, "panels"))
    harness = Harness(wl, tpl, runtime, prob)
    cases = [harness.make_case(wl.shapes(prob)[0], s) for s in range(3)]
    for c in cases:
        harness.prepare(kernel, c)
    checks = LaunchChecks(harness, cases, seed=9)
    launch = rotation(lambda c: harness.launch(kernel, c), cases)
    for i in range(24):
        checks.before(i)
        launch(i)
        checks.after(i)
    assert checks.verify().ok and len(harness.repacks) == 3

    checks = LaunchChecks(harness, cases, seed=10)
    for i in range(6):
        checks.before(i)
        cases[i % 3].packed[id(kernel)][PANELS][:] = 0  # the launch reads zeros
        launch(i)
        checks.after(i)
    assert not checks.verify().ok

    saved = cases[0].packed[id(kernel)][PANELS].copy()
    pair = [cases[1], cases[2]]
    checks = LaunchChecks(harness, pair, seed=11)
    cases[1].packed[id(kernel)][PANELS][:] = saved  # another case's repack: written over, never rewritten
    launch = rotation(lambda c: harness.launch(kernel, c), pair)
    for i in range(4):
        checks.before(i)
        launch(i)
        checks.after(i)
    verdict = checks.verify()
    assert not verdict.ok and harness.weights_changed(cases[1]) == f"repacked weight {PANELS!r}"


# ---- the sandboxed protocol, the evaluator and the store --------------------------------------------

@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    if C_UNAVAILABLE is not None:
        pytest.skip(f"C backend: {C_UNAVAILABLE}")
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    root = tmp_path_factory.mktemp("repack-eval")
    problem = {"m": 2, "n": 256, "k_groups": 4}
    config = RunConfig.from_dict({"workload": "w4a16", "backend": "c", "problem": problem, "timeout_s": 20.0,
                                  "stability_launches": 4, "seed": 3})
    ev = Evaluator(config, root / ".cache", log=lambda line: None, log_path=root / "sandbox.log", timing_target_s=0.03)
    ev.start()
    try:
        genomes = [_genome(ev.template, layout) for layout in ("gptq", "panels")]
        gptq, pan = ev.evaluate(genomes)
    finally:
        ev.close()
    return {"problem": ev.problem, "workload": ev.workload, "genomes": genomes, "gptq": gptq, "panels": pan}


def test_the_protocol_reports_the_repack_apart_and_counts_its_bytes(evaluated):
    gptq, pan, prob = evaluated["gptq"], evaluated["panels"], evaluated["problem"]
    assert gptq.status == "ok" and pan.status == "ok", (gptq.cause, pan.cause)
    assert gptq.repack_us is None and "repack" not in gptq.phases
    assert pan.repack_us > 0 and pan.phases["repack"] > 0
    assert pan.phases["repack"] >= pan.repack_us * 1e-6  # every repack of the evaluation, the main shape's among them
    words = prob["n"] * prob["k_groups"] * 16 * 4
    io = evaluated["workload"].io_bytes(evaluated["workload"].shapes(prob)[0], prob)
    assert pan.memory_bytes == io + pan.extra_bytes and gptq.memory_bytes == io + gptq.extra_bytes
    assert pan.extra_bytes >= words > gptq.extra_bytes
    assert pan.extra_bytes - gptq.extra_bytes >= words - 4096  # the launches' own temporaries may differ slightly


def test_the_repack_time_is_stored_in_duckdb(evaluated, tmp_path):
    from core.search.ga import Individual
    from core.run.rows import individual_row
    from store import RunReader, RunWriter, new_run_id

    rows = []
    for genome, ev in zip(evaluated["genomes"], (evaluated["gptq"], evaluated["panels"])):
        ind = Individual(genome, "seed", measure=ev.to_dict(), fitness=1.0, terms={"time": 1.0})
        rows.append(individual_row(0, ind))
    w = RunWriter.create(tmp_path, new_run_id("w4a16", "c"), {"workload": "w4a16", "backend": "c",
                                                              "weights": {"time": 1.0}})
    try:
        w.commit_generation(0, rows, [], {}, {})
    finally:
        w.close()
    got = RunReader(w.path).individuals(0).set_index("genome_hash")["repack_us"]
    assert np.isnan(got[evaluated["genomes"][0].hash])
    assert got[evaluated["genomes"][1].hash] == pytest.approx(evaluated["panels"].repack_us)
    con = duckdb.connect(str(w.path / "run.duckdb"), read_only=True)
    try:
        stored = con.execute("SELECT repack_us FROM individuals WHERE repack_us IS NOT NULL").fetchall()
    finally:
        con.close()
    assert stored == [(pytest.approx(evaluated["panels"].repack_us),)]


def _downgrade_to_v3(path) -> None:
    """What a run folder written before schema 4 holds: none of the columns added since (repack_us,
    then schema 6's paired-timing columns), version 3."""
    from store.schema import ADDED

    later = ["repack_us"] + [name for name, _ in ADDED["individuals"][ADDED["individuals"].index(("repack_us", "DOUBLE")) + 1:]]
    later_gens = [name for name, _ in ADDED["generations"] if name.startswith("champion_speedup") or
                  name in ("champion_noisy", "cache")]
    con = duckdb.connect(str(path / "run.duckdb"))
    try:
        for name in later:
            con.execute(f"ALTER TABLE individuals DROP COLUMN {name}")
        for name in later_gens:
            con.execute(f"ALTER TABLE generations DROP COLUMN {name}")
        con.execute("UPDATE schema_version SET version = 3")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    for part in (path / "live" / "individuals").glob("*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop([n for n in later if n in table.column_names]), part)


def test_a_run_folder_of_schema_3_still_opens_and_resumes(tmp_path):
    from store import SCHEMA_VERSION, RunReader, RunWriter, new_run_id
    from store.schema import columns

    assert SCHEMA_VERSION >= 4
    w = RunWriter.create(tmp_path, new_run_id("w4a16", "c"), {"workload": "w4a16", "backend": "c"})
    try:
        w.commit_generation(0, [{"genome_hash": "old", "status": "ok", "fitness": 1.0, "time_us": 5.0}], [], {}, {})
    finally:
        w.close()
    old = tmp_path / "old-copy"
    shutil.copytree(w.path, old)
    _downgrade_to_v3(old)
    assert "repack_us" not in pq.read_schema(next((old / "live" / "individuals").glob("*.parquet"))).names

    inds = RunReader(old).individuals()
    assert "repack_us" in inds.columns and inds["repack_us"].isna().all() and list(inds["genome_hash"]) == ["old"]
    w = RunWriter.open(old)  # resuming: the database gets the column, null in the old rows
    try:
        assert w._db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        w.commit_generation(1, [{"genome_hash": "new", "status": "ok", "fitness": 2.0, "repack_us": 321.0}], [], {}, {})
        order = [r[0] for r in w._db.execute("SELECT column_name FROM information_schema.columns WHERE "
                                             "table_name = 'individuals' ORDER BY ordinal_position").fetchall()]
    finally:
        w.close()
    assert order == ["run_id"] + columns("individuals")
    inds = RunReader(old).individuals().set_index("genome_hash")
    assert np.isnan(inds.loc["old", "repack_us"]) and inds.loc["new", "repack_us"] == 321.0
    assert json.loads((old / "config.json").read_text())["workload"] == "w4a16"
