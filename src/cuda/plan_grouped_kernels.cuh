/*
 * plan_grouped_kernels.cuh: a query block's box plan from the units'
 * groups first (prune.c's kde_tiles_to_visit_grouped, whose proof it
 * follows): the bounds of 256 to 2048 groups, then the units of the groups
 * near the block only, so that a block's plan costs the groups plus the
 * units that may matter, not a sweep of every unit (at n = m = 1e8 those
 * sweeps took 15 s of the evaluation's 90; at 1e9 they would take hours).
 *
 * One CUDA block per query block:
 *   groups:  each group's upper bound (its total weight at its box's
 *            nearest point) and lower term (at its farthest), L's first
 *            bound from the groups (compact kernels: the groups within the
 *            support);
 *   opened:  the groups whose bound is above tolerance * L / n_groups / e^3
 *            are looked into unit by unit: L again from their units' own
 *            corners and the other groups' terms;
 *   buckets: the unopened groups (whole) and the opened groups' units in
 *            one set of buckets, the first skipped bucket;
 *   decide:  the mask words group by group: those within an unopened
 *            group a thread each, the others a warp each, unit by unit;
 *            and the block's count.
 * Sums run in fixed orders: the same plan on every run and device.
 * plan.cu launches it where the model has groups on the device and the
 * plan allows them (plan_groups_apply); tools/gpu-tests/emulate/
 * plan_grouped.cpp runs it on the host (in CI), checking the guarantee
 * against exact sums.
 */
#ifndef KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH
#define KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"

