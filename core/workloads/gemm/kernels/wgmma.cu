/* GEMM C = A @ B for Hopper (sm_90a), header-free: TMA loads into a STAGES-deep shared-memory
 * ring guarded by mbarriers, wgmma.mma_async from shared memory, one producer warpgroup and
 * CONSUMERS consumer warpgroups (warp specialisation, setmaxnreg). The frame that
 * core/workloads/gemm/wgmma.py fills. A (M x K) and B (K x N) are row-major: A is K-major for
 * wgmma, B is MN-major (the transpose bit of the B descriptor). Accumulation in fp32.
 *
 * Block: 128 * (CONSUMERS + 1) threads. Warpgroup 0 produces: one thread waits for a free ring
 * slot (empty barrier), arms the slot's full barrier with the bytes to come, and issues the TMA
 * copies of A's and B's tiles. Consumer warpgroup w computes rows [w*WG_M, (w+1)*WG_M) of the
 * BM x BN tile: it waits for the slot's full barrier, issues BK/16 x WG_M/64 wgmma m64nBNk16,
 * commits them as one group, waits until at most INFLIGHT groups are pending and frees the slot
 * the finished group read (one arrival per consumer warp). TMA zero-fills whatever lies outside
 * A or B, so edge tiles need no masks; the epilogue guards its stores (direct), or lets the TMA
 * store clip them (EPI_TMA, taken at run time only when c_tma says C's rows are 16-byte aligned).
 *
 * Clusters (CLUSTER_M = 2): two CTAs on vertically adjacent tiles share B's tile. Each loads half
 * of B's rows of every box and multicasts it to both (cp.async.bulk.tensor ... .multicast::cluster),
 * so each CTA's full barrier still expects the whole stage; a consumer warp frees a slot on the
 * empty barriers of both CTAs (mapa + a remote mbarrier.arrive), since either producer's next copy
 * writes into both. A cluster barrier opens the kernel (both CTAs' barriers exist before any remote
 * arrival) and closes it (no CTA exits while its peer may still arrive on its barriers).
 *
 * Split-K (SPLIT_K > 1): a work unit is one tile and one of SPLIT_K slices of its k-tiles (slice s:
 * [s*KT/SPLIT_K, (s+1)*KT/SPLIT_K)), the slices of a tile adjacent in the unit order. Each consumer
 * warpgroup writes its fp32 partial to its slot of the workspace `ws`, in its own fragment order
 * (coalesced 16-byte stores), fences, and counts itself on the tile's counter in `sems`; the
 * warpgroup that counts last adds the SPLIT_K partials in the fixed order 0..SPLIT_K-1 (its own read
 * back too), stores C through the usual epilogue and resets the counter for the next launch. No
 * unit waits for another (no deadlock whatever the residency), and the sum's order does not depend
 * on which slice finishes last: the result is the same bits on every launch.
 *
 * Shared memory (1024-byte aligned): STAGES x [A tile | B tile], the C staging tile (EPI_TMA),
 * then the full and empty barriers. A tile: BK/SW_E boxes of BM rows x SW_E elements; B tile:
 * BN/SW_E boxes of BK rows x SW_E elements (SW_E = SWIZZLE/2 elements per swizzled row), each
 * box one TMA copy with the SWIZZLE-byte swizzle that the wgmma descriptors name.
 *
 * Rendered behind `typedef unsigned short T;` and the genome's #defines: BM, BN, BK, CONSUMERS,
 * WG_M, MI, THREADS, STAGES, SWIZZLE, SW_E, SWZ_MODE, A_BOX, B_BOX, A_STAGE, B_STAGE,
 * STAGE_TX, C_BYTES, EPI_TMA, PERSISTENT, RASTER, GROUP_M, REG_SPLIT, PRODUCER_REGS,
 * CONSUMER_REGS, INFLIGHT, CLUSTER_M, B_SLICE, SPLIT_K.
 * Slots:
 *   {{wgmma}}    the m64nBNk16 wgmma wrapper (its accumulator list is written out per BN)
 *   {{cvt}}      the two-float pack: cvt.rn.bf16x2.f32 or cvt.rn.f16x2.f32
 *   {{loads}}    the producer's copies of a stage, A's and B's in the genome's order
 */

struct __align__(64) TmaMap { unsigned long long v[16]; };

