/*
 * plan_grouped_kernels.cuh: a query block's box plan from the units'
 * groups first (prune.c's kde_tiles_to_visit_grouped, whose proof it
 * follows): the bounds of 256 to 2048 groups, then the units of the groups
 * near the block only, so that a block's plan costs the groups plus the
 * units that may matter, not a sweep of every unit (at n = m = 1e8 those
 * sweeps took 15 s of the evaluation's 90; at 1e9 they would take hours).
 *
 * One CUDA block per query block (kde_plan_grouped_kernel), or per query
 * with its point as the box, its visits ORed into its group's row
 * (kde_plan_query_grouped_kernel: prune.c's per-query plans):
 *   groups:  each group's upper bound (its total weight at its box's
 *            nearest point) and lower term (at its farthest), L's first
 *            bound from the groups (compact kernels: the groups within the
 *            support);
 *   opened:  the groups whose bound is above tolerance * L / n_groups / e^3
 *            are looked into unit by unit: L again from their units' own
 *            corners (a point's also Jensen's bound) and the other
 *            groups' terms;
 *   closed:  the opened groups below the same cut from that L, whole
 *            again (their units' terms stay in L);
 *   buckets: the unopened groups (whole) and the opened groups' units in
 *            one set of buckets, the first skipped bucket;
 *   decide:  the mask words: those that no opened group reaches a thread
 *            each, the opened groups' a warp each, unit by unit; and the
 *            block's count.
 * Sums run in fixed orders, set by the warps of a CUDA block, which depend
 * on the batch's rows only: the same plan on every run and device.
 * plan_grouped.cu launches them where the model has groups on the device
 * and the plan allows them (plan_groups_apply); tools/gpu-tests/emulate/
 * plan_grouped.cpp runs them on the host (in CI), checking the guarantee
 * against exact sums.
 */
#ifndef KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH
#define KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "plan.cuh"
#include "plan_reduce.cuh"
#include "prune.h"
#include "spatial.h"

namespace kdegpu {

/* A group's fate in a block's plan. */
enum { kGroupSkipped = 0, kGroupVisited = 1, kGroupOpened = 2 };

/* A plan's shared memory (one per CUDA block of kWarps warps): 40 KB. */
template <int kWarps> struct grouped_shared {
  double box[2 * kPlanMaxDim];
  double key[kPlanMaxGroups];
  union {
    double lower[kPlanMaxGroups]; /* the groups' terms of L, then */
    int32_t open[kPlanMaxGroups]; /* the opened groups, ascending */
  };
  uint8_t fate[kPlanMaxGroups];
  double max[kWarps], sum[kWarps];
  double bucket[kBucketSlots][KDE_PRUNE_BUCKETS];
  double sum_bucket[KDE_PRUNE_BUCKETS];
  long long visits[kWarps];
  int warp_count[kWarps];
};

/* What a plan found, known to every thread. */
struct grouped_found {
  long long visits; /* units visited (kWrite only) */
  double skipped;   /* log of the bounds skipped, -inf: none */
};

/* The opened groups in ascending order into s.open (over s.lower, which
 * must be free): their count, known to every thread. Every thread calls
 * it. */
template <int kWarps>
__device__ __forceinline__ int64_t list_opened(int64_t n_groups, grouped_shared<kWarps> &s)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t listed = 0;
  for (int64_t c = 0; c < n_groups; c += 32 * kWarps) {
    const int64_t k = c + threadIdx.x;
    const bool opened = k < n_groups && s.fate[k] == kGroupOpened;
    const unsigned bits = __ballot_sync(0xffffffffu, opened);
    if (lane == 0) s.warp_count[warp] = __popc(bits);
    __syncthreads();
    const int64_t before = listed + __popc(bits & ((1u << lane) - 1u));
    int64_t earlier = 0; /* the earlier warps' */
    for (int w = 0; w < kWarps; w++) {
      if (w < warp) earlier += s.warp_count[w];
      listed += s.warp_count[w];
    }
    if (opened) s.open[before + earlier] = (int32_t) k;
    __syncthreads(); /* warp_count is reused */
  }
  return listed;
}

/* A thread's walk over the opened groups' units in block-stride (kThreads
 * a step): step u of the walk is unit gt open[j] + off of opened group j
 * (j < n_open; past the last unit where the last group is short). A step
 * moves kThreads / gt groups and kThreads % gt units on. */
