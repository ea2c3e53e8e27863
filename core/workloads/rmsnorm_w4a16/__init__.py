"""RMSNorm fused into the 4-bit GEMV after it: y = (rmsnorm(x) * gamma) . dequant(W).

The fused RMSNorm + QKV projection of LLM decoding: every layer normalises its few rows of
activations and multiplies them at once by 4-bit weights. Fused, the normalised row never goes
back to memory: a kernel reads x (tiny), computes each row's ``1 / sqrt(mean(x^2) + eps)`` itself
and applies it, with gamma, to the x values it multiplies (or to the finished dot products).

* ``x`` (m, k_groups, 128): the activations, row-major (m, K) with ``K = 128 * k_groups``;
* ``gamma`` (k_groups, 128): RMSNorm's weight, one per element of K, in the activations' dtype;
* ``qweight``, ``scales``: the W4A16 workload's GPTQ layout (:mod:`core.workloads.w4a16`: int32
  words of 8 values along K, a scale per 128 rows of K and column; symmetric, zero point 8);
* ``y`` (m, n) in the activations' dtype.

RMSNorm is the rmsnorm workload's: ``x / sqrt(mean(x^2) + eps) * gamma`` (vLLM's, Llama's), over
the whole of K, in float32 in the kernels and float64 in the reference.

Defaults: Llama-3.1-70B's QKV projection at M = 1 (K 8192 -> N 10240, bf16, eps 1e-5 as the
model's config) on a GPU; K 4096 -> N 4096 in float32 on a CPU. M is at most 16 (decoding).
Inputs: x ~ N(0, 1), gamma ~ N(1, 0.5) (the rmsnorm workload's), the words and scales as W4A16
draws them, so y is near N(0, 1.2) for every K.

Tolerances: W4A16's, with atol three times as wide for 16-bit types. The unfused baselines round
the normalised row to the activations' dtype (vLLM's ``forward_native`` twice: after the rsqrt and
after gamma) before the dequantised weights are rounded too: measured with bf16 on CPU, the error
is 3.4e-3 x |y|_rms per output against W4A16's 1.1e-3, and its maximum over the 51,200 outputs of
a verification shape reached 1.6 x W4A16's bound (0.8 x at twice atol, 0.54 x at three times).

Baselines on a GPU: torch's int4 kernel (``torch._weight_int4pack_mm``, bf16 only, weights packed
once per case by W4A16's helper) after RMSNorm under torch.compile; RMSNorm then dequantise-then-
matmul, eager and under torch.compile. On a CPU: the same two steps in numpy and in torch.
Templates: ``c.py``, ``cuda.py``, ``triton.py``.
"""
from __future__ import annotations

from typing import Any

from core.workloads.rmsnorm import forward_native
from core.workloads.spec import (Baseline, compiled_once, family_templates, Normal, Param, Tensor,
                                 verification_shapes, Workload)
from core.workloads.w4a16 import GROUP, TOLERANCE as W4A16_TOLERANCE
from core.workloads.w4a16 import _numpy_dequant_matmul, _Scales, _Words, dequant_matmul, dequantize, int4pack

HALF_ATOL = 3.0  # atol of 16-bit types against W4A16's (see the module docstring)
TOLERANCE = {d: ((atol * HALF_ATOL, rtol) if d != "float32" else (atol, rtol))
             for d, (atol, rtol) in W4A16_TOLERANCE.items()}