static __device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a;
}

// ---- mbarriers --------------------------------------------------------------------------------
static __device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
#if CLUSTER_M == 1
static __device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
#endif
static __device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA ----------------------------------------------------------------------------------------
static __device__ __forceinline__ void tma_load(unsigned dst, const TmaMap *map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
#if EPI_TMA
static __device__ __forceinline__ void tma_store(const TmaMap *map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(src) : "memory");
}
#endif
static __device__ __forceinline__ void tma_prefetch(const TmaMap *map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"((unsigned long long)map) : "memory");
}

// ---- clusters -------------------------------------------------------------------------------------
#if CLUSTER_M > 1
static __device__ __forceinline__ unsigned cluster_rank() {
    unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
static __device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
// the same copy into the same offsets of every CTA in `mask`, each CTA's barrier at `bar` told
static __device__ __forceinline__ void tma_load_mc(unsigned dst, const TmaMap *map, int c0, int c1, unsigned bar,
                                                   unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
// an arrival on the barrier at the same offset in CTA `rank` of the cluster
static __device__ __forceinline__ void mbar_arrive_remote(unsigned bar, unsigned rank) {
    asm volatile("{\n\t.reg .b32 remote;\n\tmapa.shared::cluster.u32 remote, %0, %1;\n\t"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" :: "r"(bar), "r"(rank) : "memory");
}
#define LOAD_B(dst, c0, c1) tma_load_mc((dst) + crank * B_SLICE, tmB, (c0), (c1) + (int)crank * (BK / CLUSTER_M), bar, \
                                        (unsigned short)((1 << CLUSTER_M) - 1))
#else
static __device__ __forceinline__ unsigned cluster_rank() { return 0; }
#define LOAD_B(dst, c0, c1) tma_load((dst), tmB, (c0), (c1), bar)
#endif

// ---- wgmma ---------------------------------------------------------------------------------------
// Shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte units),
// swizzle mode in bits 62-63 (1 = 128 B, 2 = 64 B, 3 = 32 B).
static __device__ __forceinline__ unsigned long long make_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | ((unsigned long long)SWZ_MODE << 62);
}
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// keeps the compiler from moving accumulator registers across an asynchronous wgmma
static __device__ __forceinline__ void fence_acc(float (&d)[MI][BN / 2]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) asm volatile("" : "+f"(d[i][j]) :: "memory");
}

{{wgmma}}

static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r; asm("{{cvt}} %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi)); return r;
}
static __device__ __forceinline__ unsigned short cvt1(float f) {
    return (unsigned short)(pack2(f, 0.f) & 0xFFFF);
}

// ---- tiles ---------------------------------------------------------------------------------------
static __device__ __forceinline__ void tile_origin(int t, int tiles_m, int tiles_n, int &m0, int &n0) {
#if RASTER == 0   // row: consecutive tiles share A's rows
    m0 = (t / tiles_n) * BM; n0 = (t % tiles_n) * BN;
#elif RASTER == 1 // column: consecutive tiles share B's columns
    m0 = (t % tiles_m) * BM; n0 = (t / tiles_m) * BN;
#else             // grouped: GROUP_M tile rows swept column by column (L2 reuse of both)
    const int width = GROUP_M * tiles_n, first = (t / width) * GROUP_M, size = min(tiles_m - first, GROUP_M);
    m0 = (first + (t % width) % size) * BM; n0 = ((t % width) / size) * BN;
#endif
}

// `tiles` counts work units: cluster tiles (CLUSTER_M tile rows x 1 tile column) x SPLIT_K slices of K;
// a cluster's CTAs walk the same ones
#if PERSISTENT
#define TILE_LOOP for (int t = blockIdx.x / CLUSTER_M; t < tiles; t += gridDim.x / CLUSTER_M)
#else
#define TILE_LOOP for (int t = blockIdx.x / CLUSTER_M; t < tiles; t = tiles)
#endif
// the origin of this CTA's tile within cluster tile t (tiles_m counts cluster rows), and its k-tiles [kt0, kt1)
#if SPLIT_K > 1
#define TILE_ORIGIN(u) int m0, n0; tile_origin((u) / SPLIT_K, tiles_m, tiles_n, m0, n0); \
    m0 = m0 * CLUSTER_M + (int)crank * BM; const int ks = (u) % SPLIT_K, kt0 = ks * KT / SPLIT_K, kt1 = (ks + 1) * KT / SPLIT_K
