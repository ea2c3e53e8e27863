"""The CUDA RMSNorm template's row split over a thread block cluster (sm_90 on,
``parallel_config.split``): the CUDA C that sums a row group's squares over the cluster's blocks
through distributed shared memory (``kernels/cluster_sum.cuh``), and the kernel body that hands
each block its slice (``kernels/cluster_row.cuh``).

A decode-sized row is otherwise read and written by one SM alone: at one row of 8192 columns with
its residual, the GA's fastest kernel on a cluster of 8 blocks took 1.90 us, its fastest on one
block 2.40 us (H200, benchmarks/gpu_raw/call36_rows_loads).
"""
from __future__ import annotations

from core.workloads.kernel_files import snippet

# Block k of the cluster takes the k-th slice (whole vectors) of every row; the blocks' totals meet
# in every block's shared memory, and every block sums them in the same order: the same 1 / rms
# everywhere. The texts fill rmsnorm.cu's {{row_sums}} and {{rows}} slots.
CLUSTER_SUM = snippet(__file__, "cluster_sum.cuh")
CLUSTER_ROW = snippet(__file__, "cluster_row.cuh")
