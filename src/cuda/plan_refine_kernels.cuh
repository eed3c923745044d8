/*
 * plan_refine_kernels.cuh: a query block's plan narrowed to the units its queries
 * need, each query judged from its own distances (prune.c states why this
 * keeps the guarantee: "per-query refinement").
 *
 * A block's box bounds every query of the block at once: its lower bound
 * takes the box's farthest corner and its upper bounds the nearest, so a
 * block whose queries are spread (sparse queries, queries between clusters
 * or far from the data) visits what its best-placed query could need at
 * the precision its worst-placed one allows. After the box plan (plan.cu)
 * has left each block's list in rep->visit and what it skipped in
 * rep->plan_skipped:
 *
 *   bounds:  a warp per query: L_q over its block's list (a log-sum-exp
 *            reduction in a fixed order), what the block's plan leaves of
 *            its budget, its bounds' bucket sums and first skipped bucket;
 *   decide:  a thread per listed unit: kept where some query of the block
 *            needs it (the block's queries in shared memory, the first that
 *            needs it ends the search), as bits of the block's mask row, and
 *            the block's count;
 *
 * then the counts are scanned and plan_fill writes the narrowed lists.
 * Sums run in fixed orders and the kept units are an OR of decisions:
 * the same plan on every run and device. plan_refine.cu launches them;
 * tools/gpu-tests/emulate/plan_refine.cpp runs them on the host (in CI),
 * checking the guarantee against exact sums.
 */
#ifndef KDEGPU_CUDA_PLAN_REFINE_KERNELS_CUH
#define KDEGPU_CUDA_PLAN_REFINE_KERNELS_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include "tuning.cuh"

