"""Memory a C kernel allocates itself is measured (issue 36, item 7): a workspace it keeps from its
first call, and a temporary it allocates, touches and frees within a call, both count as extra
memory; a kernel that allocates nothing reports next to nothing."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from core.backends.base import Artifact
from core.backends.c import CRuntime, compiler_command

pytestmark = pytest.mark.skipif(not compiler_command(), reason="no C compiler")

MiB = 1 << 20
KEEPS = """#include <stdlib.h>
#include <string.h>
static char *volatile ws;
void kernel(float *x, int n) {
    if (!ws) { ws = malloc(512u << 20); memset(ws, 1, 512u << 20); }
    x[0] = ws[7] + n;
}
"""
TEMPORARY = """#include <stdlib.h>
#include <string.h>
void kernel(float *x, int n) {
    char *volatile t = malloc(64u << 20);
    memset(t, 1, 64u << 20);
    x[0] = t[5] + n;
    free(t);
}
"""
NOTHING = """void kernel(float *x, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) x[i] = (float)i;
}
"""


def _extra(tmp_path: Path, source: str) -> int:
    """Load the kernel, launch it as verification would (its first call), then measure one launch
    on a case bound afterwards, as the protocol's memory stage does."""
    src, so = tmp_path / "k.c", tmp_path / "k.so"
    src.write_text(source)
    subprocess.run([*compiler_command(), "-O2", "-fPIC", "-shared", "-fopenmp", "-o", str(so), str(src)], check=True)
    rt = CRuntime()
    x = np.zeros(1024, dtype=np.float32)
    kernel = rt.load(Artifact("c", "k", "kernel", str(so), launch={"argtypes": ["ptr", "int"]}))
    kernel(x, x.size)
    kernel(x, x.size)
    return rt.arrays.peak_extra_bytes(kernel.bind(x, x.size))


def test_a_kept_512_mib_workspace_counts_as_extra_memory(tmp_path):
    assert _extra(tmp_path, KEEPS) >= 512 * MiB


def test_a_temporary_the_kernel_frees_counts_at_its_peak(tmp_path):
    # The resident-set counters are batched per CPU (a few hundred KiB late): within 1 MiB.
    assert _extra(tmp_path, TEMPORARY) >= 63 * MiB


def test_a_kernel_that_allocates_nothing_reports_almost_nothing(tmp_path):
    assert _extra(tmp_path, NOTHING) < 1 * MiB


WORKSPACE_GEMM = r"""
#include <stdlib.h>
#include <string.h>
static char *volatile ws;
void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    if (!ws) { ws = malloc(512u << 20); memset(ws, 1, 512u << 20); }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = ws[i & 7] - 1;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
"""


def test_the_evaluator_reports_a_kept_workspace_in_extra_bytes(tmp_path):
    import dataclasses
    import random

    from core.backends import availability
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    if availability("c"):
        pytest.skip(availability("c"))
    config = RunConfig.from_dict({"workload": "gemm", "backend": "c", "problem": {"m": 48, "n": 40, "k": 56},
                                  "timeout_s": 20.0, "stability_launches": 4, "seed": 1})
    ev = Evaluator(config, tmp_path / ".cache", log=lambda line: None, log_path=tmp_path / "sandbox.log",
                   timing_target_s=0.02)
    ev.start()
    try:
        space = ev.template.gene_space()
        genome = (space.seed_genomes() or [space.random(random.Random(0))])[0]
        [res] = ev.evaluate_sources([dataclasses.replace(ev.template.render(genome), source=WORKSPACE_GEMM)])
    finally:
        ev.close()
    assert res.status == "ok", res.cause
    assert res.extra_bytes >= 512 * MiB, res.extra_bytes  # before: a few hundred bytes
