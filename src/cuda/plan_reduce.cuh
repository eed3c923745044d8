/*
 * plan_reduce.cuh: the device plans' block-wide reductions, in fixed
 * orders (the same plan on every run and device): L's log-sum-exp and the
 * bucket sums of a CUDA block of kWarps warps (plan.cu's count kernels,
 * kPlanWarps; plan_grouped_kernels.cuh, 8 to 32).
 */
#ifndef KDEGPU_CUDA_PLAN_REDUCE_CUH
#define KDEGPU_CUDA_PLAN_REDUCE_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "plan.cuh"
#include "prune.h"

namespace kdegpu {

constexpr int kPlanWarps = kPlanThreads / 32;

/* The log-sum-exp of the block's states (kWarps warps), merged in a fixed
 * order (lanes by xor-butterfly, then warps in turn), known to every
 * thread; s_max and s_sum (kWarps each, shared) free again on return.
 * Every thread of the block calls it (plan.cu's decisions too). */
template <int kWarps = kPlanWarps>
__device__ __forceinline__ kde_lse block_lse(kde_lse s, double *s_max, double *s_sum)
{
  s = warp_lse(s);
  if (threadIdx.x % 32 == 0) {
    s_max[threadIdx.x / 32] = s.max;
    s_sum[threadIdx.x / 32] = s.sum;
  }
  __syncthreads();
  s = kde_lse_make(s_max[0], s_sum[0]);
  for (int w = 1; w < kWarps; w++) s = kde_lse_merge(s, kde_lse_make(s_max[w], s_sum[w]));
  __syncthreads(); /* s_max, s_sum are reused */
  return s;
}

/* A warp's terms (key relative to the budget; no term: a non-finite key or
 * a bound alone above the budget, which is visited) added to its lanes'
 * buckets: lane l owns buckets l and l + 32. A bucket that several of the
 * warp's terms share takes their sum at once (a butterfly: every lane gets
 * the same bits), its first kBucketRounds buckets so; the rest, lane by
 * lane. A warp's 32 neighbouring units fall into a few buckets: where each
 * term took its own round of shuffles, a plan's bucket pass took 3.8 times
 * its pass for L (ncu, n = 1e8, 2e6 queries, d = 3, H200). The order is
 * fixed by the terms: the same sums on every run. Called by every lane of
 * the warp together. */
constexpr int kBucketRounds = 8;
__device__ __forceinline__ void bucket_add(double key, bool has, double &own_lo, double &own_hi)
{
  const int lane = threadIdx.x % 32;
  const int bucket = has ? kde_prune_bucket(key) : -1;
  const double value = bucket >= 0 ? exp(key) : 0.0;
  unsigned left = __ballot_sync(0xffffffffu, bucket >= 0);
  for (int round = 0; left != 0u && round < kBucketRounds; round++) {
    const int b = __shfl_sync(0xffffffffu, bucket, __ffs((int) left) - 1);
    double sum = bucket == b ? value : 0.0;
    for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
    if (lane == b % 32) (b < 32 ? own_lo : own_hi) += sum;
    left &= ~__ballot_sync(0xffffffffu, bucket == b);
  }
  while (left != 0u) {
    const int src = __ffs((int) left) - 1;
    left &= left - 1u;
    const int sb = __shfl_sync(0xffffffffu, bucket, src);
    const double sv = __shfl_sync(0xffffffffu, value, src);
    if (sb == lane) own_lo += sv;
    if (sb == lane + 32) own_hi += sv;
  }
}

/* The warps' bucket sums (bucket_add's own_lo, own_hi of every lane)
 * added per bucket, warps in turn, into sum[0 .. KDE_PRUNE_BUCKETS)
 * (shared): known to every thread on return. The warps pass through
 * s_bucket (kBucketSlots rows, shared) kBucketSlots at a time. */
constexpr int kBucketSlots = 8;
template <int kWarps = kPlanWarps>
__device__ __forceinline__ void block_bucket_sums(double own_lo, double own_hi,
                                                  double (*s_bucket)[KDE_PRUNE_BUCKETS],
                                                  double *sum)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double total = 0.0;
  for (int w0 = 0; w0 < kWarps; w0 += kBucketSlots) {
    const int slots = kWarps - w0 < kBucketSlots ? kWarps - w0 : kBucketSlots;
    if (warp >= w0 && warp < w0 + slots) {
      s_bucket[warp - w0][lane] = own_lo;
      s_bucket[warp - w0][lane + 32] = own_hi;
    }
    __syncthreads();
    if (threadIdx.x < KDE_PRUNE_BUCKETS) {
      for (int w = 0; w < slots; w++) total += s_bucket[w][threadIdx.x];
      if (w0 + slots == kWarps) sum[threadIdx.x] = total;
    }
    __syncthreads();
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_REDUCE_CUH */
