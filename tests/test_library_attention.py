"""The library's decode attention op (``core/library/attention.py``): a step's queries over a KV cache of
fixed capacity filled up to a length held on the device. On the CPU: its native path is the decode
model's own masked SDPA, and a C entry (whose kernel cannot read the length) is never used for it. On
a GPU: a Triton entry serves it, under a CUDA graph replayed at a new length too."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.library import ops
from core.library.attention import attention_decode, native_attention
from core.library.decode_model import attention, step_meta
from core.library.dispatcher import Dispatcher
from core.library.verify import VerifiedCache


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def _cache(kvh: int, cap: int, d: int, filled: int, device="cpu", dtype=torch.float32):
    k, v = torch.randn(kvh, cap, d, device=device, dtype=dtype), torch.randn(kvh, cap, d, device=device, dtype=dtype)
    k[:, filled:], v[:, filled:] = 1e4, -1e4  # beyond the filled keys: anything a read would show
    return k, v


@pytest.mark.parametrize("m", [1, 3])
def test_the_native_path_equals_the_decode_models_masked_sdpa(m):
    kvh, group, d, cap, first = 2, 4, 16, 64, 37
    positions = torch.arange(first, first + m)
    k, v = _cache(kvh, cap, d, first + m)
    q = torch.randn(m, kvh * group * d)
    mask, _, lengths = step_meta(positions, cap, group)
    assert lengths.tolist() == [first + m] and lengths.dtype == torch.int32
    want = attention(q, k, v, mask, kvh * group, kvh, d)
    torch.testing.assert_close(native_attention(q, k, v, lengths), want)
    torch.testing.assert_close(attention_decode(q, k, v, lengths), want)  # no dispatcher: native


@pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")
def test_a_c_entry_that_cannot_read_the_length_is_not_used_and_the_call_runs_natively(tmp_path, compile_cache):
    from core.library.from_genome import seed_library

    kvh, group, d, cap, m = 2, 4, 16, 64, 1
    lib = seed_library(tmp_path / "lib", [("attention_decode", {"batch": 1, "queries": m, "kv_heads": kvh, "group": group,
                                                                 "head_dim": d, "context": cap})], "c", compile_cache)
    d_ = Dispatcher(lib, verified=VerifiedCache(tmp_path / "v.json"), build_dir=tmp_path / "b")
    ops.activate(d_)
    k, v = _cache(kvh, cap, d, 40)
    q = torch.randn(m, kvh * group * d)
    lengths = torch.tensor([40], dtype=torch.int32)
    torch.testing.assert_close(attention_decode(q, k, v, lengths), native_attention(q, k, v, lengths))
    assert set(d_.calls_by("attention_decode")) == {"exact"}  # found, bound, refused: the C kernel reads all 64


@pytest.mark.skipif(availability("triton") is not None, reason="needs a CUDA GPU (run on the device)")
@pytest.mark.parametrize("m", [1, 5])
def test_on_a_gpu_a_triton_entry_serves_the_op_under_a_graph_replayed_at_a_new_length(tmp_path, m):
    from core.library.from_genome import seed_library

    kvh, group, d, cap = 8, 8, 128, 1088
    lib = seed_library(tmp_path / "lib", [("attention_decode", {"batch": 1, "queries": m, "kv_heads": kvh, "group": group,
                                                                 "head_dim": d, "context": cap, "dtype": "bfloat16"})],
                       "triton", tmp_path / "cc", seed=1)
    d_ = Dispatcher(lib, verified=VerifiedCache(tmp_path / "v.json"), build_dir=tmp_path / "b")
    ops.activate(d_)
    k, v = _cache(kvh, cap, d, cap, "cuda", torch.bfloat16)
    q = torch.randn(m, kvh * group * d, device="cuda", dtype=torch.bfloat16)
    lengths = torch.tensor([1025], dtype=torch.int32, device="cuda")
    out = attention_decode(q, k, v, lengths)  # eager first: the entry loads and verifies outside a capture
    torch.testing.assert_close(out, native_attention(q, k, v, lengths), atol=2e-2, rtol=2e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = attention_decode(q, k, v, lengths)
    lengths.fill_(700)
    graph.replay()
    torch.testing.assert_close(captured, native_attention(q, k, v, lengths), atol=2e-2, rtol=2e-2)
    assert set(d_.calls_by("attention_decode")) == {"exact"}
