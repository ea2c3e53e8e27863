/* T <-> float, the first lines of every header-free CUDA kernel (inlined where a kernel file has
 * `#include "../../kernels/convert.cuh"`: kernel_files resolves it when it reads the file).
 * Expects `typedef <scalar> T;` before it. Slots:
 *   {{to_f}} {{from_f}}  the bodies converting T -> float and float -> T (backends/cuda.py's
 *                        SCALAR_TYPES: PTX cvt for bf16 / fp16 carried as 16-bit integers)
 */

static __device__ __forceinline__ float to_f(T h) { {{to_f}} }
static __device__ __forceinline__ T from_f(float f) { {{from_f}} }
