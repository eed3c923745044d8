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
 *   bounds:  1 to 4 warps per query: L_q over its block's list (a
 *            log-sum-exp reduction in a fixed order), what the block's plan
 *            leaves of its budget, its bounds' bucket sums and first skipped
 *            bucket;
 *   decide:  a thread per listed unit and group of 32 queries: kept where
 *            some query of the group needs it (the group's queries in
 *            shared memory, the first that needs it ends the search), as
 *            bits of the group's mask row;
 *   count:   each block's kept units and the query rows that evaluate them;
 *
 * then the counts are scanned and plan_fill writes the narrowed lists.
 * A batch of many query blocks takes one kernel instead, kRefineQueryGroups
 * CUDA blocks per query block (kde_refine_blocks_kernel, below): the same
 * steps, a few threads per query, the list read in chunks through shared
 * memory, then kde_refine_count_kernel counts each block's kept units;
 * its longest lists still take the two kernels (list_lengths).
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

/* The bounds kernel: CUDA blocks of 4 warps, 1, 2 or 4 per query, the
 * fewest that make this many warps in all (an H200 holds 8448). */
constexpr int kRefineThreads = 128;
constexpr int kRefineWarps = kRefineThreads / 32;
constexpr int64_t kRefineFillWarps = 8192;
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


/* The query blocks a launch refines: those whose box list holds from min
 * to max units. plan_refine.cu sends a batch's longest lists (queries in
 * the data's tails, whose boxes are wide) to the kernels that share a list
 * among many threads: in kde_refine_blocks_kernel each took one CUDA block
 * per group of queries for as long as the rest of the batch together. */
struct list_lengths {
  int64_t min, max;
};
constexpr list_lengths kEveryList = {0, INT64_MAX};
__device__ __forceinline__ bool list_taken(const list_lengths &taken, const int64_t *offset,
                                           int64_t b)
{
  const int64_t length = offset[b + 1] - offset[b];
  return length >= taken.min && length <= taken.max;
}

/* Share `chunk` of `chunks` of a list's entries [lo, hi): [*c0, *c1), of
 * equal whole lengths but the last (short or empty). */
__device__ __forceinline__ void list_share(int64_t lo, int64_t hi, int64_t chunks, int64_t chunk,
                                           int64_t *c0, int64_t *c1)
{
  const int64_t share = (hi - lo + chunks - 1) / chunks;
  *c0 = lo + share * chunk < hi ? lo + share * chunk : hi;
  *c1 = *c0 + share < hi ? *c0 + share : hi;
}

/* Query row r of z as a point (a box of no extent). */
__device__ __forceinline__ void load_query(const double *z, int64_t ldz, int64_t row, int64_t dim,
                                           double *q)
{
  for (int64_t k = 0; k < dim; k++) q[k] = z[k * ldz + row];
}

/* The squared distances from point q to unit t's box, scaled as prune.c's
 * (dim: p.dim, or the same as a constant, for loops the compiler unrolls). */