struct opened_walk {
  int32_t j, off, gt, step_j, step_off; /* groups < 2^11, units < 2^31 */
};
template <int kThreads>
__device__ __forceinline__ opened_walk walk_from(int64_t u, int64_t gt)
{
  const int32_t g32 = (int32_t) gt, u32 = (int32_t) u;
  return opened_walk{u32 / g32, u32 % g32, g32, kThreads / g32, kThreads % g32};
}
__device__ __forceinline__ void walk_on(opened_walk &w)
{
  w.j += w.step_j;
  w.off += w.step_off;
  if (w.off >= w.gt) {
    w.off -= w.gt;
    w.j++;
  }
}

/* The plan of the box in s.box (q_lo, then q_hi; every thread reads it)
 * into mask_row: kWrite writes every word of the row (a query block's own
 * row) and counts the visits; otherwise the visited bits are ORed into the
 * row (a query's point into its group's row, which must be 0 before).
 * The units of the opened groups are walked in block-stride, as one run:
 * a loop over every group, each opened one in turn, kept a CUDA block's
 * warps on the groups' bookkeeping (2.3M warp instructions per query at n
 * = 1e8, d = 3, IPC 3.3: ncu, H200). */
template <bool kWrite, int kWarps>
__device__ __forceinline__ grouped_found plan_grouped_box(const kde_prune_plan &p,
                                                          const plan_groups &g,
                                                          uint32_t *mask_row,
                                                          grouped_shared<kWarps> &s)
{
  constexpr int kThreads = 32 * kWarps;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t d = p.dim, n_units = p.n_tiles, gt = g.group_tiles;
  const int64_t words = (n_units + 31) / 32;
  const double *q_lo = s.box, *q_hi = s.box + d;
  const double *point = kde_box_point(q_lo, q_hi, d);
  const bool compact = plan_decision(p) == kDecideSupport;
  const double *group_lower_weight = p.leave_one_out ? g.log_rest_sum : g.log_weight_sum;

  /* the groups: their bounds, and L's first bound (compact: within the
   * support or not) */
  kde_lse lower = kde_lse_empty();
  for (int64_t k = threadIdx.x; k < g.n_groups; k += kThreads) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, g.lo + k * d, g.hi + k * d, d, &min2, &max2);
    s.key[k] = g.log_weight_sum[k] + kde_log_profile(p.kernel, min2);
    s.lower[k] = group_lower_weight[k] + kde_log_profile(p.kernel, max2) + p.log_lower_factor;
    s.fate[k] = compact ? (min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN ? kGroupOpened : kGroupSkipped)
                        : kGroupSkipped;
    lower = kde_lse_add(lower, s.lower[k]);
  }
  __syncthreads();
  double log_budget = -INFINITY;
  int first_skipped = KDE_PRUNE_BUCKETS;
  int64_t n_open = 0;
  if (compact) {
    n_open = list_opened<kWarps>(g.n_groups, s);
  } else {
    lower = block_lse<kWarps>(lower, s.max, s.sum);
    const double open_cut = log(p.tolerance) + kde_lse_log(lower) -
                            log((double) g.n_groups) - KDE_PRUNE_GROUPED_CUT;
    /* no bound from the groups: every unit looked into (the plain plan) */
    const bool every_unit = !(open_cut > -INFINITY);
    /* the groups that may matter, unit by unit; L again from the other
     * groups' terms and from their units' corners (each at most its
     * group's; a point's also Jensen's bound) */
    lower = kde_lse_empty();
    for (int64_t k = threadIdx.x; k < g.n_groups; k += kThreads) {
      const bool opened = every_unit || s.key[k] > open_cut;
      if (!opened) lower = kde_lse_add(lower, s.lower[k]);
      s.fate[k] = opened ? kGroupOpened : kGroupSkipped;
    }
    __syncthreads(); /* s.lower read, the fates set */
    n_open = list_opened<kWarps>(g.n_groups, s);
    for (opened_walk w = walk_from<kThreads>(threadIdx.x, gt); w.j < n_open; walk_on(w)) {
      const int64_t t = s.open[w.j] * gt + w.off;
      if (t >= n_units) continue;
      double min2, max2;
      kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
      lower = kde_lse_add(lower, kde_prune_log_lower_box(&p, t, max2, point, d));
    }
    log_budget = log(p.tolerance) + kde_lse_log(block_lse<kWarps>(lower, s.max, s.sum));
    if (!(log_budget > -INFINITY)) { /* no lower bound: every unit visited */
      for (int64_t k = threadIdx.x; k < g.n_groups; k += kThreads) s.fate[k] = kGroupVisited;
      n_open = 0;
      __syncthreads();
    } else {
      /* the opened groups below the cut from L's new budget, whole again
       * (their units' terms stay in L) */
      if (!every_unit) {
        const double close_cut = log_budget - log((double) g.n_groups) - KDE_PRUNE_GROUPED_CUT;
        for (int64_t k = threadIdx.x; k < g.n_groups; k += kThreads)
          if (s.fate[k] == kGroupOpened && !(s.key[k] > close_cut)) s.fate[k] = kGroupSkipped;
        __syncthreads();
        n_open = list_opened<kWarps>(g.n_groups, s);
      }
      /* the unopened groups (whole) and the opened groups' units in one
       * set of buckets: warp-uniform trips, terms in a fixed order */
      double own_lo = 0.0, own_hi = 0.0;
      for (int64_t c = 0; c < g.n_groups; c += kThreads) {
        const int64_t k = c + threadIdx.x;
        const bool has = k < g.n_groups && s.fate[k] == kGroupSkipped;
        bucket_add(has ? s.key[k] - log_budget : 0.0, has, own_lo, own_hi);
      }
      opened_walk w = walk_from<kThreads>(threadIdx.x, gt);
      for (int64_t c = 0; c < n_open * gt; c += kThreads, walk_on(w)) {
        const int64_t t = w.j < n_open ? s.open[w.j] * gt + w.off : n_units;
        double key = 0.0;
        if (t < n_units) {
          double min2, max2;
          kde_box_distances(q_lo, q_hi, p.lo + t * d, p.hi + t * d, d, &min2, &max2);
          key = kde_prune_log_upper(&p, t, min2, max2) - log_budget;
        }
        bucket_add(key, t < n_units, own_lo, own_hi);
      }
      block_bucket_sums<kWarps>(own_lo, own_hi, s.bucket, s.sum_bucket);
      first_skipped = kde_prune_first_skipped(s.sum_bucket);
      /* an unopened group is visited whole where its bound's bucket is */
      for (int64_t k = threadIdx.x; k < g.n_groups; k += kThreads)
        if (s.fate[k] == kGroupSkipped &&
            kde_prune_bucket(s.key[k] - log_budget + kKeySlack) < first_skipped)
          s.fate[k] = kGroupVisited;
      __syncthreads();
    }
  }

  /* the decisions: a mask word that no opened group reaches, a thread
   * each from its groups' fates; the words of each opened group unit by
   * unit, a warp each (a word that several opened groups reach, by the
   * first of them). ORing, a word of no visit is left. */
  const auto put = [&](int64_t word, uint32_t bits) {
    if (kWrite) mask_row[word] = bits;
    else if (bits != 0u) atomicOr(mask_row + word, bits);
  };
  const uint32_t units32 = (uint32_t) n_units, gt32 = (uint32_t) gt; /* units < 2^31 */
  long long visits = 0; /* this thread's words; a warp's words in its lane 0 */
  for (int64_t word = threadIdx.x; word < words; word += kThreads) {
    const uint32_t t0 = (uint32_t) word * 32u;
    const uint32_t t_end = t0 + 32u < units32 ? t0 + 32u : units32;
    const uint32_t k0 = t0 / gt32, k1 = (t_end - 1u) / gt32;
    bool reached = false; /* by an opened group */
    for (uint32_t k = k0; k <= k1; k++) reached = reached || s.fate[k] == kGroupOpened;
    if (reached) continue;
    uint32_t bits = 0u;
    for (uint32_t k = k0; k <= k1; k++) {
      if (s.fate[k] != kGroupVisited) continue;
      const uint32_t from = k * gt32 > t0 ? k * gt32 - t0 : 0u;
      const uint32_t to = (k + 1u) * gt32 < t_end ? (k + 1u) * gt32 - t0 : t_end - t0;
      bits |= (to >= 32u ? 0xffffffffu : (1u << to) - 1u) & ~((1u << from) - 1u);
    }
    put(word, bits);
    visits += __popc(bits);
  }
  /* the opened groups' words as one run, group_words slots a group (the
   * most words a group reaches), a warp a slot */
  const int64_t group_words = (int64_t) (gt32 / 32u + (gt32 % 32u == 0u ? 0u : 2u));
  for (int64_t slot = warp; slot < n_open * group_words; slot += kWarps) {
    const uint32_t k = (uint32_t) s.open[slot / group_words];
    const uint32_t t0 = k * gt32, t1 = t0 + gt32 < units32 ? t0 + gt32 : units32;
    const uint32_t word = t0 / 32u + (uint32_t) (slot % group_words);
    if (word > (t1 - 1u) / 32u) continue;
    /* the groups before k that reach this word (uniform in the warp) */
    bool first = true;
    for (uint32_t kk = word * 32u / gt32; kk < k; kk++)
      first = first && s.fate[kk] != kGroupOpened;
    if (!first) continue;
    const uint32_t t = word * 32u + lane;
    bool v = false;
    if (t < units32) {
      const int own = s.fate[t / gt32];
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
      put(word, bits);
      visits += __popc(bits);
    }
  }
  grouped_found found;
  found.skipped = compact || !(log_budget > -INFINITY)
                      ? -INFINITY
                      : log_budget + log(kde_prune_skipped_sum(s.sum_bucket, first_skipped));
  found.visits = 0;
  if (kWrite) {
    for (int o = 16; o > 0; o >>= 1) visits += __shfl_xor_sync(0xffffffffu, visits, o);
    if (lane == 0) s.visits[warp] = visits;
    __syncthreads();
    for (int w = 0; w < kWarps; w++) found.visits += s.visits[w];
  }
  return found;
}

