"""The weights-as-A path's bulk-copy ring (:mod:`cuda_mma_w`; ``memory_pattern.copy = bulk`` with
``stages`` > 0; sm_90 and later): Hopper's bulk copy (``cp.async.bulk``, the TMA unit's 1-D form)
brings chunks of K into a ring of shared memory, and mbarriers say when they are there.

Why. The path's register ring holds ``batch`` steps of 512 bytes a warp, and the registers cap the
bytes in flight at about 16 KB an SM (call 22: 2.3 TB/s at M = 16); the per-lane cp.async ring
costs an instruction and a wait per 16 bytes and a lane (78-122 us, call 22). Here one lane's copy
moves a 32-column block's words for a whole chunk (contiguous in the repacked layout), so
``stages`` chunks of the block's words are in flight at no register cost, and the x rows of a chunk
are copied once per warp along K and read by all the warps along N, not loaded by each.

Per warp along K (``wk``), ``stages`` slots, each a chunk of ``SG`` steps of 32 along K (a group of
128 cut into ``batch`` slots: smaller slots are refilled sooner, so more of the ring is in flight):
its x rows (``ROWS`` of them, :func:`x_row` bytes apart; rows past M are zeros, written once) and
then the words of the block's ``WN x VEC`` column blocks. The first warp along N of each ``wk``
issues the copies (its lanes share them), the ``full`` barrier of a slot counts their bytes, and the
``empty`` barrier counts the ``WN`` warps done with it before the slot is filled again, ``stages``
chunks ahead."""
from __future__ import annotations

STEP_WORDS = 32 * 16  # one 32-column block's words for a step of 32 along K: 32 lanes x 16 bytes


def x_row(steps: int) -> int:
    """Bytes from one x row to the next in a slot of ``steps`` steps: 64 a step, and 64 more when that
    is a multiple of 128, so that rows g and g + 1 (a quarter warp's 16-byte reads) use different banks."""
    return 64 * steps + (64 if steps % 2 == 0 else 0)


def slot_bytes(shape: dict, rows: int, steps: int) -> int:
    """One slot of ``steps`` steps: ``rows`` x rows, then the words of the block's column blocks
    (``shape``: cuda_mma_w.shape_of)."""
    return rows * x_row(steps) + shape["wn"] * shape["vec"] * steps * STEP_WORDS


def ring_bytes(shape: dict, rows: int, stages: int, steps: int) -> int:
    """Every warp along K's ``stages`` slots."""
    return shape["wk"] * stages * slot_bytes(shape, rows, steps)


# mbarrier and bulk-copy PTX (sm_90), and the issue of one chunk's copies into a slot by the producer warp
HELPERS = """#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "memory_pattern.copy = bulk needs sm_90 or later (cp.async.bulk and mbarrier transaction counts)"
#endif
static __device__ __forceinline__ unsigned sh(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mbar_init(unsigned long long *b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sh(b)), "r"(n) : "memory"); }
static __device__ __forceinline__ void mbar_expect(unsigned long long *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sh(b)), "r"(bytes) : "memory"); }
static __device__ __forceinline__ void mbar_arrive(unsigned long long *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sh(b)) : "memory"); }
static __device__ __forceinline__ void mbar_wait(unsigned long long *b, unsigned parity) {
    unsigned done;
    do asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                    : "=r"(done) : "r"(sh(b)), "r"(parity) : "memory");
    while (!done);
}
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, unsigned long long *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(sh(dst)), "l"(src), "r"(bytes), "r"(sh(b)) : "memory"); }
// chunk `c` (SG steps) of this warp's K range into `slot`: `valid` x rows and WN * VEC blocks of words
static __device__ __forceinline__ void bulk_issue(unsigned char *slot, unsigned long long *full, int c, const T *x0,
                                                  long long xstride, int valid, const uint4 *w0, long long wstride, int lane) {
    if (lane == 0) mbar_expect(full, (valid * 64 + WN * VEC * STEP_WORDS) * SG);
    __syncwarp();
    for (int i = lane; i < valid + WN * VEC; i += 32)
        if (i < valid) bulk_copy(slot + i * X_ROW, x0 + i * xstride + c * SG * 32, 64 * SG, full);
        else bulk_copy(slot + ROWS * X_ROW + (i - valid) * SG * STEP_WORDS, w0 + (i - valid) * wstride + c * SG * 32, SG * STEP_WORDS, full);
}
"""

# before the loop: barriers, the zero rows past M, the first `S` chunks
START = """    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long full[WK][S], empty[WK][S];
    unsigned char *const myring = ring + wk * S * SLOT;
    const int valid = min(ROWS, M - m0), ng = steps / SG;
    const T *const x0 = x + (long long)m0 * G * 128 + (long long)gb * 128;
    const uint4 *const w0 = (const uint4 *)qw + (long long)blockIdx.x * WN * VEC * wstride + (long long)gb * 128;
    if (threadIdx.x == 0)
        for (int i = 0; i < WK * S; ++i) { mbar_init(&full[0][0] + i, 1); mbar_init(&empty[0][0] + i, WN); }
    for (int i = threadIdx.x; i < WK * S * ROWS * (X_ROW / 16); i += THREADS)  // x rows past M: zeros, never copied over
        if ((i / (X_ROW / 16)) % ROWS >= valid) ((uint4 *)ring)[i / (X_ROW / 16) / ROWS * (SLOT / 16) + (i / (X_ROW / 16)) % ROWS * (X_ROW / 16) + i % (X_ROW / 16)] = make_uint4(0u, 0u, 0u, 0u);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (wn == 0)
        for (int q = 0; q < S && q < ng; ++q) bulk_issue(myring + q * SLOT, &full[wk][q], q, x0, (long long)G * 128, valid, w0, wstride, lane);
"""

# a step's top: at a chunk's first step, wait for its slot; then this lane's words and x from it
TOP = """            const int ch = (s0 + u) / SG, slot = ch % S;
            if (u % SG == 0) mbar_wait(&full[wk][slot], (ch / S) & 1);
            const unsigned char *const sl = myring + slot * SLOT;
            uint4 wc[VEC], xc[TH];
#pragma unroll
            for (int i = 0; i < VEC; ++i) wc[i] = *(const uint4 *)(sl + ROWS * X_ROW + ((wn * VEC + i) * SG + u % SG) * STEP_WORDS + lane * 16);
#pragma unroll
            for (int h = 0; h < TH; ++h) xc[h] = *(const uint4 *)(sl + (g + 8 * h) * X_ROW + (u % SG) * 64 + t * 16);
"""

# a chunk's last step: this warp is done with the slot; the producer fills it again, S chunks ahead
END = """            if (u % SG == SG - 1) {
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[wk][slot]);
                if (wn == 0 && ch + S < ng) {
                    mbar_wait(&empty[wk][slot], (ch / S) & 1);
                    bulk_issue(myring + slot * SLOT, &full[wk][slot], ch + S, x0, (long long)G * 128, valid, w0, wstride, lane);
                }
            }"""


def defines(shape: dict, rows: int, steps: int) -> str:
    """The constants the pieces above read, for slots of ``steps`` steps."""
    return (f"#define SG {steps}\n#define X_ROW {x_row(steps)}\n#define STEP_WORDS {STEP_WORDS}\n"
            f"#define SLOT {slot_bytes(shape, rows, steps)}\n")