__device__ __forceinline__ void point_distances(const kde_prune_plan &p, const double *q,
                                                int64_t t, double *min2, double *max2,
                                                int64_t dim)
{
  kde_box_distances(q, q, p.lo + t * dim, p.hi + t * dim, dim, min2, max2);
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

/* Grid (query blocks, kBlockQueries W / kRefineWarps): W warps per query
 * row, kRefineWarps / W rows per CUDA block; row r of query block b is
 * taken by warps W (r % (kRefineWarps / W)) .. of CUDA block (b, r /
 * (kRefineWarps / W)), which write its remaining budget (log, less
 * kFloatExpMargin) and first skipped bucket. W = 1 where the rows fill the
 * device; a few query blocks leave few rows, and with a warp per row 1000
 * queries against 2e6 points kept an H200's SMs an eighth occupied (the
 * kernel took twice the time of the evaluation it planned), while 1e5
 * queries' short lists left the lanes of 4 warps per row idle (a third
 * longer than 1 warp: ncu, d = 3, single). */
template <int W>
__global__ void __launch_bounds__(kRefineThreads)
    kde_refine_bounds_kernel(const kde_prune_plan p, const double *z, int64_t ldz, int64_t rows,
                             const int32_t *visit, const int64_t *offset,
                             const double *block_skipped, double *remaining,
                             int32_t *first_skipped, const list_lengths taken)
{
  static_assert(W >= 1 && kRefineWarps % W == 0, "whole rows per CUDA block");
  constexpr int kRows = kRefineWarps / W;
  constexpr int64_t kStride = 32 * W; /* a row's threads */
  /* each lane's bucket sums, bucket-major: lane l of warp w adds to
   * column l of s_part[w] only */
  __shared__ double s_part[kRefineWarps][kRefineBuckets][32];
  __shared__ double s_bucket[kRows][KDE_PRUNE_BUCKETS];
  __shared__ kde_lse s_lower[kRefineWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = warp / W, part = warp % W; /* the row in this CUDA block, its share */
  const int64_t at = (int64_t) part * 32 + lane;
  const int64_t b = blockIdx.x;
  if (!list_taken(taken, offset, b)) return; /* the whole CUDA block */
  const int64_t row = b * kBlockQueries + (int64_t) blockIdx.y * kRows + sub;
  const bool active = row < rows; /* the row's warps alike; all reach the barriers */
  double q[kPlanMaxDim] = {};
  int64_t lo = 0, hi = 0;
  if (active) {
    load_query(z, ldz, row, p.dim, q);
    lo = offset[b];
    hi = offset[b + 1];
  }

  /* L_q: the row's thread j takes entries j, j + kStride, ...,
   * kRefineUnroll at a time (their loads in flight together), each into
   * its own state; then the states, the lanes and the row's warps merge
   * in a fixed order */
  kde_lse lower[kRefineUnroll];
#pragma unroll
  for (int h = 0; h < kRefineUnroll; h++) lower[h] = kde_lse_empty();
  for (int64_t i = lo + at; i < hi; i += kStride * kRefineUnroll) {
    int64_t t[kRefineUnroll];
#pragma unroll
    for (int h = 0; h < kRefineUnroll; h++)
      t[h] = i + kStride * h < hi ? visit[i + kStride * h] : -1;
#pragma unroll
    for (int h = 0; h < kRefineUnroll; h++) {
      if (t[h] < 0) continue;
      double min2, max2;
      point_distances(p, q, t[h], &min2, &max2, p.dim);
      lane_lse_add(lower[h], kde_prune_log_lower_query(&p, t[h], max2, q, p.dim));
    }
  }
  kde_lse total = lower[0];
#pragma unroll
  for (int h = 1; h < kRefineUnroll; h++) total = kde_lse_merge(total, lower[h]);
  total = warp_lse(total);
  if (W > 1) {
    if (lane == 0) s_lower[warp] = total;
    __syncthreads();
    total = s_lower[sub * W];
    for (int w = 1; w < W; w++) total = kde_lse_merge(total, s_lower[sub * W + w]);
  }
  /* the same in each of the row's threads */
  const double rem =
      active ? kde_prune_log_remaining(log(p.tolerance) + kde_lse_log(total) - kFloatExpMargin,
                                       block_skipped[b]) -
                   kFloatExpMargin
             : -INFINITY;
  int fs = KDE_PRUNE_BUCKETS; /* keeps every listed unit */
  const bool bucketing = rem > -INFINITY;
  if (bucketing) {
    double *own = &s_part[warp][0][0];
    for (int k = 0; k < kRefineBuckets; k++) own[k * 32 + lane] = 0.0;
    for (int64_t i = lo + at; i < hi; i += kStride * kRefineUnroll) {
      int64_t t[kRefineUnroll];
      int bucket[kRefineUnroll];
      double value[kRefineUnroll];
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++)
        t[h] = i + kStride * h < hi ? visit[i + kStride * h] : -1;
      /* every load before the shared adds below */
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++) {
        bucket[h] = -1;
        value[h] = 0.0;
        if (t[h] < 0) continue;
        double min2, max2;
        point_distances(p, q, t[h], &min2, &max2, p.dim);
        const double key = kde_prune_log_upper(&p, t[h], min2, max2) - rem;
        bucket[h] = kde_prune_bucket(key);
        if (bucket[h] >= kRefineBuckets) bucket[h] = kRefineBuckets - 1;
        if (bucket[h] >= 0) value[h] = (double) expf((float) key);
      }
#pragma unroll
      for (int h = 0; h < kRefineUnroll; h++)
        if (bucket[h] >= 0) own[bucket[h] * 32 + lane] += value[h];
    }
  }
  if (W > 1) __syncthreads();
  else __syncwarp();
  if (bucketing && part == 0) {
    /* lane k sums bucket k over the row's warps and lanes, each lane
     * starting at its own column (no two lanes in one bank): a fixed order */
    double sum = 0.0;
    for (int w = 0; w < W; w++)
      for (int j = 0; j < 32; j++) sum += s_part[sub * W + w][lane][(j + lane) % 32];
    s_bucket[sub][lane] = sum;
    s_bucket[sub][lane + 32] = 0.0;
    __syncwarp();
    fs = kde_prune_first_skipped(s_bucket[sub]);
    /* the deep buckets together passed the budget: none is skipped */
    if (fs >= kRefineBuckets) fs = KDE_PRUNE_BUCKETS;
  }
  if (active && part == 0 && lane == 0) {
    remaining[row] = rem;
    first_skipped[row] = fs;
  }
}

