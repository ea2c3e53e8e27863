"""The gene space of the CUDA W4A16 template (:mod:`core.workloads.w4a16.cuda`): its four gene
groups, what fits a device, the seeds (the GEMV path's and the tensor-core path's) and the
canonicalisers that make equal kernels equal genomes. The fused RMSNorm template adds its norm gene
to these."""
from __future__ import annotations

from core.backends.cuda import hopper_features
from core.genome import ChoiceGene, Genome, MapGene, SequenceGene, with_gene
from core.workloads.w4a16 import cuda_mma, cuda_mma_w

NIBBLES = tuple(f"N{b}" for b in range(8))
MAX_FLOATS = 128  # words, x values, accumulators and partial sums per thread
SMEM_LIMIT = 48 * 1024  # static shared memory of the K-lane reduction
MAX_THREADS_PER_SM = 2048  # sm_80 and sm_90


def gene_groups(dtype: str = "bfloat16", arch: str = "") -> dict:
    """The four gene groups (the fused RMSNorm template adds its own gene to them); the tensor-core
    path (``math``) for 16-bit activations only, its bulk copies on sm_90 on (``arch``, when known)."""
    return {
        "parallel_config": (
            ChoiceGene("threads", (128, 256, 512, 1024), "threads per block"),
            ChoiceGene("ksplit", (1, 2, 4, 8, 16, 32, 64, 128), "K lanes per column thread (split-K inside the block)"),
            ChoiceGene("rows_per_block", (1, 2, 4, 8), "rows of x a block multiplies"),
            ChoiceGene("kblocks", (1, 2, 4, 8, 16), "blocks along K (tensor-core path: partial tiles added in a "
                                                   "fixed order by the last block)", legacy=1),
        ),
        "memory_pattern": (
            ChoiceGene("vec", (1, 2, 4), "columns per thread: words per access"),
            ChoiceGene("w_load", ("", ".nc", ".cs", ".L1::no_allocate", ".nc.L1::no_allocate"), "cache hint of the word loads"),
            ChoiceGene("x_load", ("", ".nc", ".L1::evict_last"), "cache hint of the x loads"),
            ChoiceGene("layout", ("gptq", "strips"), "GEMV path: GPTQ's row-major words and scales, or repacked once "
                                                     "into strips of the block's columns, each strip contiguous along K "
                                                     "(a block streams one region)", legacy="gptq"),
            ChoiceGene("stages", (0, 2, 3, 4, 6, 8), "tensor-core path: chunks of words in flight through a "
                                                    "shared-memory ring filled by cp.async (0: loads into registers)",
                       legacy=0),
            ChoiceGene("copy", ("lanes", "bulk") if hopper_features(arch) else ("lanes",), "what fills the weights-as-A path's ring: every lane's cp.async, or "
                                                  "(sm_90) bulk copies of chunks of K (batch: slots a group), x rows shared by the warps along N",
                       legacy="lanes"),
        ),
        "register_allocation": (
            ChoiceGene("batch", (1, 2, 4, 8), "words (of vec columns) loaded before their math"),
            ChoiceGene("pipeline", ("off", "next"), "the next batch's words loaded before this batch's math"),
            MapGene("regs", (("scale", ("word", "weight")), ("unroll", (1, 2))),
                    "scale on each word's partial sum or on each weight; batch-loop unroll"),
            ChoiceGene("min_blocks", (1, 2, 3, 4), "blocks per SM the registers must leave room for "
                                                  "(__launch_bounds__: fewer registers, more warps in flight)", legacy=1),
        ),
        "instruction_sequence": (
            SequenceGene("nibbles", NIBBLES, (), (), "the order of a word's 8 values"),
            ChoiceGene("first", ("words", "x"), "a batch's words first (x at each word's math), or its x first"),
            ChoiceGene("dequant", ("cvt", "magic", "mask", "half2"),
                       "nibble to float: cvt, 2^23 magic number, masked in place; or two at a time in fp16x2"),
            ChoiceGene("math", ("fma", "mma", cuda_mma_w.MATH) if dtype in cuda_mma.TYPES else ("fma",),
                       "float32 FMAs (the GEMV), or tensor-core mma.sync on repacked words: x as A (16 rows a "
                       "tile), or the weights as A (8 rows a tile, scales on the group's sums)", legacy="fma"),
        ),
    }