/* One CUDA block per query block b: its box's plan into mask row b, its
 * count and what it skipped. */
__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_grouped_kernel(const kde_prune_plan p, const plan_groups g, const double *box,
                            int64_t words, uint32_t *mask, int64_t *count, double *skipped)
{
  __shared__ grouped_shared<kPlanWarps> s;
  const int64_t b = blockIdx.x, d = p.dim;
  for (int i = threadIdx.x; i < 2 * d; i += kPlanThreads) s.box[i] = box[b * 2 * d + i];
  __syncthreads();
  const grouped_found found = plan_grouped_box<true, kPlanWarps>(p, g, mask + b * words, s);
  if (threadIdx.x == 0) {
    count[b] = found.visits;
    skipped[b] = found.skipped;
  }
}

/* One CUDA block of kWarps warps per query row r of z (rows [0, rows)):
 * the row's own plan, its point as the box, ORed into the mask row of its
 * group of kGroupRows (row r / kGroupRows: plan_refine's layout), 0
 * before. */
template <int kWarps>
__global__ void __launch_bounds__(32 * kWarps)
    kde_plan_query_grouped_kernel(const kde_prune_plan p, const plan_groups g, const double *z,
                                  int64_t ldz, int64_t words, uint32_t *mask)
{
  __shared__ grouped_shared<kWarps> s;
  const int64_t row = blockIdx.x, d = p.dim;
  for (int i = threadIdx.x; i < 2 * d; i += 32 * kWarps) s.box[i] = z[(i % d) * ldz + row];
  __syncthreads();
  plan_grouped_box<false, kWarps>(p, g, mask + row / kGroupRows * words, s);
}

