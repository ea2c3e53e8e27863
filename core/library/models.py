"""Model shape tables and the library's key convention: which (op, fmt, N, K, M) a problem is.

A model is its shape table (MISSION's "Model shapes"): hidden size, intermediate size, query and KV
heads, head size, vocabulary, layers. Three are built in (:data:`MODELS`); any other is a JSON file
of the same fields (``{"name": "my-model", "hidden": 4096, "intermediate": 14336, "heads": 32,
"kv_heads": 8, "head_dim": 128, "vocab": 128256, "layers": 32}``), read by :func:`load_model`.

:func:`entry_key` is the one mapping from a workload's problem dict to a library key, shared by the
build tool (which writes entries) and the dispatcher (which looks them up from tensor shapes):

=============  ===========================  =======================  ==================  ========
op (workload)  fmt                          N                        K                   M
=============  ===========================  =======================  ==================  ========
w4a16          ``w4g128[z]-<dtype>``        n (output features)      128 * k_groups      m
rmsnorm        ``<dtype>[-res]``            cols (hidden)            cols                rows
rope           ``<dtype>``                  q_heads * head size      kv_heads * head size tokens
silu_mul       ``<dtype>``                  hidden (intermediate)    1                   tokens
gather_gemv    ``<dtype>``                  vocab                    hidden              tokens
gemm           ``<dtype>``                  n                        k                   m
rmsnorm_w4a16  ``w4g128[z]-<dtype>``        n                        128 * k_groups      m
=============  ===========================  =======================  ==================  ========

``<dtype>`` is ``bf16``, ``fp16`` or ``fp32``; ``z`` marks zero points, ``-res`` the fused residual
add. Standard library only.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}
GROUP = 128  # w4a16's quantisation group along K


class ModelError(ValueError):
    """An unknown model name or a malformed model file (one line, for the user)."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shapes (MISSION's table)."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layers: int

    def projections(self) -> dict[str, tuple[int, int]]:
        """The decode GEMMs as {part: (N, K)}: QKV, O, gate_up and down."""
        return {"qkv": ((self.heads + 2 * self.kv_heads) * self.head_dim, self.hidden),
                "o": (self.hidden, self.heads * self.head_dim),
                "gate_up": (2 * self.intermediate, self.hidden),
                "down": (self.hidden, self.intermediate)}

    def scaled(self, divisor: int) -> ModelShape:
        """The same model with every size divided by ``divisor`` (at least 1; the head size kept
        even): a tiny stand-in for building a real library on a CPU in seconds."""
        if divisor <= 1:
            return self
        head_div = min(8, divisor)  # the head size shrinks less, the head count more: heads * size tracks hidden
        heads_div = max(1, divisor // head_div)
        heads = max(1, self.heads // heads_div)
        return ModelShape(name=self.name, hidden=max(1, self.hidden // divisor),
                          intermediate=max(1, self.intermediate // divisor), heads=heads,
                          kv_heads=min(heads, max(1, self.kv_heads // heads_div)),
                          head_dim=max(2, self.head_dim // head_div // 2 * 2), vocab=max(1, self.vocab // divisor),
                          layers=self.layers)


MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("llama-3.1-8b", 4096, 14336, 32, 8, 128, 128256, 32),
    ModelShape("llama-3.1-70b", 8192, 28672, 64, 8, 128, 128256, 80),
    ModelShape("qwen2.5-72b", 8192, 29568, 64, 8, 128, 152064, 80),
)}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_LIMIT = 1 << 24


def load_model(spec: str) -> ModelShape:
    """A built-in model by name (case-insensitive), or the model in the JSON file ``spec``;
    ModelError (one line) for an unknown name or a malformed file."""
    known = MODELS.get(spec.strip().lower())
    if known is not None:
        return known
    path = Path(spec)
    if not spec.endswith(".json") and not path.is_file():
        raise ModelError(f"unknown model {spec!r} (choose from: {', '.join(MODELS)}, or give a .json shape file)")
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"model file {spec} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"model file {spec} is unreadable: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"model file {spec} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return model_from_dict(raw, where=f"model file {spec}")


def model_from_dict(raw: object, where: str = "model") -> ModelShape:
    """The model a JSON object describes, every field checked; ModelError (one line) otherwise."""
    if not isinstance(raw, dict):
        raise ModelError(f"{where} must hold a JSON object of shapes")
    names = [f.name for f in fields(ModelShape)]
    missing = [n for n in names if n not in raw]
    if missing:
        raise ModelError(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ModelError(f"{where} has unknown fields: {', '.join(unknown)}")
    if not isinstance(raw["name"], str) or not _NAME.match(raw["name"]):
        raise ModelError(f"{where}: name must be 1-64 letters, digits, '.', '_' or '-'")
    for n in names[1:]:
        v = raw[n]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= _LIMIT:
            raise ModelError(f"{where}: {n} must be an integer from 1 to {_LIMIT} (got {v!r})")
    if raw["heads"] % raw["kv_heads"]:
        raise ModelError(f"{where}: heads ({raw['heads']}) must be a multiple of kv_heads ({raw['kv_heads']})")
    if raw["head_dim"] % 2:
        raise ModelError(f"{where}: head_dim must be even (rotary halves), got {raw['head_dim']}")
    return ModelShape(**{n: raw[n] for n in names})


def model_to_dict(model: ModelShape) -> dict:
    """The model as its JSON file holds it."""
    return asdict(model)


def dtype_short(dtype: str) -> str:
    """``bf16`` for ``bfloat16`` and so on (unknown names unchanged)."""
    return DTYPES.get(str(dtype), str(dtype))


def entry_key(op: str, problem: dict) -> tuple[str, int, int, int]:
    """(fmt, N, K, M) of workload ``op`` on the (validated) ``problem`` -- the table above;
    ValueError for a workload the library has no key for."""
    p = problem
    dt = dtype_short(p.get("dtype", "float32"))
    if op in ("w4a16", "rmsnorm_w4a16"):
        fmt = f"w4g{GROUP}{'z' if p.get('zero_points') else ''}-{dt}"
        return fmt, int(p["n"]), GROUP * int(p["k_groups"]), int(p["m"])
    if op == "rmsnorm":
        return f"{dt}{'-res' if p.get('residual') else ''}", int(p["cols"]), int(p["cols"]), int(p["rows"])
    if op == "rope":
        head = 2 * int(p["half_dim"])
        return dt, int(p["q_heads"]) * head, int(p["kv_heads"]) * head, int(p["tokens"])
    if op == "silu_mul":
        return dt, int(p["hidden"]), 1, int(p["tokens"])
    if op == "attention_decode":  # N: the query heads' width; K: the cache's capacity (keys)
        return (f"{dt}-b{int(p['batch'])}", int(p["kv_heads"]) * int(p["group"]) * int(p["head_dim"]),
                int(p["context"]), int(p["queries"]))
    if op == "gather_gemv":
        return dt, int(p["vocab"]), int(p["hidden"]), int(p["tokens"])
    if op == "gemm":
        return dt, int(p["n"]), int(p["k"]), int(p["m"])
    raise ValueError(f"the library has no key for workload {op!r}")