/* A warp's kept units into a block's mask row: lane l's unit lies in mask
 * word `word` (INT64_MAX: none) with its bit in `bits` (0: not kept); the
 * lanes' units ascend, so the bits of each run of one word are ORed into
 * its first lane, which sets them. The whole warp calls it. */
__device__ __forceinline__ void mask_set_runs(uint32_t *mask_row, int64_t word, uint32_t bits)
{
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t other_bits = __shfl_down_sync(0xffffffffu, bits, o);
    const long long other_word = __shfl_down_sync(0xffffffffu, (long long) word, o);
    if (lane + o < 32 && other_word == word) bits |= other_bits;
  }
  const long long previous = __shfl_up_sync(0xffffffffu, (long long) word, 1);
  if (bits != 0u && (lane == 0 || previous != word)) atomicOr(mask_row + word, bits);
}

/* Grid (query blocks, chunks x kQueryGroups): CUDA block (b, kQueryGroups
 * c + g) decides the c-th share of block b's list, a thread per unit, for
 * group g of the block's queries (rows 32 g ..) into the group's mask row,
 * which must be 0 before (the shares OR their bits: integers, in any
 * order). A group per CUDA block: four times the threads of a block per
 * CUDA block, for the few blocks of a short batch or a batch's long lists. */
__global__ void __launch_bounds__(kPlanThreads)
    kde_refine_decide_kernel(const kde_prune_plan p, const double *z, int64_t ldz, int64_t rows,
                             const int32_t *visit, const int64_t *offset,
                             const double *remaining, const int32_t *first_skipped,
                             int64_t words, uint32_t *mask, const list_lengths taken)
{
  __shared__ double s_q[kGroupRows][kPlanMaxDim];
  __shared__ double s_rem[kGroupRows];
  __shared__ int32_t s_fs[kGroupRows];
  const int64_t b = blockIdx.x;
  const int g = (int) (blockIdx.y % kQueryGroups);
  const int64_t first_row = b * kBlockQueries + (int64_t) kGroupRows * g;
  /* the whole block: a short block's empty group, or a list not taken */
  if (first_row >= rows || !list_taken(taken, offset, b)) return;
  const int n_q = (int) (rows - first_row < kGroupRows ? rows - first_row : kGroupRows);
  const int how = plan_decision(p);
  for (int r = threadIdx.x; r < n_q; r += kPlanThreads) {
    load_query(z, ldz, first_row + r, p.dim, s_q[r]);
    s_rem[r] = how == kDecideBounds ? remaining[first_row + r] : 0.0;
    s_fs[r] = how == kDecideBounds ? first_skipped[first_row + r] : 0;
  }
  __syncthreads();
  const int64_t chunks = gridDim.y / kQueryGroups, chunk = blockIdx.y / kQueryGroups;
  const int64_t lo = offset[b], hi = offset[b + 1];
  int64_t c0, c1;
  list_share(lo, hi, chunks, chunk, &c0, &c1);
  uint32_t *mask_row = mask + (b * kQueryGroups + g) * words;
  for (int64_t base = c0; base < c1; base += kPlanThreads) { /* uniform trips */
    const int64_t i = base + threadIdx.x;
    const int64_t t = i < c1 ? visit[i] : 0;
    const int64_t word = i < c1 ? t / 32 : INT64_MAX; /* past the list: after every real word */
    bool kept = false;
    for (int r = 0; i < c1 && r < n_q && !kept; r++) {
      if (how == kDecideBounds && s_fs[r] >= KDE_PRUNE_BUCKETS) {
        kept = true;
        break;
      }
      double min2, max2;
      point_distances(p, s_q[r], t, &min2, &max2, p.dim);
      kept = how == kDecideSupport
                 ? min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN
                 : kde_prune_bucket(kde_prune_log_upper(&p, t, min2, max2) - s_rem[r] +
                                    kKeySlack) < s_fs[r];
    }
    mask_set_runs(mask_row, word, kept ? 1u << (t % 32) : 0u);
  }
}

