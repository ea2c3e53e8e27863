"""Host side of the wgmma GEMM: the tensor maps, the staging copies TMA needs, the grid.

TMA reads a matrix through a ``CUtensorMap`` whose row pitch must be a multiple of 16 bytes and
whose base must be 16-byte aligned. A (M x K) with K not a multiple of 8, or B (K x N) with N not
a multiple of 8 (bf16), cannot be mapped in place: :func:`operand` then stages it, once per
launch, into a buffer whose rows are padded to 8 elements (the map still says K or N columns, so
the padding is never read: TMA zero-fills past the edge). C is written by the TMA store only
when its rows are aligned too; otherwise ``c_tma`` is 0 and the kernel stores from registers
with guards. With split-K (``split_k`` > 1) each launch also gets a workspace of fp32 partials
and a zeroed counter per (tile, consumer warpgroup), allocated once per :func:`bind` (the kernel
sets each counter back to zero, so a later launch finds them ready). Nothing here runs without a
GPU except :func:`plan` and :func:`split_workspace` (pure arithmetic), which the tests check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from core.backends.tensor_map import TensorMap, check_2d, encode_2d

ELT = 2  # bytes of a bf16 / fp16 element


@dataclass(frozen=True)
class Plan:
    """How one launch of a (M, N, K) product is laid out: staged operands, the C path, the grid;
    ``units`` is ``tiles`` x ``split_k`` (a tile's slices of K), ``workspace`` the bytes of split-K's
    fp32 partials and ``counters`` its int32 counters (both 0 without split-K)."""

    stage_a: bool
    stage_b: bool
    c_tma: bool
    grid: int
    tiles: int
    units: int = 0
    workspace: int = 0
    counters: int = 0


def pitch_ok(cols: int) -> bool:
    """Whether a contiguous row of ``cols`` elements has the 16-byte pitch a tensor map needs."""
    return (cols * ELT) % 16 == 0


def plan(launch: dict, m: int, n: int, k: int, multiprocessors: int, c_aligned: bool = True) -> Plan:
    """The layout of one launch for the template's ``launch`` parameters on a device with
    ``multiprocessors`` SMs (``c_aligned``: C's base address is 16-byte aligned). With clusters of
    ``cluster_m`` CTAs along M the grid is a whole number of clusters, and a cluster at the bottom
    edge may hold a CTA whose tile lies past M (it loads zeros and stores nothing)."""
    cl, sk = launch.get("cluster_m", 1), launch.get("split_k", 1)
    pairs = -(-m // (launch["block_m"] * cl)) * -(-n // launch["block_n"])  # cluster tiles: cl tile rows each
    tiles = pairs * cl
    grid = min(pairs * sk, max(1, multiprocessors // cl)) * cl if launch["persistent"] else tiles * sk
    c_tma = bool(launch["epilogue_tma"]) and pitch_ok(n) and c_aligned
    ws, counters = split_workspace(launch, m, n)
    return Plan(stage_a=not pitch_ok(k), stage_b=not pitch_ok(n), c_tma=c_tma, grid=grid, tiles=tiles,
                units=tiles * sk, workspace=ws, counters=counters)


def split_workspace(launch: dict, m: int, n: int) -> tuple[int, int]:
    """(bytes of fp32 partials, int32 counters) a split-K launch needs, (0, 0) without split-K: a
    partial of every consumer warpgroup's rows of every CTA tile for each of the ``split_k``
    slices (BM x BN floats a tile and slice), and one counter per tile and consumer warpgroup."""
    sk = launch.get("split_k", 1)
    if sk < 2:
        return 0, 0
    cl = launch.get("cluster_m", 1)
    tiles = -(-m // (launch["block_m"] * cl)) * cl * -(-n // launch["block_n"])
    consumers = launch["block_m"] // launch["wg_m"]
    return 4 * tiles * sk * launch["block_m"] * launch["block_n"], tiles * consumers


def extra_bytes(launch: dict, m: int, n: int, k: int) -> int:
    """Device memory a launch uses beyond A, B and C: staged operands and split-K's workspace."""
    ws, counters = split_workspace(launch, m, n)
    return staging_bytes(m, n, k) + ws + 4 * counters


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
    args: tuple = (*tms, t["c"], m, n, k, int(c_tma))
    keep: tuple = ()
    if layout.counters:  # split-K: fp32 partials and counters that start at zero (the kernel resets them)
        import torch

        keep = (torch.empty(layout.workspace // 4, dtype=torch.float32, device=t["c"].device),
                torch.zeros(layout.counters, dtype=torch.int32, device=t["c"].device))
        args += keep
    go = kernel.bind((layout.grid, 1, 1), (lp["threads"], 1, 1), args, lp["dynamic_shared_bytes"])
    if not copies and not keep:
        return go

    def launch() -> None:
        _alive = keep  # noqa: F841 -- the workspace lives as long as the launch (bind keeps only its address)
        for copy in copies:
            copy()
        go()

    return launch