#else
#define TILE_ORIGIN(t) int m0, n0; tile_origin(t, tiles_m, tiles_n, m0, n0); m0 = m0 * CLUSTER_M + (int)crank * BM; \
    const int kt0 = 0, kt1 = KT
#endif

static __device__ __forceinline__ void produce(const TmaMap *tmA, const TmaMap *tmB, unsigned sA, unsigned sB,
                                               unsigned full, unsigned empty, int tiles, int tiles_m, int tiles_n, int KT) {
    const unsigned crank = cluster_rank();
    int it = 0;
    TILE_LOOP {
        TILE_ORIGIN(t);
        for (int kt = kt0; kt < kt1; ++kt, ++it) {
            const int s = it % STAGES;
            const unsigned ph = (it / STAGES) & 1, bar = full + 8 * s;
            mbar_wait(empty + 8 * s, ph ^ 1);  // a fresh barrier counts its previous phase as done
            mbar_expect_tx(bar, STAGE_TX);
            {{loads}}
        }
    }
}

static __device__ __forceinline__ void release(unsigned bar) {
    if ((threadIdx.x & 31) == 0) {  // one arrival per consumer warp, on every CTA whose producer writes here
#if CLUSTER_M > 1
#pragma unroll
        for (unsigned r = 0; r < CLUSTER_M; ++r) mbar_arrive_remote(bar, r);
#else
        mbar_arrive(bar);
#endif
    }
}

static __device__ __forceinline__ void store_direct(T *C, float (&acc)[MI][BN / 2], int row0, int n0, int M, int N) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const bool pairs = (N & 1) == 0 && (((unsigned long long)C) & 3) == 0;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + mi * 64 + warp * 16 + (lane >> 2) + 8 * h;
            if (row >= M) continue;
            T *out = C + (long long)row * N;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = n0 + j * 8 + (lane & 3) * 2;
                const float v0 = acc[mi][4 * j + 2 * h], v1 = acc[mi][4 * j + 2 * h + 1];
                if (pairs && col + 1 < N) {
                    *(unsigned *)(out + col) = pack2(v0, v1);
                } else {
                    if (col < N) out[col] = cvt1(v0);
                    if (col + 1 < N) out[col + 1] = cvt1(v1);
                }
            }
        }
}

#if EPI_TMA
// The warpgroup's WG_M x BN tile as BN/64 panels of WG_M rows x 128 B, 128-byte swizzled (the
// TMA store's box), so the 8 rows a store instruction covers land in 8 different bank groups.
static __device__ __forceinline__ void store_tma(const TmaMap *tmC, unsigned sC, float (&acc)[MI][BN / 2],
                                                 int row0, int n0, int wg) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, leader = (threadIdx.x & 127) == 0;
    if (leader) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the last store has read sC
    asm volatile("bar.sync %0, 128;" :: "r"(1 + wg) : "memory");
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = mi * 64 + warp * 16 + (lane >> 2) + 8 * h;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const unsigned addr = sC + (j / 8) * (WG_M * 128) + r * 128 + (((j % 8) ^ (r % 8)) * 16) + (lane & 3) * 4;
                asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(pack2(acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1]))
                             : "memory");
            }
        }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes, read by the TMA
    asm volatile("bar.sync %0, 128;" :: "r"(1 + wg) : "memory");
    if (leader) {
#pragma unroll
        for (int p = 0; p < BN / 64; ++p) tma_store(tmC, sC + p * (WG_M * 128), n0 + p * 64, row0);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
}
#endif

#if SPLIT_K > 1
#include "wgmma_splitk.cuh"
#define SPLIT_PARAMS , float *__restrict__ ws, int *__restrict__ sems
#define SPLIT_ARGS , ws, sems
#else
#define SPLIT_PARAMS
#define SPLIT_ARGS
#endif