def fits(g: Genome) -> str | None:
    """Why ``g`` cannot run (registers, shared memory, a half2 weight scale), or None."""
    resident = g["parallel_config"]["threads"] * g["register_allocation"]["min_blocks"]
    if resident > MAX_THREADS_PER_SM:
        return f"{resident} threads resident per SM asked of __launch_bounds__ (> {MAX_THREADS_PER_SM})"
    if cuda_mma_w.applies(g):
        return cuda_mma_w.fits(g)
    if g["instruction_sequence"]["math"] == "mma":
        return cuda_mma.fits(g)
    p = g["parallel_config"]
    if p["threads"] // p["ksplit"] < 2:
        return "fewer than 2 column threads per block"
    if thread_floats(g) > MAX_FLOATS:
        return f"{thread_floats(g)} floats per thread (> {MAX_FLOATS})"
    if g["instruction_sequence"]["dequant"] == "half2" and g["register_allocation"]["regs"]["scale"] == "weight":
        return "half2 takes the scale on the word's partial sum (a scale in fp16 would be subnormal)"
    if shared_bytes(g) > SMEM_LIMIT:
        return f"the K-lane reduction needs {shared_bytes(g)} B of shared memory (> {SMEM_LIMIT})"
    return None


def _vary(seed: dict, changes: dict) -> dict:
    """``seed`` with the genes of ``changes`` (``{group: {gene: value}}``) set."""
    return {**seed, **{group: {**seed.get(group, {}), **genes} for group, genes in changes.items()}}


# M = 1 at N = 8192: 8 column threads x 64 K lanes, 32 columns a block -> 256 blocks, and
# 4 x 16 bytes in flight per thread (about 64 KB per SM at two blocks).
SEEDS = ({"parallel_config": {"threads": 512, "ksplit": 64, "rows_per_block": 1, "kblocks": 1},
          "memory_pattern": {"vec": 4, "w_load": ".nc.L1::no_allocate", "x_load": "", "layout": "gptq", "stages": 0},
          "register_allocation": {"batch": 4, "pipeline": "off", "regs": {"scale": "word", "unroll": 1}, "min_blocks": 1},
          "instruction_sequence": {"nibbles": NIBBLES, "first": "words", "dequant": "mask", "math": "fma"}},
         {"parallel_config": {"threads": 256, "ksplit": 16, "rows_per_block": 4, "kblocks": 1},
          "memory_pattern": {"vec": 2, "w_load": ".nc", "x_load": ".nc", "layout": "gptq", "stages": 0},
          "register_allocation": {"batch": 2, "pipeline": "off", "regs": {"scale": "word", "unroll": 1}, "min_blocks": 1},
          "instruction_sequence": {"nibbles": NIBBLES, "first": "x", "dequant": "magic", "math": "fma"}})
# the first, its next words loaded during this word's math and dequantised by half2
SEEDS += (_vary(SEEDS[0], {"register_allocation": {"pipeline": "next"}, "instruction_sequence": {"dequant": "half2"}}),)
# the same, its words and scales in strips of its 32 columns: every block reads one contiguous region
SEEDS += (_vary(SEEDS[2], {"memory_pattern": {"layout": "strips"}}),)
# M = 16: tensor cores; 4 warps along K by 2 along N, 64 columns a block (x read by 128 blocks, not 256,
# at N = 8192), 4 blocks along K (512 blocks); the chunk's x fragments come with its words, a chunk ahead
MMA_SEEDS = ({"parallel_config": {"threads": 256, "ksplit": 4, "rows_per_block": 1, "kblocks": 4},
              "memory_pattern": {"vec": 1, "w_load": ".nc.L1::no_allocate", "x_load": "", "layout": "gptq", "stages": 0},
              "register_allocation": {"batch": 2, "pipeline": "next", "regs": {"scale": "word", "unroll": 1}, "min_blocks": 1},
              "instruction_sequence": {"nibbles": NIBBLES, "first": "x", "dequant": "half2", "math": "mma"}},)
# M = 1: 8 warps along K over 32 columns, 2 blocks along K (512 blocks at N = 8192), 4 words in flight
MMA_SEEDS += (_vary(MMA_SEEDS[0], {"parallel_config": {"ksplit": 8, "kblocks": 2}, "register_allocation": {"batch": 4}}),)
# the M = 16 seed with 4 chunks in flight through shared memory (cp.async), not one in registers
MMA_SEEDS += (_vary(MMA_SEEDS[0], {"memory_pattern": {"stages": 4}, "register_allocation": {"pipeline": "off"}}),)
# the weights as A (cuda_mma_w): 4 warps along K by 2 along N, 32 columns a warp, 4 blocks along K,
# 4 steps of words and x in flight per lane (59 us at M = 16 on the down projection, call 21)
MMA_SEEDS += ({"parallel_config": {"threads": 256, "ksplit": 4, "rows_per_block": 1, "kblocks": 4},
               "memory_pattern": {"vec": 1, "w_load": ".L1::no_allocate", "x_load": ".L1::evict_last", "layout": "gptq",
                                  "stages": 0},
               "register_allocation": {"batch": 4, "pipeline": "off", "regs": {"scale": "word", "unroll": 1}, "min_blocks": 1},
               "instruction_sequence": {"nibbles": NIBBLES, "first": "words", "dequant": "half2", "math": "mma_w"}},)
