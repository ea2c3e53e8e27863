"""The W4A16 CUDA GEMV path's ``strips`` layout (gene ``memory_pattern.layout``): the repack puts
every word and scale where the kernel's WORD / SCALE macros read it, and genomes saved before the
gene existed still load, as the kernel they were. The kernel runs on the GPU only
(benchmarks/reports/DECODE_H200.md); the address arithmetic is checked here, in numpy and in torch."""
import json
import re
import types

import dataclasses

import numpy as np
import pytest

from core.genome import GeneSpace, Genome
from core.workloads import get_workload
from core.workloads.w4a16 import cuda, cuda_genes
from tests.helpers import H200

GPU = dataclasses.replace(H200, backend="cuda")
PROBLEM = {"m": 1, "n": 72, "k_groups": 2}


def _template(name: str = "w4a16", **problem):
    wl = get_workload(name)
    return wl.template("cuda", wl.validate_problem({**PROBLEM, **problem}, "cuda"), GPU)


def _space() -> GeneSpace:
    return _template().gene_space()


def _strips_seed() -> Genome:
    seed = [g for g in _space().seed_genomes() if g["memory_pattern"]["layout"] == "strips"]
    assert len(seed) == 1
    return seed[0]


def _loaded(source) -> types.SimpleNamespace:
    """What repack and bind see of a compiled kernel: its launch parameters."""
    return types.SimpleNamespace(launch_params=source.launch)


def _macro(source: str, name: str) -> str:
    return re.search(rf"#define {name}\((\w+), c\) (.*)", source).group(2)


def _address(macro: str, row: int, c: int, **consts: int) -> int:
    """Evaluate a WORD / SCALE macro (C integer arithmetic on non-negative ints) in Python."""
    expr = macro.replace("(long long)", "").replace("/", "//")
    return eval(expr, {}, {"kw": row, "grp": row, "c": c, **consts})  # noqa: S307 - our own macro text


@pytest.mark.parametrize("n, rows", [(72, 32), (64, 16), (130, 5)])
def test_the_kernel_reads_every_word_and_scale_where_the_repack_put_it(n, rows):
    template = _template(n=n)
    kernel = template.render(_strips_seed())
    lp = kernel.launch
    cb = lp["col_threads"] * lp["vec"]
    assert lp["layout"] == "strips" and lp["cols"] == cb
    matrix = np.random.default_rng(n).integers(-2**31, 2**31, size=(rows, n), dtype=np.int64).astype(np.int32)
    packed = cuda.strips(matrix, cb).reshape(-1)
    assert packed.size == rows * -(-n // cb) * cb  # N padded to whole strips
    for name, row_count in (("WORD", "KW"), ("SCALE", "G")):
        macro = _macro(kernel.source, name)
        consts = {"CB": cb, "KW": rows, "G": rows, "N": n}
        for row in range(rows):
            for c in range(n):
                assert packed[_address(macro, row, c, **consts)] == matrix[row, c], (name, row, c)
        # a strip's rows are contiguous: the block streams one region
        assert _address(macro, 1, 0, **consts) - _address(macro, 0, 0, **consts) == cb, row_count
    # padding is zeros, never another column's value
    pad = cuda.strips(matrix, cb).reshape(-(-n // cb), rows, cb)[-1, :, n % cb or cb:]
    assert not pad.any()


def test_the_gptq_layout_reads_rows_of_n():
    source = _template().render(_space().seed_genomes()[0]).source
    assert _address(_macro(source, "WORD"), 3, 5, N=72) == 3 * 72 + 5


def test_torch_and_numpy_strips_alike():
    torch = pytest.importorskip("torch")
    m = np.arange(7 * 45, dtype=np.int32).reshape(7, 45)
    assert np.array_equal(cuda.strips(torch.from_numpy(m), 16).numpy(), cuda.strips(m, 16))


def test_the_repack_makes_strips_of_the_words_and_scales_only_when_asked():
    template = _template()
    qweight = np.arange(2 * 16 * 72, dtype=np.int32).reshape(2, 16, 72)
    scales = np.arange(2 * 72, dtype=np.float32).reshape(2, 72)
    weights = {"qweight": qweight, "scales": scales}
    strips_kernel = _loaded(template.render(_strips_seed()))
    packed = template.repack(strips_kernel, None, weights, {})
    cb = strips_kernel.launch_params["cols"]
    assert set(packed) == set(cuda.STRIPS)
    assert np.array_equal(packed["qweight_strips"], cuda.strips(qweight.reshape(32, 72), cb))
    assert np.array_equal(packed["scales_strips"], cuda.strips(scales, cb))
    t = {**weights, **packed}
    assert cuda.words(strips_kernel.launch_params, t) is packed["qweight_strips"]
    assert cuda.scales(strips_kernel.launch_params, t) is packed["scales_strips"]
    gptq = _loaded(template.render(_space().seed_genomes()[0]))
    assert template.repack(gptq, None, weights, {}) == {}
    assert cuda.words(gptq.launch_params, t) is qweight and cuda.scales(gptq.launch_params, t) is scales


def test_a_genome_saved_before_the_later_genes_loads_as_the_kernel_it_was():
    space = _space()
    seed = space.seed_genomes()[0]
    old = json.loads(seed.to_json())
    del old["memory_pattern"]["layout"], old["parallel_config"]["kblocks"], old["instruction_sequence"]["math"]
    loaded = space.from_json(old)
    assert loaded == seed
    assert _template().render(loaded).source == _template().render(seed).source
    del old["memory_pattern"]["vec"]  # a gene that was always there is still required
    with pytest.raises(ValueError, match="memory_pattern.vec missing"):
        space.from_json(old)


def test_the_tensor_core_path_ignores_the_layout_and_the_fused_template_has_a_strips_seed():
    mma = [g for g in _space().seed_genomes() if g["instruction_sequence"]["math"] == "mma"]
    assert mma and all(g["memory_pattern"]["layout"] == "gptq" for g in mma)
    changed = _space().canonical(mma[0].replace("memory_pattern", "layout", "strips"))
    assert changed["memory_pattern"]["layout"] == "gptq"
    fused = _template("rmsnorm_w4a16").gene_space().seed_genomes()
    assert any(g["memory_pattern"]["layout"] == "strips" and g["instruction_sequence"]["norm"] == "stream" for g in fused)
    assert cuda_genes.SEEDS[-1]["memory_pattern"]["layout"] == "strips"