/* ---- many query blocks: a few CUDA blocks each ------------------------ */

/* Units of a block's list staged in shared memory at a time: 128 where
 * their boxes and centroids fit (d <= 3), half as many otherwise. */
template <int D> constexpr int refine_chunk() { return D >= 1 && D <= 3 ? 128 : 64; }
static_assert(refine_chunk<0>() % 32 == 0 && refine_chunk<1>() % 32 == 0,
              "whole mask words per chunk");

/* A chunk of a block's list in shared memory, and a plan whose unit
 * arrays point at it: p's bounds (prune.h) of staged unit u are those of
 * unit t[u], computed by the same code. D: the dimension, or 0 (up to
 * kPlanMaxDim). */
template <int D> struct staged_units {
  static constexpr int kChunk = refine_chunk<D>(), kDims = D > 0 ? D : kPlanMaxDim;
  double lo[kChunk * kDims], hi[kChunk * kDims];
  double log_weight[kChunk], log_weight_rest[kChunk];
  double inv_scale2_lo[kChunk], inv_scale2_hi[kChunk];
  double centroid[kChunk * kDims], spread2[kChunk];
  int32_t t[kChunk];
};

template <int D>
__device__ __forceinline__ kde_prune_plan staged_plan(const kde_prune_plan &p, staged_units<D> &s)
{
  kde_prune_plan sp = p;
  sp.lo = s.lo;
  sp.hi = s.hi;
  sp.log_weight = s.log_weight;
  sp.log_weight_rest = p.log_weight_rest != nullptr ? s.log_weight_rest : nullptr;
  sp.inv_scale2_lo = p.inv_scale2_lo != nullptr ? s.inv_scale2_lo : nullptr;
  sp.inv_scale2_hi = p.inv_scale2_hi != nullptr ? s.inv_scale2_hi : nullptr;
  sp.centroid = p.centroid != nullptr ? s.centroid : nullptr;
  sp.spread2 = p.centroid != nullptr ? s.spread2 : nullptr;
  sp.n_tiles = staged_units<D>::kChunk;
  return sp;
}

/* Stages list entries [from, from + n), n <= the chunk (the block's first
 * n threads, a unit each); the caller syncs. */
template <int D>
__device__ __forceinline__ void stage_units(const kde_prune_plan &p, const int32_t *visit,
                                            int64_t from, int n, int64_t dim,
                                            staged_units<D> &s)
{
  const int u = threadIdx.x;
  if (u >= n) return;
  const int64_t t = visit[from + u];
  s.t[u] = (int32_t) t;
  for (int64_t k = 0; k < dim; k++) {
    s.lo[u * dim + k] = p.lo[t * dim + k];
    s.hi[u * dim + k] = p.hi[t * dim + k];
  }
  s.log_weight[u] = p.log_weight[t];
  if (p.log_weight_rest != nullptr) s.log_weight_rest[u] = p.log_weight_rest[t];
  if (p.inv_scale2_lo != nullptr) {
    s.inv_scale2_lo[u] = p.inv_scale2_lo[t];
    s.inv_scale2_hi[u] = p.inv_scale2_hi[t];
  }
  if (p.centroid != nullptr) {
    for (int64_t k = 0; k < dim; k++) s.centroid[u * dim + k] = p.centroid[t * dim + k];
    s.spread2[u] = p.spread2[t];
  }
}

/* Point q's squared distances to staged unit u's box, scaled as prune.c's,
 * one at a time (each pass needs one of them): kde_box_distances'
 * arithmetic for a box of no extent. */
