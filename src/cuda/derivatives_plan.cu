/*
 * derivatives_plan.cu: the pruning plan of a batch of derivative sums
 * (derivatives.cu), made on the device.
 *
 * prune.c's decision (the buckets of prune.h, the lower bound L of every
 * query's kernel sum), with each unit's bound W k(min2) multiplied by F,
 * what bounds a skipped pair's terms in k1sum, first and second relative
 * to its term in s0, from the unit's own distances to the query block:
 *   Gaussian     |k1| / k = 1/2, |k1 v| / k = |v| / 2 <= sqrt(max2) / 2,
 *                |k2 v v'| / k <= |v|^2 / 4 <= max2 / 4;
 *   exponential  |k1| / k = 1 / (2 s), |k1 v| / k = 1/2,
 *                |k2 v v'| / k <= (1 + 1 / s) / 4, s >= sqrt(min2)
 * (F = max(1, ...)), so the skipped units change each sum by at most
 * tolerance times L <= s0. Compact kernels skip the units beyond their
 * support only, as the density does. One CUDA block per query block;
 * reductions in shared memory in a fixed order, so the same data give the
 * same plan on every run. The lists are made by plan.cu's plan_fill.
 */
#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "kde_cuda_common.h"
#include "derivatives.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include "tuning.cuh"

namespace kdegpu {

/* How a block decides: compact support, every unit, or the bounds. */
enum { kDerivSupport = 0, kDerivAll = 1, kDerivBounds = 2 };

/* log F (see the top of the file); +inf where nothing bounds it. */
__device__ __forceinline__ double log_derivative_factor(int kernel, double min2, double max2,
                                                        bool second)
{
  double f = 1.0;
  if (kernel == KDE_GAUSSIAN) {
    f = fmax(f, 0.5 * sqrt(max2));
    if (second) f = fmax(f, 0.25 * max2);
  } else {
    const double s = sqrt(min2);
    f = fmax(f, 0.5 / s);
    if (second) f = fmax(f, 0.25 + 0.25 / s);
  }
  return log(f);
}

/* Unit t's bound relative to the budget, as a log (NaN or +inf: visited). */
__device__ __forceinline__ double deriv_unit_key(const kde_prune_plan &p, bool second,
                                                 const double *q_lo, const double *q_hi,
                                                 int64_t t, double log_budget)
{
  double min2, max2;
  kde_box_distances(q_lo, q_hi, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, &min2, &max2);
  return (p.log_weight[t] + kde_log_profile(p.kernel, min2) +
          log_derivative_factor(p.kernel, min2, max2, second)) -
         log_budget;
}

__device__ __forceinline__ bool deriv_unit_visited(const kde_prune_plan &p, bool second,
                                                   const double *q_lo, const double *q_hi,
                                                   int64_t t, int how, double log_budget,
                                                   int first_skipped)
{
  if (how == kDerivAll) return true;
  if (how == kDerivSupport) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, &min2, &max2);
    return min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN;
  }
  return kde_prune_bucket(deriv_unit_key(p, second, q_lo, q_hi, t, log_budget)) < first_skipped;
}

