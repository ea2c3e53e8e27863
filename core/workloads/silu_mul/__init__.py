"""SiLU-and-multiply: out = SiLU(gate) * up, SiLU(g) = g / (1 + exp(-g)), elementwise.

The activation of Llama's gated MLP (``down_proj(silu(gate_proj(x)) * up_proj(x))``), once per
layer on a (tokens, intermediate) activation: purely memory-bound, 2 reads and 1 write per element.

Layout: ``gate`` and ``up`` are two (tokens, hidden) tensors and ``out`` is (tokens, hidden), as
Hugging Face's ``LlamaMLP`` computes them. vLLM's ``silu_and_mul`` reads one (tokens, 2*hidden)
tensor [gate | up] (the output of its merged gate_up projection) instead; the two layouts move the
same bytes and differ only in the inputs' row stride, and a spec dimension cannot be derived
(2 * hidden), so the separate tensors keep the spec, references and templates simple.

``gate`` is drawn from N(0, 2^2) rather than N(0, 1), so that the sigmoid's saturated tails (where
exp over- or underflows in a careless implementation) are exercised; ``up`` from N(0, 1).

Tolerances (atol, rtol) against the float64 reference: float32 (1e-5, 1e-5) -- an fp32 kernel
with ``expf``, CUDA's ``__expf``/``__fdividef`` or a degree-6 exp2 polynomial stays below 2e-6
relative; bfloat16 (1e-3, 2e-2) and float16 (1e-3, 2e-3) -- vLLM's tolerances for its gated
activations (``test_activation.py``: PyTorch's default atol, rtol 2e-2 / 2e-3), which admit the
double rounding of torch's eager ``F.silu(gate) * up`` (SiLU rounded to the dtype, then the
product: up to 2^-8 relative in bf16, 2^-10 in fp16).

FLOPs: 5 per element (negate, exp, add, divide, multiply; exp counted as one operation).

Baselines: numpy in-place ufuncs and torch's ``F.silu(gate) * up`` on the CPU; ``F.silu(gate) *
up`` eager and under torch.compile (one fused kernel) on a GPU. Templates: ``c.py``, ``cuda.py``,
``triton.py``.
"""
from __future__ import annotations

from typing import Any

from core.workloads.spec import (Baseline, compiled_once, family_templates, Normal, Param, Tensor,
                                 verification_shapes, Workload)

TOLERANCE = {"bfloat16": (1e-3, 2e-2), "float16": (1e-3, 2e-3), "float32": (1e-5, 1e-5)}
# Not a multiple of any vector width, block or unroll a template may pick (1031 is prime), and
# vLLM's odd token counts (7, 83).
ODD_HIDDEN = 1031


class SiluMulWorkload(Workload):
    name = "silu_mul"
    description = "SiLU(gate) * up, the activation of the gated MLP (Llama's SwiGLU), elementwise"
    params = (
        Param("tokens", 4096, cpu_default=256, upper=1 << 20, cpu_upper=1 << 16),
        Param("hidden", 14336, cpu_default=4096, upper=1 << 17),  # 14336: Llama-3.1-8B's intermediate size
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "tokens"

    def tensors(self, problem: dict) -> list[Tensor]:
        return [Tensor("gate", ("tokens", "hidden"), init=Normal(std=2.0)),
                Tensor("up", ("tokens", "hidden")),
                Tensor("out", ("tokens", "hidden"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        return verification_shapes(problem, ("tokens", "hidden"), {"tokens": 7, "hidden": ODD_HIDDEN}, {"tokens": 83})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        g = t["gate"]
        return {"out": g / (1 + xp.exp(-g)) * t["up"]}

    def flops(self, shape: dict, problem: dict) -> float:
        return 5.0 * shape["tokens"] * shape["hidden"]

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy", "numpy", _numpy_silu_mul, "numpy ufuncs in place into out (no temporaries)"),
                    Baseline("torch_silu_mul", "numpy", _torch_cpu_silu_mul, "torch F.silu(gate) * up on the CPU",
                             returns_outputs=True)]
        return [Baseline("torch_compile", "torch", _compiled, "F.silu(gate) * up under torch.compile (one fused kernel)",
                         returns_outputs=True),
                Baseline("torch_eager", "torch", _eager, "F.silu(gate) * up, eager (two kernels)", returns_outputs=True)]


def silu_mul_native(gate, up):
    """``F.silu(gate) * up`` in the inputs' dtype, as vLLM's ``SiluAndMul.forward_native`` computes it."""
    import torch

    return torch.nn.functional.silu(gate) * up


def _eager(t: dict, problem: dict) -> Any:
    return silu_mul_native(t["gate"], t["up"])


_compiled_silu_mul = compiled_once(silu_mul_native)


def _compiled(t: dict, problem: dict) -> Any:
    return _compiled_silu_mul(t["gate"], t["up"])


def _torch_cpu_silu_mul(t: dict, problem: dict) -> Any:
    import torch

    return silu_mul_native(torch.from_numpy(t["gate"]), torch.from_numpy(t["up"])).numpy()


def _numpy_silu_mul(t: dict, problem: dict) -> None:
    import numpy as np

    g, out = t["gate"], t["out"]
    with np.errstate(over="ignore"):  # exp(-g) = inf for g < -88 gives the right limit, 0
        np.negative(g, out=out)
        np.exp(out, out=out)
    out += np.float32(1)
    np.divide(g, out, out=out)
    out *= t["up"]