__device__ __forceinline__ double staged_min2(const kde_prune_plan &sp, const double *q, int u,
                                              int64_t dim)
{
  const double *lo = sp.lo + u * dim, *hi = sp.hi + u * dim;
  double near = 0.0;
  for (int64_t k = 0; k < dim; k++) {
    const double below = lo[k] - q[k], above = q[k] - hi[k];
    const double gap = below > above ? below : above;
    if (gap > 0) near += gap * gap;
  }
  return sp.inv_scale2_lo != nullptr ? near * sp.inv_scale2_lo[u] : near;
}

__device__ __forceinline__ double staged_max2(const kde_prune_plan &sp, const double *q, int u,
                                              int64_t dim)
{
  const double *lo = sp.lo + u * dim, *hi = sp.hi + u * dim;
  double far = 0.0;
  for (int64_t k = 0; k < dim; k++) {
    const double span1 = hi[k] - q[k], span2 = q[k] - lo[k];
    const double span = span1 > span2 ? span1 : span2;
    far += span * span;
  }
  return sp.inv_scale2_hi != nullptr ? far * sp.inv_scale2_hi[u] : far;
}

/* Staged unit u's upper bound (log) for query q (the farthest distance
 * only where a derivative's factor reads it). */
__device__ __forceinline__ double staged_upper(const kde_prune_plan &sp, const double *q, int u,
                                               int64_t dim)
{
  const double min2 = staged_min2(sp, q, u, dim);
  const double max2 = sp.derivative != KDE_PRUNE_DENSITY ? staged_max2(sp, q, u, dim) : 0.0;
  return kde_prune_log_upper(&sp, u, min2, max2);
}

/* Threads per query in the one kernel: a long list (the queries at the
 * data's centre keep thousands of units) is one query's chain of
 * dependent double-precision bounds, and the block that holds it ends the
 * kernel while the SMs that finished the short lists idle: the threads of
 * a query share its units, lane j of a query's kRefineSplit taking units
 * j, j + kRefineSplit, ... of each chunk. */
constexpr int kRefineSplit = 4;
/* A query block's rows are refined by this many CUDA blocks, a group of
 * rows each: the blocks at the data's centre have lists of thousands of
 * units, and one CUDA block for all 128 of their rows ran so long that
 * the SMs were busy a quarter of the kernel's time (ncu, n = m = 1e7, d =
 * 3, H200). Each group stages the list itself: 23 KB of shared memory per
 * 128 threads at d = 3, 8 blocks per SM on an H100 or H200 as before, but
 * half the threads of before on GPUs with 100 KB per SM (sm_86, sm_89). */
constexpr int kRefineQueryGroups = kQueryGroups;
constexpr int kRefineGroupRows = kGroupRows;
constexpr int kRefineBlockThreads = kRefineGroupRows * kRefineSplit;
/* CUDA blocks per SM its launch bounds ask for: 64 registers a thread,
 * and 8 blocks' staged lists fit an H100's or H200's shared memory. */
constexpr int kRefineBlocksPerSM = 8;
static_assert(32 % kRefineSplit == 0, "a query's threads within one warp");
static_assert(kBlockQueries % kRefineQueryGroups == 0, "whole groups of rows");

/*
 * The refinement of a batch of many query blocks (at least plan_refine.cu's
 * kRefineBlocksMin, so that they fill the device), in one kernel: CUDA
 * block (b, g) takes rows kRefineGroupRows g .. of query block b, threads
 * kRefineSplit r .. kRefineSplit r + kRefineSplit - 1 its row r of them. The block's list is
 * read in chunks of refine_chunk() units into shared memory (every query
 * then reads the same unit: broadcasts) three times: each query's L_q,
 * then its bounds' bucket sums (a column of shared memory per query, its
 * lanes adding in the units' order) and first skipped bucket, then the
 * decisions: a unit is kept where some query needs it (a warp's needs ORed
 * into a word, the words into the chunk's bits, the groups' bits into
 * block b's mask row, 0 before). kde_refine_count_kernel then counts the
 * row. The same arithmetic as the bounds and decide kernels, per query in
 * a fixed order, and the kept units an OR: the same plan on every run and
 * device. Where the two kernels' warps each read the block's list from L2
 * and a unit that no query needs holds its warp through all 128 queries,
 * here the list is read once per group and no thread waits on another's
 * search.
 */