namespace kdegpu {

/* The bounds kernel: a warp per query, 4 warps per CUDA block. */
constexpr int kRefineThreads = 128;
constexpr int kRefineWarps = kRefineThreads / 32;
/* query rows of a block handled by one CUDA block of the bounds kernel */
constexpr int kRefineGroups = kBlockQueries / kRefineWarps;
static_assert(kBlockQueries % kRefineWarps == 0, "whole warps per query block");
/* Its buckets: prune.h's first kRefineBuckets - 1, and one for all deeper
 * ones, whose bounds add up to at most (listed units) e^-31 of the
 * budget: they are skipped together, as kde_prune_first_skipped would skip
 * them one by one (it stops only where a sum passes 1). */
constexpr int kRefineBuckets = 32;
/* Entries per lane in flight in each pass over a query's list. */
constexpr int kRefineUnroll = 4;
/* The terms' exponentials are taken in float (expf: 2 ulp, and exponents
 * rounded to float: half an ulp of |x| <= 128, 4.1e-6 relative in all)
 * and summed in double, so L_q and the bounds' sums are within 1e-5 of
 * their exact values. A query's budget is lowered by this (log units)
 * before what the box plan skipped is taken from it (an L_q a little high
 * would otherwise leave too much where the two nearly cancel), and what
 * remains once more for the bounds' sums. */
constexpr double kFloatExpMargin = 1e-4;


/* Query row r of z as a point (a box of no extent). */
__device__ __forceinline__ void load_query(const double *z, int64_t ldz, int64_t row, int64_t dim,
                                           double *q)
{
  for (int64_t k = 0; k < dim; k++) q[k] = z[k * ldz + row];
}

/* The squared distances from point q to unit t's box, scaled as prune.c's. */
__device__ __forceinline__ void point_distances(const kde_prune_plan &p, const double *q,
                                                int64_t t, double *min2, double *max2)
{
  kde_box_distances(q, q, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, min2, max2);
  kde_prune_scale(&p, t, min2, max2);
}

/* A lane's log-sum-exp of terms x (log): a raise of the max rescales in
 * double (rare), an add takes expf (x - max <= 0): within 4e-6 relative per
 * term (kFloatExpMargin), terms below e^-87 of the max lost (a lower bound
 * stays one). */
__device__ __forceinline__ void lane_lse_add(kde_lse &s, double x)
{
  if (!(x > -INFINITY)) return;
  if (x > s.max) {
    s.sum = s.sum * exp(s.max - x) + 1.0; /* exp(-inf) = 0 for the first */
    s.max = x;
  } else {
    s.sum += (double) expf((float) (x - s.max));
  }
}

/* Grid (query blocks, kRefineGroups): warp w of CUDA block (b, g) takes
 * query row kBlockQueries b + kRefineWarps g + w of the batch and writes
 * its remaining budget (log, less kFloatExpMargin) and first skipped
 * bucket. */
__global__ void __launch_bounds__(kRefineThreads)
    kde_refine_bounds_kernel(const kde_prune_plan p, const double *z, int64_t ldz, int64_t rows,
                             const int32_t *visit, const int64_t *offset,
                             const double *block_skipped, double *remaining,
                             int32_t *first_skipped)
{
  /* each lane's bucket sums, bucket-major: lane l adds to column l only */
  __shared__ double s_part[kRefineWarps][kRefineBuckets][32];
  __shared__ double s_bucket[kRefineWarps][KDE_PRUNE_BUCKETS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x;
  const int64_t row = b * kBlockQueries + (int64_t) blockIdx.y * kRefineWarps + warp;
  if (row >= rows) return; /* the whole warp: no block-wide barrier follows */
  double q[kPlanMaxDim];
  load_query(z, ldz, row, p.dim, q);
  const int64_t lo = offset[b], hi = offset[b + 1];

  /* L_q: lane l takes entries l, l + 32, ..., kRefineUnroll at a time
   * (their loads in flight together: few queries leave few warps to hide
   * the latency), each into its own state; then the states and the lanes
   * merge in a fixed order */
  kde_lse lower[kRefineUnroll];
#pragma unroll
  for (int h = 0; h < kRefineUnroll; h++) lower[h] = kde_lse_empty();
  for (int64_t i = lo + lane; i < hi; i += 32 * kRefineUnroll) {
    int64_t t[kRefineUnroll];
#pragma unroll
    for (int h = 0; h < kRefineUnroll; h++) t[h] = i + 32 * h < hi ? visit[i + 32 * h] : -1;
#pragma unroll
    for (int h = 0; h < kRefineUnroll; h++) {
      if (t[h] < 0) continue;
      double min2, max2;
      point_distances(p, q, t[h], &min2, &max2);
      lane_lse_add(lower[h], kde_prune_log_lower(&p, t[h], max2));
    }
  }
  kde_lse total = lower[0];
#pragma unroll
  for (int h = 1; h < kRefineUnroll; h++) total = kde_lse_merge(total, lower[h]);
  total = warp_lse(total);
  const double rem =
      kde_prune_log_remaining(log(p.tolerance) + kde_lse_log(total) - kFloatExpMargin,
                              block_skipped[b]) -
      kFloatExpMargin;
  int fs = KDE_PRUNE_BUCKETS; /* keeps every listed unit */
  if (rem > -INFINITY) {
    double *part = &s_part[warp][0][0];
    for (int k = 0; k < kRefineBuckets; k++) part[k * 32 + lane] = 0.0;
    for (int64_t i = lo + lane; i < hi; i += 32 * kRefineUnroll) {
      int64_t t[kRefineUnroll];
      int bucket[kRefineUnroll];
      double value[kRefineUnroll];
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++) t[h] = i + 32 * h < hi ? visit[i + 32 * h] : -1;
      /* every load before the shared adds below */
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++) {
        bucket[h] = -1;
        value[h] = 0.0;
        if (t[h] < 0) continue;
        double min2, max2;
        point_distances(p, q, t[h], &min2, &max2);
        const double key = kde_prune_log_upper(&p, t[h], min2, max2) - rem;
        bucket[h] = kde_prune_bucket(key);
        if (bucket[h] >= kRefineBuckets) bucket[h] = kRefineBuckets - 1;
        if (bucket[h] >= 0) value[h] = (double) expf((float) key);
      }
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++)
        if (bucket[h] >= 0) part[bucket[h] * 32 + lane] += value[h];
    }
    __syncwarp();
    /* lane k sums bucket k over the lanes, each lane starting at its own
     * column (no two lanes in one bank): a fixed order per bucket */
    double sum = 0.0;
    for (int j = 0; j < 32; j++) sum += part[lane * 32 + (j + lane) % 32];
    s_bucket[warp][lane] = sum;
    s_bucket[warp][lane + 32] = 0.0;
    __syncwarp();
    fs = kde_prune_first_skipped(s_bucket[warp]);
    /* the deep buckets together passed the budget: none is skipped */
    if (fs >= kRefineBuckets) fs = KDE_PRUNE_BUCKETS;
  }
  if (lane == 0) {
    remaining[row] = rem;
    first_skipped[row] = fs;
  }
}

