"""The CUDA RMSNorm template's row split over a thread block cluster and its barriers, checked in
the PTX nvcc makes of them (no GPU needed). Whether the kernels verify is the GPU's to say: every
genome the GA times on the H200 is checked first (benchmarks/reports/DECODE_H200.md); the registry-wide
checks (nvcc on random genomes, the exported script) are tests/test_conformance.py's."""
from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from core.genome import Genome
from core.workloads.rmsnorm.cuda import full_fit
from core.workloads import get_workload
from tests.helpers import NVCC, SIMULATED_GPU

DECODE = {"rows": 4, "cols": 8192, "residual": True}


def _template(problem: dict = DECODE, arch: str = "sm_90"):
    wl = get_workload("rmsnorm")
    return wl.template("cuda", wl.validate_problem(problem, "cuda"), dataclasses.replace(SIMULATED_GPU, backend="cuda", arch=arch))


def _genome(tpl, **pc) -> Genome:
    seed = tpl.gene_space().seed_genomes()[0].to_dict()
    seed["parallel_config"].update(pc)
    return Genome.from_json(seed)


def _with(g: Genome, **regs) -> Genome:
    d = g.to_dict()
    d["register_allocation"]["regs"].update(regs)
    return Genome.from_json(d)


def _ptx(tpl, g: Genome, tmp_path) -> str:
    if NVCC is None:
        pytest.skip("nvcc not installed: the CUDA C cannot be compiled here")
    kernel = tpl.render(g)
    src, ptx = tmp_path / f"{g.hash}.cu", tmp_path / f"{g.hash}.ptx"
    src.write_text(kernel.source)
    subprocess.run([NVCC, "-ptx", "-arch=sm_90", *kernel.flags, "-o", str(ptx), str(src)], check=True, capture_output=True)
    return ptx.read_text()


def test_the_row_split_is_offered_on_sm_90_and_later_only():
    for arch, offered in (("sm_90", True), ("sm_100", True), ("sm_80", False), ("sm_89", False)):
        space = _template(arch=arch).gene_space()
        assert (max(space.gene("parallel_config", "split").options) == 8) == offered, arch
        assert any(s["parallel_config"]["split"] > 1 for s in space.seed_genomes()) == offered, arch


def test_a_split_row_group_takes_a_cluster_of_its_own_and_its_rows_share_the_registers():
    tpl = _template()
    space = tpl.gene_space()
    assert space.validate(_genome(tpl, threads=128, split=8, rows_per_block=4)) is None
    assert "a cluster of its own" in space.validate(_genome(tpl, threads=128, split=8, schedule="persistent"))
    # 8192 columns over 2 blocks of 64 threads: 64 values a thread fit in registers; over 1 block,
    # or for 2 rows at once, they do not
    assert space.validate(_genome(tpl, threads=64, split=2)) is None
    assert "128 row elements per thread" in space.validate(_genome(tpl, threads=64, split=2, rows_per_block=2))
    assert "in registers" in space.validate(_genome(tpl, threads=64, split=1))


def test_a_split_kernel_launches_a_cluster_of_split_blocks_per_row_group(tmp_path):
    tpl = _template()
    g = _genome(tpl, threads=128, split=4, rows_per_block=2)
    launched = {}

    class Kernel:
        launch_params = tpl.render(g).launch

        def bind(self, grid, block, args):
            launched.update(grid=grid, block=block)
            return lambda: None

    tpl.bind(Kernel(), {"x": 0, "w": 0, "residual": 0, "out": 0}, {"rows": 7, "cols": 8192})
    assert launched == {"grid": (16, 1, 1), "block": (128, 1, 1)}  # 4 groups of 2 rows (the last of 1), 4 blocks each
    ptx = _ptx(tpl, g, tmp_path)
    ptx = ptx[ptx.index(".entry abebot_rmsnorm"):]  # the kernel, not the scalar twin before it
    assert re.search(r"\.reqnctapercluster\s+4\s*,\s*1\s*,\s*1", ptx)
    # the blocks' totals go into each other's shared memory between the cluster barriers, and the
    # first barrier is entered before the row's loads, so that waiting for the blocks to start overlaps them
    arrive, load = ptx.index("barrier.cluster.arrive.relaxed"), ptx.index("ld.global")
    mapa, store = ptx.index("mapa.shared::cluster"), ptx.index("st.shared::cluster")
    assert arrive < load < ptx.index("barrier.cluster.wait") < mapa < store < ptx.index("barrier.cluster.arrive.release")


def test_the_one_barrier_reduction_and_the_barrier_between_rows(tmp_path):
    tpl = _template()
    single = _genome(tpl)

    def barriers(g):
        return len(re.findall(r"\bbar(rier)?\.sync\b", _ptx(tpl, g, tmp_path)))

    two, one = barriers(_with(single, reduce="shuffle")), barriers(_with(single, reduce="all_warps"))
    vector_paths = 2 if full_fit(single, tpl.problem) else 1  # whole rows get a copy without bound checks
    assert one == two - vector_paths - 1  # one fewer in each vector path and one fewer in the scalar twin
    # a block that goes on to another row waits for its threads before reusing the shared buffers
    assert barriers(_genome(tpl, schedule="persistent")) == barriers(single) + vector_paths


def test_a_row_groups_loads_are_all_issued_before_its_first_store(tmp_path):
    """A store is ordered after the loads before it, so loading and storing row by row would wait
    for memory once per row (and per vector): every x and residual load comes first."""
    tpl = _template()
    for group, threads in ((4, 256), (1, 128)):  # 4 rows of 4 vectors a thread; 1 row of 8 vectors
        ptx = _ptx(tpl, _genome(tpl, threads=threads, rows_per_block=group), tmp_path)
        body = ptx[ptx.index(".entry abebot_rmsnorm"):]
        loads = [m.start() for m in re.finditer(r"ld\.global", body)]
        first_store = body.index("st.global")
        assert sum(pos < first_store for pos in loads) == 2 * group * 8192 // (threads * 8), (group, threads)


def test_a_genome_saved_before_the_split_existed_still_loads_as_one_block_per_row():
    space = _template().gene_space()
    old = space.seed_genomes()[0].to_dict()
    del old["parallel_config"]["split"]
    assert space.from_json(old)["parallel_config"]["split"] == 1


def test_whole_rows_get_the_path_without_bound_checks_only_when_every_thread_has_whole_vectors():
    tpl = _template()
    fits = _genome(tpl, threads=1024, split=1)  # 8192 columns = 1024 threads x 8
    ragged = _genome(tpl, threads=512, split=8)  # 8192 / (8 x 512 x 8) is not whole
    assert fits["memory_pattern"]["vec"] == ragged["memory_pattern"]["vec"] == 8
    assert full_fit(fits, tpl.problem) and not full_fit(ragged, tpl.problem)
    assert "#define FULL_FIT 1" in tpl.render(fits).source and "#define FULL_FIT 0" in tpl.render(ragged).source