template <int D>
__global__ void __launch_bounds__(kRefineBlockThreads, kRefineBlocksPerSM)
    kde_refine_blocks_kernel(const kde_prune_plan p, const double *z, int64_t ldz, int64_t rows,
                             const int32_t *visit, const int64_t *offset,
                             const double *block_skipped, int64_t words, uint32_t *mask,
                             const list_lengths taken)
{
  __shared__ staged_units<D> s_units;
  constexpr int kChunk = staged_units<D>::kChunk;
  constexpr int S = kRefineSplit;
  /* each query's bucket sums: query r adds to column r only */
  __shared__ double s_part[kRefineBuckets][kRefineGroupRows];
  __shared__ uint32_t s_kept[kChunk / 32];
  __shared__ int s_keep_all;
  static_assert(kChunk <= kRefineBlockThreads, "a unit per staging thread");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int r = tid / S, j = tid % S;
  const int64_t b = blockIdx.x, row = b * kBlockQueries + blockIdx.y * kRefineGroupRows + r;
  const bool active = row < rows;
  if (!list_taken(taken, offset, b)) return; /* the whole CUDA block */
  const int how = plan_decision(p);
  const kde_prune_plan sp = staged_plan(p, s_units);
  const int64_t lo = offset[b], hi = offset[b + 1];
  const int64_t dim = D > 0 ? D : p.dim;
  double q[D > 0 ? D : kPlanMaxDim];
  if (active) load_query(z, ldz, row, dim, q);

  double rem = 0.0;
  int fs = 0;
  if (how == kDecideBounds) {
    /* L_q: each lane's units in two states (two chains of adds), merged,
     * then the query's lanes merged */
    kde_lse even = kde_lse_empty(), odd = kde_lse_empty();
    const auto lower_add = [&](kde_lse &s, int u) {
      lane_lse_add(s, kde_prune_log_lower_query(&sp, u, staged_max2(sp, q, u, dim), q, dim));
    };
    for (int64_t c = lo; c < hi; c += kChunk) {
      const int n = (int) (hi - c < kChunk ? hi - c : kChunk);
      stage_units(p, visit, c, n, dim, s_units);
      __syncthreads();
      if (active) {
        int u = j;
        for (; u + S < n; u += 2 * S) {
          lower_add(even, u);
          lower_add(odd, u + S);
        }
        if (u < n) lower_add(even, u);
      }
      __syncthreads();
    }
    /* merged over the query's lanes */
    const kde_lse lower = warp_lse<kRefineSplit>(kde_lse_merge(even, odd));
    rem = kde_prune_log_remaining(log(p.tolerance) + kde_lse_log(lower) - kFloatExpMargin,
                                  block_skipped[b]) -
          kFloatExpMargin;
    /* the bounds' bucket sums, then the first skipped bucket */
    fs = KDE_PRUNE_BUCKETS;
    const bool sums = active && rem > -INFINITY;
    if (j == 0)
      for (int k = 0; k < kRefineBuckets; k++) s_part[k][r] = 0.0;
    for (int64_t c = lo; c < hi; c += kChunk) {
      const int n = (int) (hi - c < kChunk ? hi - c : kChunk);
      stage_units(p, visit, c, n, dim, s_units);
      __syncthreads();
      for (int g = 0; g < n; g += S) { /* block-uniform trips: __syncwarp below */
        const int u = g + j;
        int bucket = -1;
        double value = 0.0;
        if (sums && u < n) {
          const double key = staged_upper(sp, q, u, dim) - rem;
          bucket = kde_prune_bucket(key);
          if (bucket >= kRefineBuckets) bucket = kRefineBuckets - 1;
          if (bucket >= 0) value = (double) expf((float) key);
        }
        /* the query's lanes in turn: its column adds the units in order */
        for (int turn = 0; turn < S; turn++) {
          if (turn == j && bucket >= 0) s_part[bucket][r] += value;
          __syncwarp();
        }
      }
      __syncthreads();
    }
    if (sums) {
      double bucket_sum[KDE_PRUNE_BUCKETS];
      for (int k = 0; k < KDE_PRUNE_BUCKETS; k++)
        bucket_sum[k] = k < kRefineBuckets ? s_part[k][r] : 0.0;
      fs = kde_prune_first_skipped(bucket_sum);
      /* the deep buckets together passed the budget: none is skipped */
      if (fs >= kRefineBuckets) fs = KDE_PRUNE_BUCKETS;
    }
  }
  /* a query that skips nothing keeps the whole list */
  if (tid == 0) s_keep_all = 0;
  __syncthreads();
  if (how == kDecideBounds && active && fs >= KDE_PRUNE_BUCKETS) s_keep_all = 1;
  __syncthreads();
  const bool keep_all = s_keep_all != 0;

  for (int64_t c = lo; c < hi; c += kChunk) {
    const int n = (int) (hi - c < kChunk ? hi - c : kChunk);
    stage_units(p, visit, c, n, dim, s_units);
    if (tid < kChunk / 32) s_kept[tid] = 0u;
    __syncthreads();
    if (!keep_all)
      for (int w0 = 0; w0 < n; w0 += 32) {
        /* this query's needs among units w0 .. w0 + 31, a bit each (this
         * lane's share of them) */
        uint32_t need = 0u;
        if (active)
          for (int u = w0 + j; u < n && u < w0 + 32; u += S) {
            const bool needed =
                how == kDecideSupport
                    ? staged_min2(sp, q, u, dim) < 1.0 + KDE_PRUNE_SUPPORT_MARGIN
                    : kde_prune_bucket(staged_upper(sp, q, u, dim) - rem + kKeySlack) < fs;
            if (needed) need |= 1u << (u - w0);
          }
        for (int o = 16; o > 0; o >>= 1) need |= __shfl_xor_sync(0xffffffffu, need, o);
        if (lane == 0 && need != 0u) atomicOr(&s_kept[w0 / 32], need);
      }
    __syncthreads();
    if (warp < kChunk / 32) { /* a lane per staged unit */
      const bool kept = tid < n && (keep_all || (s_kept[warp] >> lane & 1u) != 0u);
      const int32_t t = tid < n ? s_units.t[tid] : 0;
      mask_set_runs(mask + (b * kQueryGroups + blockIdx.y) * words, tid < n ? t / 32 : INT64_MAX,
                    kept ? 1u << (t % 32) : 0u);
    }
    __syncthreads(); /* before the next chunk is staged */
  }
}