/* Grid (query blocks, chunks): CUDA block (b, c) decides the c-th share of
 * block b's list. The block's mask row must be 0 and count[b] 0 before
 * (the shares OR their bits and add their counts: integers, in any
 * order). */
__global__ void __launch_bounds__(kPlanThreads)
    kde_refine_decide_kernel(const kde_prune_plan p, const double *z, int64_t ldz, int64_t rows,
                             const int32_t *visit, const int64_t *offset,
                             const double *remaining, const int32_t *first_skipped,
                             int64_t words, uint32_t *mask, int64_t *count)
{
  __shared__ double s_q[kBlockQueries][kPlanMaxDim];
  __shared__ double s_rem[kBlockQueries];
  __shared__ int32_t s_fs[kBlockQueries];
  __shared__ unsigned long long s_visits[kPlanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x, first_row = b * kBlockQueries;
  const int n_q = (int) (rows - first_row < kBlockQueries ? rows - first_row : kBlockQueries);
  const int how = plan_decision(p);
  for (int r = threadIdx.x; r < n_q; r += kPlanThreads) {
    load_query(z, ldz, first_row + r, p.dim, s_q[r]);
    s_rem[r] = how == kDecideBounds ? remaining[first_row + r] : 0.0;
    s_fs[r] = how == kDecideBounds ? first_skipped[first_row + r] : 0;
  }
  __syncthreads();
  const int64_t lo = offset[b], hi = offset[b + 1];
  const int64_t share = (hi - lo + gridDim.y - 1) / gridDim.y;
  const int64_t c0 = lo + share * blockIdx.y;
  const int64_t c1 = c0 + share < hi ? c0 + share : hi;
  unsigned long long visits = 0;
  for (int64_t base = c0; base < c1; base += kPlanThreads) { /* uniform trips */
    const int64_t i = base + threadIdx.x;
    bool kept = false;
    int64_t word = INT64_MAX; /* past the list: after every real word */
    uint32_t bits = 0u;
    if (i < c1) {
      const int64_t t = visit[i];
      word = t / 32;
      for (int r = 0; r < n_q && !kept; r++) {
        if (how == kDecideBounds && s_fs[r] >= KDE_PRUNE_BUCKETS) {
          kept = true;
          break;
        }
        double min2, max2;
        point_distances(p, s_q[r], t, &min2, &max2);
        kept = how == kDecideSupport
                   ? min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN
                   : kde_prune_bucket(kde_prune_log_upper(&p, t, min2, max2) - s_rem[r] +
                                      kKeySlack) < s_fs[r];
      }
      if (kept) bits = 1u << (t % 32);
    }
    /* the lanes' units ascend: OR the bits of each run of one word into
     * its first lane, which sets them */
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t other_bits = __shfl_down_sync(0xffffffffu, bits, o);
      const long long other_word = __shfl_down_sync(0xffffffffu, (long long) word, o);
      if (lane + o < 32 && other_word == word) bits |= other_bits;
    }
    const long long previous = __shfl_up_sync(0xffffffffu, (long long) word, 1);
    if (bits != 0u && (lane == 0 || previous != word)) atomicOr(mask + b * words + word, bits);
    visits += kept ? 1 : 0;
  }
  for (int o = 16; o > 0; o >>= 1) visits += __shfl_xor_sync(0xffffffffu, visits, o);
  if (lane == 0) s_visits[warp] = visits;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < kPlanThreads / 32; w++) total += s_visits[w];
    if (total > 0) atomicAdd((unsigned long long *) &count[b], total);
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_REFINE_KERNELS_CUH */
