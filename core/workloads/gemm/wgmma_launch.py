"""Host side of the wgmma GEMM: the tensor maps, the staging copies TMA needs, the grid.

TMA reads a matrix through a ``CUtensorMap`` whose row pitch must be a multiple of 16 bytes and
whose base must be 16-byte aligned. A (M x K) with K not a multiple of 8, or B (K x N) with N not
a multiple of 8 (bf16), cannot be mapped in place: :func:`operand` then stages it, once per
launch, into a buffer whose rows are padded to 8 elements (the map still says K or N columns, so
the padding is never read: TMA zero-fills past the edge). C is written by the TMA store only
when its rows are aligned too; otherwise ``c_tma`` is 0 and the kernel stores from registers
with guards. Nothing here runs without a GPU except :func:`plan` (pure arithmetic), which the
tests check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from core.backends.tensor_map import TensorMap, check_2d, encode_2d

ELT = 2  # bytes of a bf16 / fp16 element


@dataclass(frozen=True)
class Plan:
    """How one launch of a (M, N, K) product is laid out: staged operands, the C path, the grid."""

    stage_a: bool
    stage_b: bool
    c_tma: bool
    grid: int
    tiles: int


def pitch_ok(cols: int) -> bool:
    """Whether a contiguous row of ``cols`` elements has the 16-byte pitch a tensor map needs."""
    return (cols * ELT) % 16 == 0


def plan(launch: dict, m: int, n: int, k: int, multiprocessors: int, c_aligned: bool = True) -> Plan:
    """The layout of one launch for the template's ``launch`` parameters on a device with
    ``multiprocessors`` SMs (``c_aligned``: C's base address is 16-byte aligned). With clusters of
    ``cluster_m`` CTAs along M the grid is a whole number of clusters, and a cluster at the bottom
    edge may hold a CTA whose tile lies past M (it loads zeros and stores nothing)."""
    cl = launch.get("cluster_m", 1)
    pairs = -(-m // (launch["block_m"] * cl)) * -(-n // launch["block_n"])  # cluster tiles: cl tile rows each
    tiles = pairs * cl
    grid = min(pairs, max(1, multiprocessors // cl)) * cl if launch["persistent"] else tiles
    c_tma = bool(launch["epilogue_tma"]) and pitch_ok(n) and c_aligned
    return Plan(stage_a=not pitch_ok(k), stage_b=not pitch_ok(n), c_tma=c_tma, grid=grid, tiles=tiles)


def staging_bytes(m: int, n: int, k: int) -> int:
    """Bytes of the padded copies of A and B a (M, N, K) launch stages (see :func:`plan`)."""
    pad = lambda c: -(-c // 8) * 8  # noqa: E731
    return ELT * ((0 if pitch_ok(k) else m * pad(k)) + (0 if pitch_ok(n) else k * pad(n)))


def operand(x: Any, rows: int, cols: int) -> tuple[Any, int, Callable[[], None] | None]:
    """(tensor to map, its row pitch in bytes, copy to run before each launch or None) for the
    row-major ``rows`` x ``cols`` torch tensor ``x``: itself when TMA can map it in place, else a
    buffer with rows padded to 8 elements, refilled from ``x`` by the copy."""
    import torch

    pitch = x.stride(0) * ELT
    if x.stride(1) == 1 and pitch % 16 == 0 and x.data_ptr() % 16 == 0:
        return x, pitch, None
    padded = torch.empty((rows, -(-cols // 8) * 8), dtype=x.dtype, device=x.device)
    view = padded[:, :cols]
    return padded, padded.stride(0) * ELT, lambda: view.copy_(x)


def maps(launch: dict, dtype: str, a: Any, b: Any, c: Any, m: int, n: int, k: int) -> tuple[list, list, bool]:
    """([tmA, tmB, tmC], copies to run before each launch, c_tma) for tensors ``a``, ``b``, ``c``."""
    sw = launch["swizzle"]
    a_src, a_pitch, a_copy = operand(a, m, k)
    b_src, b_pitch, b_copy = operand(b, k, n)
    tm_a = encode_2d(a_src.data_ptr(), dtype, m, k, a_pitch, launch["block_m"], sw // ELT, sw)
    # in a cluster each CTA copies (and multicasts) 1/cluster_m of B's rows
    tm_b = encode_2d(b_src.data_ptr(), dtype, k, n, b_pitch, launch["block_k"] // launch.get("cluster_m", 1), sw // ELT, sw)
    c_pitch = c.stride(0) * ELT
    c_tma = bool(launch["epilogue_tma"]) and c.stride(1) == 1 and check_2d(
        c.data_ptr(), m, n, c_pitch, launch["wg_m"], 64, ELT, 128) is None
    tm_c = encode_2d(c.data_ptr(), dtype, m, n, c_pitch, launch["wg_m"], 64, 128) if c_tma else TensorMap.unused()
    return [tm_a, tm_b, tm_c], [f for f in (a_copy, b_copy) if f is not None], c_tma


def bind(kernel: Any, dtype: str, t: dict, shape: dict, multiprocessors: int) -> Callable[[], None]:
    """A zero-argument launch of the loaded wgmma kernel on the case's tensors ``t``."""
    lp = kernel.launch_params
    m, n, k = shape["m"], shape["n"], shape["k"]
    if tuple(t["c"].stride()) != (n, 1):
        raise ValueError(f"the wgmma kernel writes a contiguous C (strides ({n}, 1)), got {tuple(t['c'].stride())}")
    tms, copies, c_tma = maps(lp, dtype, t["a"], t["b"], t["c"], m, n, k)
    layout = plan(lp, m, n, k, multiprocessors)
    go = kernel.bind((layout.grid, 1, 1), (lp["threads"], 1, 1), (*tms, t["c"], m, n, k, int(c_tma)),
                     lp["dynamic_shared_bytes"])
    if not copies:
        return go

    def launch() -> None:
        for copy in copies:
            copy()
        go()

    return launch