class RmsNormW4A16Workload(Workload):
    name = "rmsnorm_w4a16"
    description = ("y = (rmsnorm(x) * gamma) . dequant(W), RMSNorm fused into the 4-bit GEMV after it "
                   "(the QKV projection of LLM decoding)")
    params = (
        Param("m", 1, upper=16),
        Param("n", 10240, cpu_default=4096, upper=1 << 17),
        Param("k_groups", 64, cpu_default=32, upper=1024),  # K / 128: 64 is K = 8192
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
        Param("eps", 1e-5, kind="real", low=0.0, high=1.0),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "m"

    def tensors(self, problem: dict) -> list[Tensor]:
        return [Tensor("x", ("m", "k_groups", GROUP), init=Normal()),
                Tensor("gamma", ("k_groups", GROUP), init=Normal(mean=1.0, std=0.5)),
                Tensor("qweight", ("k_groups", GROUP // 8, "n"), init=_Words(), dtype="int32"),
                Tensor("scales", ("k_groups", "n"), init=_Scales()),
                Tensor("y", ("m", "n"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        # K = 896 and 1152 (not multiples of 1024, nor of any K split or batch); odd N and M
        return verification_shapes(problem, ("m", "n", "k_groups"), {"m": 3, "n": 67, "k_groups": 7}, {"m": 5, "k_groups": 9})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        x = t["x"].reshape(t["x"].shape[0], -1)
        xn = x / xp.sqrt((x * x).mean(-1, keepdims=True) + problem["eps"]) * t["gamma"].reshape(-1)
        return {"y": xn @ dequantize(xp, t["qweight"], t["scales"])}

    def weights(self, problem: dict) -> tuple[str, ...]:
        """The quantised weights and scales, which a template may repack (the CUDA tensor-core path
        does); x and gamma never reach a repack."""
        return ("qweight", "scales")

    def flops(self, shape: dict, problem: dict) -> float:
        k = GROUP * shape["k_groups"]
        return 2.0 * shape["m"] * shape["n"] * k + 4.0 * shape["m"] * k

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy_rmsnorm_dequant_matmul", "numpy", _numpy, "numpy: RMSNorm, dequantise, then matmul into y"),
                    Baseline("torch_rmsnorm_dequant_matmul", "numpy", _torch_cpu,
                             "torch on the CPU: F.rms_norm, dequantise, then matmul", returns_outputs=True)]
        return [Baseline("torch_int4pack_mm", "torch", _int4pack,
                         "RMSNorm under torch.compile, then torch._weight_int4pack_mm (bf16; packed once per case)",
                         returns_outputs=True),
                Baseline("rmsnorm_dequant_matmul_eager", "torch", _eager,
                         "vLLM's RMSNorm forward_native, then dequantise and matmul, eager", returns_outputs=True),
                Baseline("rmsnorm_dequant_matmul_compile", "torch", _compiled,
                         "the same under one torch.compile", returns_outputs=True)]


def rmsnorm_dequant_matmul(x, gamma, qweight, scales, eps: float):
    """torch: vLLM's RMSNorm of the (m, K) rows, then W4A16's dequantise-then-matmul."""
    xn = forward_native(x.reshape(x.shape[0], -1), gamma.reshape(-1), eps)
    return dequant_matmul(xn, qweight, scales)


def _eager(t: dict, problem: dict) -> Any:
    return rmsnorm_dequant_matmul(t["x"], t["gamma"], t["qweight"], t["scales"], problem["eps"])


_compiled_rmsnorm_dequant_matmul = compiled_once(rmsnorm_dequant_matmul)
_compiled_norm = compiled_once(forward_native)


def _compiled(t: dict, problem: dict) -> Any:
    return _compiled_rmsnorm_dequant_matmul(t["x"], t["gamma"], t["qweight"], t["scales"], problem["eps"])


def _int4pack(t: dict, problem: dict) -> Any:
    import torch

    if "_int4pack" not in t:  # once per case, like a model's load-time repack
        t["_int4pack"] = int4pack(t["qweight"], t["scales"])
    packed, scales_zeros = t["_int4pack"]
    x = t["x"]
    xn = _compiled_norm(x.reshape(x.shape[0], -1), t["gamma"].reshape(-1), problem["eps"])
    return torch._weight_int4pack_mm(xn, packed, GROUP, scales_zeros)


def _torch_cpu(t: dict, problem: dict) -> Any:
    import torch

    x, gamma = torch.from_numpy(t["x"]), torch.from_numpy(t["gamma"])
    xn = torch.nn.functional.rms_norm(x.reshape(x.shape[0], -1), (x.shape[1] * x.shape[2],), gamma.reshape(-1),
                                      problem["eps"])
    return dequant_matmul(xn, torch.from_numpy(t["qweight"]), torch.from_numpy(t["scales"])).numpy()


def _numpy(t: dict, problem: dict) -> None:
    """In float32 throughout, then W4A16's numpy dequantise-then-matmul on the normalised rows."""
    import numpy as np

    x = t["x"].reshape(t["x"].shape[0], -1)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    xn = x / np.sqrt(ms + np.float32(problem["eps"])) * t["gamma"].reshape(-1)
    _numpy_dequant_matmul({**t, "x": xn}, problem)