/* count[b]: the units that some group's row of query block b keeps (the
 * OR of its kQueryGroups rows), and, added into *group_rows, the query
 * rows that evaluate them (those of the groups that keep each): a CUDA
 * block per query block, the words in block-stride. rows: the batch's.
 * Integers: the same sums in any order. */
__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_rows_count_kernel(const uint32_t *mask, int64_t words, int64_t rows,
                               int64_t *count, unsigned long long *group_rows)
{
  __shared__ unsigned long long s_kept[kPlanWarps], s_evaluated[kPlanWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t b = blockIdx.x, block_rows = rows - b * kBlockQueries;
  const uint32_t *row = mask + b * kQueryGroups * words;
  unsigned long long kept = 0, evaluated = 0;
  for (int64_t word = threadIdx.x; word < words; word += kPlanThreads) {
    uint32_t any = 0u;
    for (int g = 0; g < kQueryGroups; g++) {
      const uint32_t bits = row[g * words + word];
      any |= bits;
      evaluated += (unsigned long long) __popc(bits) * (unsigned long long) group_rows_in(block_rows, g);
    }
    kept += (unsigned long long) __popc(any);
  }
  for (int o = 16; o > 0; o >>= 1) {
    kept += __shfl_xor_sync(0xffffffffu, kept, o);
    evaluated += __shfl_xor_sync(0xffffffffu, evaluated, o);
  }
  if (lane == 0) {
    s_kept[warp] = kept;
    s_evaluated[warp] = evaluated;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kPlanWarps; w++) {
      kept += s_kept[w];
      evaluated += s_evaluated[w];
    }
    count[b] = (int64_t) kept;
    if (evaluated > 0) atomicAdd(group_rows, evaluated);
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_GROUPED_KERNELS_CUH */
