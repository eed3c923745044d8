/*
 * merge.cu: the ends of a step on the device: the kernel that merges the
 * splits' partial (max, sum) states into each query's state, and the one
 * that turns the states into log-densities. Exports their selectors.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "kernels.cuh"

namespace kdegpu {

/*
 * acc[i] = merge(acc[i] (or empty when first), the partials of every split).
 * 2^lanes_log2 consecutive threads share a query: each merges a strided
 * subset of the splits, then they combine by shuffles (few queries with
 * thousands of splits would otherwise be one long serial chain each); with
 * lanes_log2 = kMergeBlockLanesLog2 a whole block of kMergeThreads shares
 * one, its warps' states then merged in turn (2,056 splits of one query: 17
 * merges in a chain instead of 69).
 */
template <typename T>
__global__ void kde_merge_kernel(const T *__restrict__ part_max,
                                 const T *__restrict__ part_sum, int64_t ldq,
                                 int n_splits, int64_t n_query, double *acc_max,
                                 double *acc_sum, int first, int lanes_log2)
{
  const int lanes = 1 << lanes_log2;
  const int64_t gid = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t i = gid >> lanes_log2;
  const int sub = (int) (gid & (lanes - 1));
  const bool valid = i < n_query;
  kde_lse_2 st = kde_lse_empty_2();
  if (valid) {
    /* 8 loads in flight per thread before the (serial) merges */
    for (int sp0 = sub; sp0 < n_splits; sp0 += 8 * lanes) {
      T pm[8], ps[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int sp = sp0 + u * lanes;
        pm[u] = sp < n_splits ? part_max[sp * ldq + i] : (T) -INFINITY;
        ps[u] = sp < n_splits ? part_sum[sp * ldq + i] : (T) 0;
      }
#pragma unroll
      for (int u = 0; u < 8; u++)
        st = kde_lse_merge_2(st, kde_lse_make_2((double) pm[u], (double) ps[u]));
    }
  }
  for (int offset = (lanes < 32 ? lanes : 32) / 2; offset > 0; offset /= 2) {
    const double other_max = __shfl_xor_sync(0xffffffffu, st.max, offset);
    const double other_sum = __shfl_xor_sync(0xffffffffu, st.sum, offset);
    st = kde_lse_merge_2(st, kde_lse_make_2(other_max, other_sum));
  }
  if (lanes_log2 == kMergeBlockLanesLog2) { /* the same for the whole block */
    __shared__ double s_max[kMergeThreads / 32], s_sum[kMergeThreads / 32];
    if (threadIdx.x % 32 == 0) {
      s_max[threadIdx.x / 32] = st.max;
      s_sum[threadIdx.x / 32] = st.sum;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < kMergeThreads / 32; w++)
        st = kde_lse_merge_2(st, kde_lse_make_2(s_max[w], s_sum[w]));
  }
  if (valid && sub == 0) {
    if (!first) st = kde_lse_merge_2(kde_lse_make_2(acc_max[i], acc_sum[i]), st);
    acc_max[i] = st.max;
    acc_sum[i] = st.sum;
  }
}

__global__ void kde_finish_kernel(const double *__restrict__ acc_max,
                                  const double *__restrict__ acc_sum, double *offset,
                                  int64_t n, double log_const, int expanded)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  offset[i] = finish_log_density(kde_lse_make_2(acc_max[i], acc_sum[i]), offset[i],
                                 expanded, log_const);
}

template <typename T> kde_merge_fn<T> select_merge_kernel() { return kde_merge_kernel<T>; }
template kde_merge_fn<float> select_merge_kernel<float>();
template kde_merge_fn<double> select_merge_kernel<double>();

kde_finish_fn select_finish_kernel() { return kde_finish_kernel; }

} // namespace kdegpu
