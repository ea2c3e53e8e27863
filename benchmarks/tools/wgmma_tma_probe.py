"""The TMA half of the wgmma GEMM alone, on the GPU: a tensor map encoded through ctypes, passed by
value, one box copied into shared memory on an mbarrier, and the shared bytes read back.

Run by benchmarks/tools/wgmma_gpu_check.py before the GEMM configurations. If this passes and a
GEMM is wrong, the fault is in the wgmma descriptors or the fragment layout, not in the copies; if
this fails, it says whether the bytes came back unswizzled, shifted or not at all. Each case copies
a 64-row box of one swizzled row's width from an 80 x 104 matrix whose 16-bit elements number
their own position, once inside the matrix and once across its bottom-right corner (zeros past it).
"""
from __future__ import annotations

SOURCE = r"""
struct __align__(64) TmaMap { unsigned long long v[16]; };
static __device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a;
}
extern "C" __global__ void tma_probe(const __grid_constant__ TmaMap tm, unsigned short *out, int c0, int c1, int nelem) {
    extern __shared__ __align__(1024) unsigned char raw[];
    const unsigned base = (smem_u32(raw) + 1023u) & ~1023u, bar = base + 2 * nelem;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(2 * nelem) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(base), "l"((unsigned long long)&tm), "r"(c0), "r"(c1), "r"(bar) : "memory");
    }
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
    for (int i = threadIdx.x; i < nelem; i += blockDim.x) {
        unsigned short v;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(base + 2 * i));
        out[i] = v;
    }
}
"""
ROWS, COLS, BOX_ROWS = 80, 104, 64


def swizzle(offset: int, s: int) -> int:
    """Swizzle<B,4,3> of a byte offset from a 1024-byte-aligned base (B = 3, 2, 1 for 128, 64, 32 B)."""
    bits = {128: 3, 64: 2, 32: 1}[s]
    return offset ^ (((offset >> 7) & ((1 << bits) - 1)) << 4)


def expected(a, s: int, c0: int, c1: int, swizzled: bool = True) -> list[int]:
    """The box's shared-memory image: element (r, c) at swizzle(r*S + 2c) / 2; zeros past the matrix."""
    cols = s // 2
    out = [0] * (BOX_ROWS * cols)
    for r in range(BOX_ROWS):
        for c in range(cols):
            gr, gc = c1 + r, c0 + c
            v = int(a[gr][gc]) if gr < len(a) and gc < len(a[0]) else 0
            off = r * s + 2 * c
            out[(swizzle(off, s) if swizzled else off) // 2] = v
    return out


def run(say, backend, cache_dir) -> dict:
    """Every case through the cuda backend's compile (into ``cache_dir``), load and by-value
    tensor-map launch."""
    import torch

    from core.backends.base import KernelSource
    from core.backends.tensor_map import encode_2d

    ks = KernelSource("cuda", SOURCE, "tma_probe", ("-std=c++17", "--gpu-architecture=sm_90a"),
                      {"dynamic_shared_bytes": 1024 + BOX_ROWS * 128 + 8}, {})
    kernel = backend.make_runtime().load(backend.compile(ks, cache_dir))
    a = torch.arange(ROWS * COLS, dtype=torch.int32).to(torch.int16).view(ROWS, COLS).cuda()
    host = a.cpu().tolist()
    cases, ok = [], True
    for s in (128, 64, 32):
        for c0, c1 in ((0, 0), (COLS - 8, ROWS - 40)):
            n = BOX_ROWS * s // 2
            out = torch.full((n,), -1, dtype=torch.int16, device="cuda")
            tm = encode_2d(a.data_ptr(), "bfloat16", ROWS, COLS, COLS * 2, BOX_ROWS, s // 2, s)
            kernel.bind((1, 1, 1), (128, 1, 1), (tm, out, c0, c1, n), ks.launch["dynamic_shared_bytes"])()
            torch.cuda.synchronize()
            got, want = out.cpu().tolist(), expected(host, s, c0, c1)
            case = {"swizzle": s, "c0": c0, "c1": c1, "ok": got == want}
            if not case["ok"]:
                i = next(j for j, (x, y) in enumerate(zip(got, want)) if x != y)
                case.update(first_mismatch={"index": i, "got": got[i], "want": want[i]},
                            unswizzled=got == expected(host, s, c0, c1, swizzled=False), untouched=all(x == -1 for x in got))
                ok = False
            cases.append(case)
            say(f"  TMA probe swizzle {s} at ({c1}, {c0}): {'ok' if case['ok'] else 'WRONG ' + str(case)}")
    return {"config": "tma_probe", "status": "ok" if ok else "wrong_result", "cases": cases, "shapes": []}