__global__ void __launch_bounds__(kPlanThreads)
    kde_deriv_plan_count_kernel(const kde_prune_plan p, bool second, const double *box,
                                int64_t words, uint32_t *mask, int64_t *count)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ double s_max[kPlanThreads], s_sum[kPlanThreads];
  __shared__ double s_bucket[KDE_PRUNE_BUCKETS];
  __shared__ long long s_visits[kPlanThreads];
  __shared__ double s_budget;
  __shared__ int s_first;
  const int64_t b = blockIdx.x, n = p.n_tiles, d = p.dim;
  const int tid = threadIdx.x;
  for (int i = tid; i < 2 * d; i += kPlanThreads) s_box[i] = box[b * 2 * d + i];
  __syncthreads();
  const double *q_lo = s_box, *q_hi = s_box + d;

  int how = kde_kernel_is_compact(p.kernel) ? kDerivSupport
            : p.tolerance > 0               ? kDerivBounds
                                            : kDerivAll;
  double log_budget = 0.0;
  int first_skipped = KDE_PRUNE_BUCKETS;
  if (how == kDerivBounds) {
    /* L: the proven lower bound of every query's sum (prune.c) */
    kde_lse lower = kde_lse_empty();
    for (int64_t t = tid; t < n; t += kPlanThreads) {
      double min2, max2;
      kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
      lower = kde_lse_add(lower, p.log_weight[t] + kde_log_profile(p.kernel, max2));
    }
    s_max[tid] = lower.max;
    s_sum[tid] = lower.sum;
    __syncthreads();
    if (tid == 0) {
      for (int i = 1; i < kPlanThreads; i++)
        lower = kde_lse_merge(lower, kde_lse_make(s_max[i], s_sum[i]));
      s_budget = log(p.tolerance) + kde_lse_log(lower);
    }
    __syncthreads();
    log_budget = s_budget;
    if (!(log_budget > -INFINITY)) how = kDerivAll; /* no lower bound; uniform */
  }
  if (how == kDerivBounds) {
    /* the bounds relative to the budget, summed per bucket: each thread its
     * units, then per bucket a tree over the threads */
    double own[KDE_PRUNE_BUCKETS];
    for (int k = 0; k < KDE_PRUNE_BUCKETS; k++) own[k] = 0.0;
    for (int64_t t = tid; t < n; t += kPlanThreads) {
      const double key = deriv_unit_key(p, second, q_lo, q_hi, t, log_budget);
      const int bucket = kde_prune_bucket(key);
      if (bucket >= 0) own[bucket] += exp(key);
    }
    for (int k = 0; k < KDE_PRUNE_BUCKETS; k++) {
      s_sum[tid] = own[k];
      __syncthreads();
      for (int width = kPlanThreads / 2; width > 0; width /= 2) {
        if (tid < width) s_sum[tid] += s_sum[tid + width];
        __syncthreads();
      }
      if (tid == 0) s_bucket[k] = s_sum[0];
      __syncthreads();
    }
    if (tid == 0) s_first = kde_prune_first_skipped(s_bucket);
    __syncthreads();
    first_skipped = s_first;
  }

  /* the decisions: thread i takes words i, i + kPlanThreads, ... */
  long long visits = 0;
  for (int64_t word = tid; word < words; word += kPlanThreads) {
    uint32_t bits = 0u;
    for (int j = 0; j < 32; j++) {
      const int64_t t = word * 32 + j;
      if (t < n && deriv_unit_visited(p, second, q_lo, q_hi, t, how, log_budget, first_skipped))
        bits |= 1u << j;
    }
    mask[b * words + word] = bits;
    visits += __popc(bits);
  }
  s_visits[tid] = visits;
  __syncthreads();
  if (tid == 0) {
    long long total = 0;
    for (int i = 0; i < kPlanThreads; i++) total += s_visits[i];
    count[b] = total;
  }
}

int deriv_plan_batch(const kde_cuda_model *model, kde_replica *rep, double tolerance,
                     bool second, int64_t n_batch, batch_plan *out, kde_status *status)
{
  const kde_prune_plan plan = device_prune_plan(model, rep, tolerance, 0);
  const int64_t blocks = ceil_div(n_batch, kBlockQueries), words = ceil_div(plan.n_tiles, 32);
  int64_t tail[2] = {0, 0};
  size_t temp_bytes = 0;
  int64_t *count, *offset;
  plan_counts counts;
  out->visiting = 0;
  out->pairs = 0;
  if (blocks < 1) return 0;
  if (plan.dim > kPlanMaxDim) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "internal: the device plan serves d <= %d",
                   kPlanMaxDim);
    return -1;
  }
  if (buffer_reserve(&rep->plan_mask, (size_t) (blocks * words) * sizeof(uint32_t), status) !=
          0 ||
      buffer_reserve(&rep->plan_count, (size_t) (blocks + 1) * sizeof(int64_t), status) != 0 ||
      buffer_reserve(&rep->visit_offset, (size_t) (blocks + 1) * sizeof(int64_t), status) != 0)
    return -1;
  count = (int64_t *) rep->plan_count.ptr;
  offset = (int64_t *) rep->visit_offset.ptr;
  KDE_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, count, offset, blocks + 1,
                                             rep->stream));
  if (buffer_reserve(&rep->plan_temp, temp_bytes > 0 ? temp_bytes : 1, status) != 0) return -1;
  kde_deriv_plan_count_kernel<<<(unsigned) blocks, kPlanThreads, 0, rep->stream>>>(
      plan, second, (const double *) rep->plan_box.ptr, words, (uint32_t *) rep->plan_mask.ptr,
      count);
  KDE_CUDA_LAUNCHED("derivative plan count kernel");
  /* count[blocks] = 0, so that the exclusive sum ends with the total */
  KDE_CUDA_TRY(cudaMemsetAsync(count + blocks, 0, sizeof(int64_t), rep->stream));
  KDE_CUDA_TRY(cub::DeviceScan::ExclusiveSum(rep->plan_temp.ptr, temp_bytes, count, offset,
                                             blocks + 1, rep->stream));
  KDE_CUDA_TRY(cudaMemcpyAsync(tail, offset + blocks - 1, sizeof tail, cudaMemcpyDeviceToHost,
                               rep->stream));
  KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
  counts.blocks = blocks;
  counts.total = tail[1];
  counts.last_count = tail[1] - tail[0];
  /* visiting almost every unit: the plain sweep costs less */
  if ((double) counts.total >= 0.9 * (double) blocks * (double) plan.n_tiles) return 0;
  if (plan_fill(&plan, &counts, rep, status) != 0) return -1;
  out->visiting = 1;
  return 0;
cleanup:
  return -1;
}

} // namespace kdegpu