# the GA's best of that path at M = 16 (call 22: 51.7 us): 2 warps along K by 4 along N, 2 steps in flight, two blocks an SM
MMA_SEEDS += ({"parallel_config": {"threads": 256, "ksplit": 2, "rows_per_block": 1, "kblocks": 4},
               "memory_pattern": {"vec": 1, "w_load": ".cs", "x_load": "", "layout": "gptq", "stages": 0},
               "register_allocation": {"batch": 2, "pipeline": "off", "regs": {"scale": "word", "unroll": 1}, "min_blocks": 2},
               "instruction_sequence": {"nibbles": NIBBLES, "first": "words", "dequant": "half2", "math": "mma_w"}},)
# that one's ring filled by bulk copies, 64 columns a warp, 8 blocks along K, min_blocks 1
# (call 24: 51.6 us against its 55.5 us, do_bench; call 26's GA champion: 45.17 us, 2.53x cuBLAS)
MMA_SEEDS += (_vary(MMA_SEEDS[-1], {"parallel_config": {"kblocks": 8},
                                    "memory_pattern": {"vec": 2, "w_load": "", "stages": 2, "copy": "bulk"},
                                    "register_allocation": {"batch": 1, "min_blocks": 1}}),)


def half2_pairs(g: Genome) -> Genome:
    """``half2`` takes a word's values in pairs (b, b + 4), in the order each pair first appears
    among the nibbles: orders with the same pair order are the same kernel."""
    if g["instruction_sequence"]["math"] != "fma" or g["instruction_sequence"]["dequant"] != "half2":
        return g
    pairs = list(dict.fromkeys(int(tok[1]) % 4 for tok in g["instruction_sequence"]["nibbles"]))
    return with_gene(g, "instruction_sequence", "nibbles", tuple(f"N{p}" for p in pairs) + tuple(f"N{p + 4}" for p in pairs))


CANONICALISERS = (cuda_mma.canonical, cuda_mma_w.canonical, half2_pairs)


def seeds(dtype: str, arch: str = "") -> tuple:
    """The seeds for activations of ``dtype`` (the tensor-core ones for 16-bit types; those with
    bulk copies only where ``arch`` has them)."""
    mma = tuple(s for s in MMA_SEEDS if hopper_features(arch) or s["memory_pattern"].get("copy") != "bulk")
    return SEEDS + (mma if dtype in cuda_mma.TYPES else ())


def launch_bounds(g: Genome) -> str:
    """The kernel's ``__launch_bounds__``: its block size, and the blocks per SM of ``min_blocks``."""
    mb = g["register_allocation"]["min_blocks"]
    return f"__launch_bounds__(THREADS{f', {mb}' if mb > 1 else ''})"


def register_cap(g: Genome) -> int:
    """The registers a thread may use when ``min_blocks`` blocks share an SM's 64 K."""
    return min(255, 65536 // (g["parallel_config"]["threads"] * g["register_allocation"]["min_blocks"]))


def shared_bytes(g: Genome) -> int:
    """The reduction's floats: per K-lane group left after the in-warp shuffle (one per warp, or
    per K lane when a K lane is a warp or more), per column thread, row and column."""
    if cuda_mma_w.applies(g):
        return cuda_mma_w.shared_bytes(g)
    if g["instruction_sequence"]["math"] == "mma":
        return cuda_mma.shared_bytes(g)
    p = g["parallel_config"]
    if p["ksplit"] == 1:
        return 0
    col_threads = p["threads"] // p["ksplit"]
    groups = p["ksplit"] // max(1, 32 // col_threads)
    return 4 * groups * col_threads * p["rows_per_block"] * g["memory_pattern"]["vec"]


def thread_floats(g: Genome) -> int:
    """Words in flight, x values (a batch's when loaded first), accumulators and partial sums."""
    rows, v = g["parallel_config"]["rows_per_block"], g["memory_pattern"]["vec"]
    batch = g["register_allocation"]["batch"]
    x_words = batch if g["instruction_sequence"]["first"] == "x" else 1
    words = batch * v * (2 if g["register_allocation"]["pipeline"] == "next" else 1)
    return words + 8 * rows * x_words + 2 * rows * v
