"""``patch(model)`` on the GPU: a 2-layer random Llama-3.1-70B-shaped model (full hidden size, 4-bit
projections, bf16) patched with a CUDA C library built from the templates' seed genomes at M = 1:
the logits stay within tolerance and every patched layer runs a library kernel. Skipped without a
CUDA GPU (the lead runs it on the H200)."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.library import ops
from core.library.from_genome import seed_library
from core.library.patch import patch
from core.library.verify import VerifiedCache
from tests.test_library_patch_model import LLAMA_70B, TinyLlama, library_specs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or availability("cuda") is not None,
                                reason="needs a CUDA GPU and the cuda backend (the lead runs it on the H200)")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def test_patch_on_a_70b_shaped_model_keeps_the_logits_and_runs_every_layer_on_library_kernels(tmp_path):
    torch.manual_seed(0)
    s = LLAMA_70B
    specs = [(op, {**problem, "dtype": "bfloat16"}) for op, problem in library_specs(s, tokens=1)]
    lib = seed_library(tmp_path / "lib", specs, "cuda", tmp_path / "cc")
    model = TinyLlama(s, torch.bfloat16, "cuda").eval()
    ids, positions = torch.randint(0, s.vocab, (1,), device="cuda"), torch.tensor([17], device="cuda")
    with torch.no_grad():
        want = model(ids, positions).float()
    report = patch(model, lib, verified=VerifiedCache(tmp_path / "verified.json"), build_dir=tmp_path / "builds")
    with torch.no_grad():
        got = model(ids, positions).float()
    torch.cuda.synchronize()
    d = report.dispatcher
    assert not d.refused, d.refused
    assert ((got - want).norm() / want.norm()).item() < 3e-2
    for op in ("rmsnorm", "rope", "silu_mul", "w4a16"):
        assert set(d.calls_by(op)) == {"exact"}, (op, d.counts())
    assert d.calls_by("w4a16")["exact"] == 5 * s.layers and d.calls_by("rmsnorm")["exact"] == 2 * s.layers + 1
