"""torch as a harness's array library: GPU kernels (CUDA C, Triton) run on torch tensors, and the
Triton interpreter runs them on CPU tensors. torch is imported when an instance is made."""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import GUARD_ELEMENTS, Arrays, CheckResult


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


class TorchArrays(Arrays):
    name = "torch"

    def __init__(self, device: str = "cuda"):
        import torch

        self.xp = torch
        self.device = torch.device(device)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def generator(self, seed: int):
        gen = self.xp.Generator(device=self.device)
        gen.manual_seed(seed)
        return gen

    def normal(self, shape, dtype, gen, mean, std):
        t = self.xp.randn(shape, generator=gen, device=self.device, dtype=self.xp.float32)
        return (t * std + mean).to(torch_dtype(dtype))

    def uniform(self, shape, dtype, gen, low, high):
        t = self.xp.rand(shape, generator=gen, device=self.device, dtype=self.xp.float32)
        return (t * (high - low) + low).to(torch_dtype(dtype))

    def poisoned(self, shape, dtype, guard=GUARD_ELEMENTS):
        n = 1
        for d in shape:
            n *= d
        flat = self.xp.full((n + 2 * guard,), float("nan"), dtype=torch_dtype(dtype), device=self.device)
        return flat, flat[guard: guard + n].view(shape)

    def poison(self, flat):
        flat.fill_(float("nan"))

    def guards_intact(self, flat, guard=GUARD_ELEMENTS):
        torch = self.xp
        return bool(torch.isnan(flat[:guard]).all() and torch.isnan(flat[-guard:]).all())

    def guard_damage(self, flat, guard=GUARD_ELEMENTS):
        """Guard elements no longer NaN, as a device scalar (no host sync: many are read at once)."""
        torch = self.xp
        return (~torch.isnan(flat[:guard])).sum() + (~torch.isnan(flat[-guard:])).sum()

    def copy_into(self, dst, src):
        dst.copy_(src)

    def clone(self, x):
        return x.clone()

    shared: Any = None  # (numpy's allocation hook; CUDA tensors are shared as they are)

    def describe(self, x):
        """The CUDA IPC descriptor the launcher rebuilds ``x`` from (issue 35: core.evaluation.shared_buffers)."""
        if not self.on_gpu:
            return None
        from torch.multiprocessing.reductions import reduce_tensor

        rebuild, args = reduce_tensor(x)
        return ("ipc", rebuild, args)

    def same_bits(self, a, b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(self.xp.equal(a.contiguous().view(self.xp.uint8), b.contiguous().view(self.xp.uint8)))

    def float64(self, x):
        return x.double()

    def compare(self, out, ref, atol, rtol) -> CheckResult:
        torch = self.xp
        o = out.double()
        bad = ~torch.isfinite(o)
        if bool(bad.any()):
            idx = int(bad.flatten().nonzero()[0])
            return CheckResult(False, "nan_output", float("inf"), float("inf"),
                               f"{int(bad.sum())} of {o.numel()} outputs not finite (unwritten?), first at flat index {idx}")
        err = (o - ref).abs()
        max_abs = float(err.max()) if err.numel() else 0.0
        rel = float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))
        limit = atol + rtol * ref.abs()
        used = float((err / limit).max()) if err.numel() else 0.0
        over = err > limit
        if bool(over.any()):
            idx = int(over.flatten().nonzero()[0])
            return CheckResult(False, "wrong_result", max_abs, rel,
                               f"{int(over.sum())} of {o.numel()} outputs beyond tolerance; first at flat index {idx}: "
                               f"got {float(o.flatten()[idx]):.6g}, want {float(ref.flatten()[idx]):.6g}", used)
        return CheckResult(True, "", max_abs, rel, margin_used=used)

    def to_bytes(self, x) -> bytes:
        return x.contiguous().view(self.xp.uint8).cpu().numpy().tobytes()

    def nbytes(self, x) -> int:
        return int(x.numel() * x.element_size())

    def peak_extra_bytes(self, fn: Callable[[], Any]) -> int:
        """Peak bytes the torch allocator hands out during ``fn()`` beyond what was live before
        (on the CPU, allocations are not tracked: 0)."""
        if not self.on_gpu:
            fn()
            return 0
        cuda = self.xp.cuda
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        before = cuda.memory_allocated()
        fn()
        cuda.synchronize()
        return max(0, cuda.max_memory_allocated() - before)

    def index_table(self, rows):
        return self.xp.tensor(rows, dtype=self.xp.int64, device=self.device).reshape(len(rows), -1)

    def choose(self, table, rng):
        # The default CUDA generator is graph-safe: a captured draw yields a new row at every replay.
        idx = self.xp.randint(len(table), (1,), device=self.device)
        return idx, table.index_select(0, idx).view(-1)

    def take_into(self, dst, src, row, axis):
        dst.copy_(src.index_select(axis, row))

    def count_outside(self, out, ref, atol, rtol):
        o = out.double()
        finite = self.xp.isfinite(o)
        over = ((o - ref).abs() > atol + rtol * ref.abs()) & finite
        return (~finite).sum(), over.sum()

    def to_host(self, values):
        if not values:
            return []
        return [float(v) for v in self.xp.stack([self.xp.as_tensor(v, device=self.device).reshape(()) for v in values]).cpu()]

    def synchronize(self) -> None:
        if self.on_gpu:
            self.xp.cuda.synchronize()