/* count[b]: the units of query block b's list that some group's mask row
 * keeps (the groups' rows are ORed, so none of the deciding kernels can
 * count it), and, added into *group_rows, the query rows that the small-d
 * kernel evaluates them for (those of the groups that need them). A warp
 * per share of a list: warp w counts the (w % chunks)-th of `chunks`
 * shares of block w / chunks's list and adds to count[b], which must be 0
 * before (integers: the same sums in any order). rows: the batch's. */
constexpr int kRefineCountThreads = 256;
__global__ void __launch_bounds__(kRefineCountThreads)
    kde_refine_count_kernel(const int32_t *visit, const int64_t *offset, int64_t blocks,
                            int64_t chunks, int64_t rows, int64_t words, const uint32_t *mask,
                            int64_t *count, unsigned long long *group_rows)
{
  const int lane = threadIdx.x % 32;
  const int64_t w = (int64_t) blockIdx.x * (kRefineCountThreads / 32) + threadIdx.x / 32;
  if (w >= blocks * chunks) return; /* the whole warp */
  const int64_t b = w / chunks, chunk = w % chunks;
  const uint32_t *row = mask + b * kQueryGroups * words;
  const int64_t block_rows = rows - b * kBlockQueries;
  const int64_t lo = offset[b], hi = offset[b + 1];
  int64_t c0, c1;
  list_share(lo, hi, chunks, chunk, &c0, &c1);
  unsigned long long kept = 0, evaluated = 0;
  for (int64_t i = c0 + lane; i < c1; i += 32) {
    const int32_t t = visit[i];
    const unsigned need = unit_groups(row, words, t);
    kept += need != 0u;
    for (int g = 0; g < kQueryGroups; g++)
      if (need >> g & 1u) evaluated += (unsigned long long) group_rows_in(block_rows, g);
  }
  for (int o = 16; o > 0; o >>= 1) {
    kept += __shfl_xor_sync(0xffffffffu, kept, o);
    evaluated += __shfl_xor_sync(0xffffffffu, evaluated, o);
  }
  if (lane == 0 && kept > 0) atomicAdd((unsigned long long *) (count + b), kept);
  if (lane == 0 && evaluated > 0) atomicAdd(group_rows, evaluated);
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_REFINE_KERNELS_CUH */