static __device__ __forceinline__ void consume(const TmaMap *tmC, T *C, unsigned sA, unsigned sB, unsigned sC,
                                               unsigned full, unsigned empty, int tiles, int tiles_m, int tiles_n,
                                               int KT, int M, int N, int c_tma SPLIT_PARAMS) {
    const int wg = (threadIdx.x >> 7) - 1;
    const unsigned crank = cluster_rank();
    float acc[MI][BN / 2];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.f;
    int it = 0;
    TILE_LOOP {
        TILE_ORIGIN(t);
#if SPLIT_K > 1
        if (kt1 == kt0) zero_acc(acc);  // a slice without k-tiles (KT < SPLIT_K) adds zeros
#endif
        for (int kt = kt0; kt < kt1; ++kt, ++it) {
            const int s = it % STAGES;
            mbar_wait(full + 8 * s, (it / STAGES) & 1);
            const unsigned a_stage = sA + s * A_STAGE + wg * WG_M * SWIZZLE, b_stage = sB + s * B_STAGE;
            fence_acc(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                // A: K-major, box (kk*16)/SW_E, 32 B further along the swizzled row per k-step
                const unsigned a_k = a_stage + ((kk * 16) / SW_E) * A_BOX + ((kk * 16) % SW_E) * 2;
                // B: MN-major; LBO = the next box along N, SBO = the next 8 rows along K
                const unsigned long long db = make_desc(b_stage + kk * 16 * SWIZZLE, B_BOX, 8 * SWIZZLE);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
                    wgmma_m64(acc[mi], make_desc(a_k + mi * 64 * SWIZZLE, 16, 8 * SWIZZLE), db, ((kt - kt0) | kk) != 0);
            }
            wgmma_commit();
            wgmma_wait<INFLIGHT>();
            fence_acc(acc);
            if (kt - kt0 >= INFLIGHT) release(empty + 8 * ((it - INFLIGHT) % STAGES));
        }
#if INFLIGHT
#if SPLIT_K > 1
        if (kt1 > kt0) {
#endif
        wgmma_wait<0>();
        fence_acc(acc);
        release(empty + 8 * ((it - 1) % STAGES));
#if SPLIT_K > 1
        }
#endif
#endif
        const int row0 = m0 + wg * WG_M;
#if SPLIT_K > 1
        // rows past M: nothing to store, nothing to add; otherwise only the last slice to count goes on
        if (row0 >= M || !split_reduce(acc, ws, sems, ((t / SPLIT_K) * CLUSTER_M + (int)crank) * CONSUMERS + wg, ks, wg))
            continue;
#endif
#if EPI_TMA
        if (c_tma) store_tma(tmC, sC + wg * (WG_M * BN * 2), acc, row0, n0, wg);
        else store_direct(C, acc, row0, n0, M, N);
#else
        store_direct(C, acc, row0, n0, M, N);
#endif
    }
#if EPI_TMA
    if (c_tma && (threadIdx.x & 127) == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
#if CLUSTER_M > 1
__cluster_dims__(CLUSTER_M, 1, 1)
#endif
abebot_wgmma_gemm(const __grid_constant__ TmaMap tmA, const __grid_constant__ TmaMap tmB,
                  const __grid_constant__ TmaMap tmC, T *__restrict__ C, int M, int N, int K, int c_tma SPLIT_PARAMS) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sA = base, sB = sA + STAGES * A_STAGE, sC = sB + STAGES * B_STAGE;
    const unsigned full = sC + C_BYTES, empty = full + 8 * STAGES;
    const int tiles_m = (M + BM * CLUSTER_M - 1) / (BM * CLUSTER_M), tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n * SPLIT_K;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 4 * CONSUMERS * CLUSTER_M);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        tma_prefetch(&tmA);
        tma_prefetch(&tmB);
    }
#if CLUSTER_M > 1
    cluster_sync();  // the peer's barriers are initialised before any copy or arrival reaches them
#else
    __syncthreads();
#endif
    if (threadIdx.x < 128) {
#if REG_SPLIT
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
#endif
        if (threadIdx.x == 0) produce(&tmA, &tmB, sA, sB, full, empty, tiles, tiles_m, tiles_n, KT);
    } else {
#if REG_SPLIT
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMER_REGS));
#endif
        consume(&tmC, C, sA, sB, sC, full, empty, tiles, tiles_m, tiles_n, KT, M, N, c_tma SPLIT_ARGS);
    }
#if CLUSTER_M > 1
    cluster_sync();  // every thread: no CTA leaves while its peer may still arrive on its barriers
#endif
}