namespace kdegpu {

constexpr int kPlanWarps = kPlanThreads / 32;

/* The units' groups on a device (the model's device_groups: n_groups <=
 * kPlanMaxGroups), NULL lo where the model has none. */
struct plan_groups {
  int64_t n_groups, group_tiles;
  const double *lo, *hi;       /* n_groups x dim, group-major */
  const double *log_weight_sum, *log_rest_sum;
};

/* Whether a plan may take the groups (kde_tiles_to_visit_grouped's rule). */
__host__ __device__ inline bool plan_groups_apply(const kde_prune_plan &p, const plan_groups &g)
{
  return g.lo != NULL && g.n_groups >= 1 && g.n_groups <= kPlanMaxGroups &&
         2 * g.n_groups <= p.n_tiles && p.inv_scale2_lo == NULL &&
         !(p.leave_one_out && g.log_rest_sum == NULL) && p.derivative == KDE_PRUNE_DENSITY &&
         plan_decision(p) != kDecideAll;
}

/* A group's fate in a block's plan. */
enum { kGroupSkipped = 0, kGroupVisited = 1, kGroupOpened = 2 };

/* The log-sum-exp of the block's states, merged in a fixed order (lanes by
 * xor-butterfly, then warps in turn), known to every thread; s_max and
 * s_sum (kPlanWarps each, shared) free again on return. Every thread of
 * the block calls it (plan.cu's decisions too). */
__device__ __forceinline__ kde_lse block_lse(kde_lse s, double *s_max, double *s_sum)
{
  s = warp_lse(s);
  if (threadIdx.x % 32 == 0) {
    s_max[threadIdx.x / 32] = s.max;
    s_sum[threadIdx.x / 32] = s.sum;
  }
  __syncthreads();
  s = kde_lse_make(s_max[0], s_sum[0]);
  for (int w = 1; w < kPlanWarps; w++) s = kde_lse_merge(s, kde_lse_make(s_max[w], s_sum[w]));
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
 * (shared): known to every thread on return. */
__device__ __forceinline__ void block_bucket_sums(double own_lo, double own_hi,
                                                  double (*s_bucket)[KDE_PRUNE_BUCKETS],
                                                  double *sum)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  s_bucket[warp][lane] = own_lo;
  s_bucket[warp][lane + 32] = own_hi;
  __syncthreads();
  if (threadIdx.x < KDE_PRUNE_BUCKETS) {
    double total = s_bucket[0][threadIdx.x];
    for (int w = 1; w < kPlanWarps; w++) total += s_bucket[w][threadIdx.x];
    sum[threadIdx.x] = total;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_grouped_kernel(const kde_prune_plan p, const plan_groups g, const double *box,
                            int64_t words, uint32_t *mask, int64_t *count, double *skipped)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ double s_key[kPlanMaxGroups], s_lower[kPlanMaxGroups];
  __shared__ uint8_t s_fate[kPlanMaxGroups];
  __shared__ double s_max[kPlanWarps], s_sum[kPlanWarps];
  __shared__ double s_bucket[kPlanWarps][KDE_PRUNE_BUCKETS];
  __shared__ double s_sum_bucket[KDE_PRUNE_BUCKETS];
  __shared__ long long s_visits[kPlanWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x, d = p.dim, n_units = p.n_tiles, gt = g.group_tiles;
  for (int i = threadIdx.x; i < 2 * d; i += kPlanThreads) s_box[i] = box[b * 2 * d + i];
  __syncthreads();
  const double *q_lo = s_box, *q_hi = s_box + d;
  const bool compact = plan_decision(p) == kDecideSupport;
  const double *group_lower_weight = p.leave_one_out ? g.log_rest_sum : g.log_weight_sum;

  /* the groups: their bounds, and L's first bound (compact: within the
   * support or not) */
  kde_lse lower = kde_lse_empty();
  for (int64_t k = threadIdx.x; k < g.n_groups; k += kPlanThreads) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, g.lo + k * d, g.hi + k * d, d, &min2, &max2);
    s_key[k] = g.log_weight_sum[k] + kde_log_profile(p.kernel, min2);
    s_lower[k] = group_lower_weight[k] + kde_log_profile(p.kernel, max2) + p.log_lower_factor;
    s_fate[k] = compact ? (min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN ? kGroupOpened : kGroupSkipped)
                        : kGroupSkipped;
    lower = kde_lse_add(lower, s_lower[k]);
  }
  __syncthreads();
  double log_budget = -INFINITY;
  int first_skipped = KDE_PRUNE_BUCKETS;
  bool every_unit = false; /* no bound from the groups: the plain plan's sweep */
  if (!compact) {
    lower = block_lse(lower, s_max, s_sum);
    const double open_cut = log(p.tolerance) + kde_lse_log(lower) -
                            log((double) g.n_groups) - KDE_PRUNE_GROUPED_CUT;
    every_unit = !(open_cut > -INFINITY);
    /* the groups that may matter, unit by unit; L again from their units'
     * corners (each at most its group's) and the other groups' terms (a
     * thread's groups in block-stride, as the first bound's) */
    lower = kde_lse_empty();
    for (int64_t k = threadIdx.x; k < g.n_groups; k += kPlanThreads)
      if (!(every_unit || s_key[k] > open_cut)) lower = kde_lse_add(lower, s_lower[k]);
    for (int64_t k = 0; k < g.n_groups; k++) {
      if (!(every_unit || s_key[k] > open_cut)) continue;
      const int64_t t1 = (k + 1) * gt < n_units ? (k + 1) * gt : n_units;
      for (int64_t t = k * gt + threadIdx.x; t < t1; t += kPlanThreads) {
        double min2, max2;
        kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
        lower = kde_lse_add(lower, kde_prune_log_lower(&p, t, max2));
      }
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < g.n_groups; k += kPlanThreads)
      s_fate[k] = every_unit || s_key[k] > open_cut ? kGroupOpened : kGroupSkipped;
    log_budget = log(p.tolerance) + kde_lse_log(block_lse(lower, s_max, s_sum));
    if (!(log_budget > -INFINITY)) { /* no lower bound: every unit visited */
      for (int64_t k = threadIdx.x; k < g.n_groups; k += kPlanThreads) s_fate[k] = kGroupVisited;
      __syncthreads();
    } else {
      /* the unopened groups (whole) and the opened groups' units in one
       * set of buckets: warp-uniform trips, terms in a fixed order */
      double own_lo = 0.0, own_hi = 0.0;
      for (int64_t c = 0; c < g.n_groups; c += kPlanThreads) {
        const int64_t k = c + threadIdx.x;
        const bool has = k < g.n_groups && s_fate[k] == kGroupSkipped;
        bucket_add(has ? s_key[k] - log_budget : 0.0, has, own_lo, own_hi);
      }
      for (int64_t k = 0; k < g.n_groups; k++) {
        if (s_fate[k] != kGroupOpened) continue;
        const int64_t t1 = (k + 1) * gt < n_units ? (k + 1) * gt : n_units;
        for (int64_t c = k * gt; c < t1; c += kPlanThreads) {
          const int64_t t = c + threadIdx.x;
          double key = 0.0;
          if (t < t1) {
            double min2, max2;
            kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
            key = kde_prune_log_upper(&p, t, min2, max2) - log_budget;
          }
          bucket_add(key, t < t1, own_lo, own_hi);
        }
      }
      block_bucket_sums(own_lo, own_hi, s_bucket, s_sum_bucket);
      first_skipped = kde_prune_first_skipped(s_sum_bucket);
      /* an unopened group is visited whole where its bound's bucket is */
      for (int64_t k = threadIdx.x; k < g.n_groups; k += kPlanThreads)
        if (s_fate[k] == kGroupSkipped &&
            kde_prune_bucket(s_key[k] - log_budget + kKeySlack) < first_skipped)
          s_fate[k] = kGroupVisited;
      __syncthreads();
    }
  }

  /* the decisions, group by group (a mask word belongs to the group of
   * its first unit): the words within an unopened group at once, a thread
   * a word; the opened groups' words and those that reach into the next
   * group unit by unit, a warp a word. A warp for every word cost 14% of
   * the count at n = 1e8 (12k words a block, most of them in groups not
   * looked into; 1e7 queries, H200). */
  long long visits = 0; /* this thread's words; a warp's words in its lane 0 */
  for (int64_t k = 0; k < g.n_groups; k++) {
    const int64_t t0 = k * gt, t1 = (k + 1) * gt < n_units ? (k + 1) * gt : n_units;
    const int64_t w0 = (t0 + 31) / 32, w_end = (t1 + 31) / 32;
    /* words [w0, w_inner) end within the group (the last unit's word
     * ends the last group) */
    const int64_t w_inner = t1 == n_units ? w_end : t1 / 32;
    const int fate = s_fate[k];
    int64_t w_units = w0; /* the first word decided unit by unit */
    if (fate != kGroupOpened) {
      for (int64_t word = w0 + threadIdx.x; word < w_inner; word += kPlanThreads) {
        const int64_t used = n_units - word * 32; /* units in the word */
        const uint32_t bits = fate == kGroupSkipped ? 0u
                              : used >= 32          ? 0xffffffffu
                                                    : (1u << used) - 1u;
        mask[b * words + word] = bits;
        visits += __popc(bits);
      }
      w_units = w_inner > w0 ? w_inner : w0;
    }
    for (int64_t word = w_units + warp; word < w_end; word += kPlanWarps) {
      const int64_t t = word * 32 + lane;
      bool v = false;
      if (t < n_units) {
        const int own = s_fate[t / gt];
        if (own == kGroupVisited) {
          v = true;
        } else if (own == kGroupOpened) {
          double min2, max2;
          kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
          v = compact ? min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN
                      : kde_prune_bucket(kde_prune_log_upper(&p, t, min2, max2) - log_budget +
                                         kKeySlack) < first_skipped;
        }
      }
      const uint32_t bits = __ballot_sync(0xffffffffu, v);
      if (lane == 0) {
        mask[b * words + word] = bits;
        visits += __popc(bits);
      }
    }
  }
  for (int s = 16; s > 0; s >>= 1) visits += __shfl_xor_sync(0xffffffffu, visits, s);
  if (lane == 0) s_visits[warp] = visits;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long total = 0;
    for (int w = 0; w < kPlanWarps; w++) total += s_visits[w];
    count[b] = total;
    skipped[b] = compact || !(log_budget > -INFINITY)
                     ? -INFINITY
                     : log_budget + log(kde_prune_skipped_sum(s_sum_bucket, first_skipped));
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH */
