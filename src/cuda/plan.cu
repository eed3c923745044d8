/*
 * plan.cu: the pruning plan of a query batch, made on the device.
 *
 * prune.c states the proof and makes the CPU's decision
 * (kde_tiles_to_visit); this file makes the same decision for every query
 * block of a batch at once, with the same helpers (kde_box_distances,
 * kde_log_profile, kde_prune_bucket, kde_prune_first_skipped) and in double
 * precision, so that it skips the same units up to the rounding of sums
 * taken in another order (an adaptive model's unit bounds scaled by
 * kde_prune_scale, as prune.c's):
 *
 *   boxes:  one CUDA block per query block: the box of its rows;
 *   count:  one CUDA block per query block, the units in block-stride: the
 *           lower bound L (a log-sum-exp reduction), the bucket sums, the
 *           first skipped bucket, then each unit's decision as a bit mask
 *           (32 units a word, one warp ballot each) and the block's count;
 *           a batch of few query blocks (a few queries against a large fit)
 *           takes the same steps in chunks of units, one CUDA block each,
 *           so that its plan costs microseconds, not a block's sweep of
 *           every unit (choose_chunks); a density's many blocks take the
 *           units' groups first (plan_grouped.cu), and a batch of
 *           few query blocks may be planned query by query from them
 *           (plan_query);
 *   scan:   CUB's exclusive sum of the counts: where each block's list
 *           starts (visit_offset);
 *   fill:   one CUDA block per query block: the set bits of its mask row in
 *           ascending order (an ordered compaction, a block-wide prefix sum
 *           of the words' bit counts per chunk of words).
 *
 * The mask makes the count and the fill agree by construction (the fill
 * recomputes nothing) and costs 1/32 of the worst-case lists.
 */
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kdegpu/kernels.h"
#include "kde_cuda_common.h"
#include "model.cuh"
#include "plan.cuh"
#include "plan_reduce.cuh"
#include "prune.h"
#include "spatial.h"
#include "tuning.cuh"

namespace kdegpu {

static_assert(KDE_PRUNE_BUCKETS == 64, "each lane sums two buckets");

/* KDEGPU_PLAN_JENSEN=0: the per-query refinement bounds each unit's share
 * of L_q by its farthest corner only (prune.h); for A/B measurements. Read
 * once. */
static int jensen_enabled(void)
{
  static const int enabled = kde_env_switch("KDEGPU_PLAN_JENSEN");
  return enabled;
}

kde_prune_plan device_prune_plan(const kde_cuda_model *model, const kde_replica *rep,
                                 double tolerance, int leave_one_out)
{
  kde_prune_plan p;
  const int64_t n_units = model->n_points / kUnit;
  p.kernel = model->kernel;
  p.dim = model->dim;
  p.n_tiles = n_units;
  p.lo = rep->units;
  p.hi = rep->units + n_units * model->dim;
  p.log_weight = rep->units + 2 * n_units * model->dim;
  p.log_weight_rest = p.log_weight + n_units;
  /* an adaptive model's unit scales follow (model.cu) */
  p.inv_scale2_lo = model->adaptive ? p.log_weight_rest + n_units : NULL;
  p.inv_scale2_hi = model->adaptive ? p.log_weight_rest + 2 * n_units : NULL;
  /* or its units' centroids (model.cu), for the refinement's L_q unless
   * KDEGPU_PLAN_JENSEN=0 (A/B measurements) */
  const int centroids = !model->adaptive && jensen_enabled();
  p.centroid = centroids ? p.log_weight_rest + n_units : NULL;
  p.spread2 = centroids ? p.log_weight_rest + n_units + n_units * model->dim : NULL;
  p.log_lower_factor = model->log_lower_factor;
  p.tolerance = tolerance;
  p.leave_one_out = leave_one_out;
  p.derivative = KDE_PRUNE_DENSITY;
  return p;
}

/* ---- boxes of the query blocks ------------------------------------------ */

__global__ void __launch_bounds__(kBlockQueries)
    kde_plan_box_kernel(const double *z, int64_t ldz, int64_t rows, int dim, double *box)
{
  __shared__ double s_lo[kBlockQueries / 32], s_hi[kBlockQueries / 32];
  const int64_t b = blockIdx.x, row = b * kBlockQueries + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int k = 0; k < dim; k++) {
    /* rows past the batch (the last block may be short) take no part */
    const double v = row < rows ? z[k * ldz + row] : 0.0;
    double lo = row < rows ? v : INFINITY, hi = row < rows ? v : -INFINITY;
    for (int s = 16; s > 0; s >>= 1) {
      lo = fmin(lo, __shfl_xor_sync(0xffffffffu, lo, s));
      hi = fmax(hi, __shfl_xor_sync(0xffffffffu, hi, s));
    }
    if (lane == 0) {
      s_lo[warp] = lo;
      s_hi[warp] = hi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kBlockQueries / 32; w++) {
        lo = fmin(lo, s_lo[w]);
        hi = fmax(hi, s_hi[w]);
      }
      box[b * 2 * dim + k] = lo;
      box[b * 2 * dim + dim + k] = hi;
    }
    __syncthreads(); /* s_lo, s_hi are reused by the next coordinate */
  }
}

int plan_block_boxes(const double *z, int64_t ldz, int64_t rows, int dim, double *box,
                     cudaStream_t stream, kde_status *status)
{
  const int64_t blocks = ceil_div(rows, kBlockQueries);
  if (blocks < 1) return 0;
  kde_plan_box_kernel<<<(unsigned) blocks, kBlockQueries, 0, stream>>>(z, ldz, rows, dim, box);
  KDE_CUDA_LAUNCHED("query block box kernel");
  return 0;
cleanup:
  return -1;
}

/* ---- the decision -------------------------------------------------------- */

/* Unit t's decision for the block's box (kde_tiles_to_visit's last loops). */
__device__ __forceinline__ bool unit_visited(const kde_prune_plan &p, const double *q_lo,
                                             const double *q_hi, int64_t t, int how,
                                             double log_budget, int first_skipped)
{
  if (how == kDecideAll) return true;
  double min2, max2;
  kde_box_distances(q_lo, q_hi, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, &min2, &max2);
  kde_prune_scale(&p, t, &min2, &max2);
  if (how == kDecideSupport) return min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN;
  const double key = kde_prune_log_upper(&p, t, min2, max2) - log_budget;
  return kde_prune_bucket(key + kKeySlack) < first_skipped;
}

/* The parts of the decision, each over the units [t0, t1) of one query
 * block (box q_lo, q_hi) and known to every thread of the CUDA block that
 * calls it. A query block's decision is made by one CUDA block over all the
 * units (kde_plan_count_kernel) or, where a batch has too few query blocks
 * to fill the device, by chunks of units in several CUDA blocks whose
 * partial sums are merged in chunk order (the chunked kernels): the same
 * proof either way, the sums taken in another order. */

/* This range's share of L, the proven lower bound of every query's sum. */
static __device__ kde_lse units_lower(const kde_prune_plan &p, const double *q_lo,
                                      const double *q_hi, int64_t t0, int64_t t1, double *s_max,
                                      double *s_sum)
{
  kde_lse lower = kde_lse_empty();
  for (int64_t t = t0 + threadIdx.x; t < t1; t += kPlanThreads) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, &min2, &max2);
    kde_prune_scale(&p, t, &min2, &max2);
    lower = kde_lse_add(lower, kde_prune_log_lower(&p, t, max2));
  }
  return block_lse(lower, s_max, s_sum);
}

/* This range's bounds relative to the budget, summed per bucket into
 * sum[0 .. KDE_PRUNE_BUCKETS) (shared). Lane l owns buckets l and l + 32
 * and adds the warp's terms in lane order, the warps then in turn: a fixed
 * order (no atomics), so the same data give the same plan on every run. */
static __device__ void units_buckets(const kde_prune_plan &p, const double *q_lo,
                                     const double *q_hi, int64_t t0, int64_t t1,
                                     double log_budget, double (*s_bucket)[KDE_PRUNE_BUCKETS],
                                     double *sum)
{
  double own_lo = 0.0, own_hi = 0.0;
  for (int64_t c = t0; c < t1; c += kPlanThreads) {
    const int64_t t = c + threadIdx.x;
    double key = 0.0;
    if (t < t1) {
      double min2, max2;
      kde_box_distances(q_lo, q_hi, p.lo + t * p.dim, p.hi + t * p.dim, p.dim, &min2, &max2);
      kde_prune_scale(&p, t, &min2, &max2);
      key = kde_prune_log_upper(&p, t, min2, max2) - log_budget;
    }
    bucket_add(key, t < t1, own_lo, own_hi);
  }
  block_bucket_sums(own_lo, own_hi, s_bucket, sum);
}

/* The decisions for the mask words [w0, w1) of block b's row: warp w takes
 * words w0 + w, w0 + w + 8, ...; lane j unit 32 word + j. Returns the
 * block's count of visited units (thread 0's value). */
static __device__ long long units_decide(const kde_prune_plan &p, const double *q_lo,
                                         const double *q_hi, int64_t w0, int64_t w1, int how,
                                         double log_budget, int first_skipped, uint32_t *mask_row,
                                         long long *s_visits)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  long long visits = 0;
  for (int64_t word = w0 + warp; word < w1; word += kPlanWarps) {
    const int64_t t = word * 32 + lane;
    const bool v =
        t < p.n_tiles && unit_visited(p, q_lo, q_hi, t, how, log_budget, first_skipped);
    const uint32_t bits = __ballot_sync(0xffffffffu, v);
    if (lane == 0) mask_row[word] = bits;
    visits += __popc(bits);
  }
  if (lane == 0) s_visits[warp] = visits;
  __syncthreads();
  long long total = 0;
  for (int w = 0; w < kPlanWarps; w++) total += s_visits[w];
  return total;
}

/* Block b's box into shared memory. */
static __device__ void load_box(const double *box, int64_t b, int64_t d, double *s_box)
{
  for (int i = threadIdx.x; i < 2 * d; i += kPlanThreads) s_box[i] = box[b * 2 * d + i];
  __syncthreads();
}

/* The budget from L: log(tolerance) + log L; -Inf where there is no bound
 * (no unit's kernel reaches every query of the block). */
static __device__ double budget_of(const kde_prune_plan &p, kde_lse lower)
{
  return log(p.tolerance) + kde_lse_log(lower);
}

/* log of the bounds a block's decision skipped (-inf: none; compact
 * kernels skip exact zeros only), for the per-query refinement. */
static __device__ double log_skipped(int how, double log_budget, const double *bucket_sum,
                                     int first_skipped)
{
  if (how != kDecideBounds) return -INFINITY;
  return log_budget + log(kde_prune_skipped_sum(bucket_sum, first_skipped));
}

/* One CUDA block per query block: the whole decision. */
__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_count_kernel(const kde_prune_plan p, const double *box, int64_t words,
                          uint32_t *mask, int64_t *count, double *skipped)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ double s_bucket[kBucketSlots][KDE_PRUNE_BUCKETS];
  __shared__ double s_sum_bucket[KDE_PRUNE_BUCKETS];
  __shared__ double s_max[kPlanWarps], s_sum[kPlanWarps];
  __shared__ long long s_visits[kPlanWarps];
  const int64_t b = blockIdx.x, n = p.n_tiles;
  load_box(box, b, p.dim, s_box);
  const double *q_lo = s_box, *q_hi = s_box + p.dim;

  int how = plan_decision(p);
  double log_budget = 0.0;
  int first_skipped = KDE_PRUNE_BUCKETS;
  if (how == kDecideBounds) {
    log_budget = budget_of(p, units_lower(p, q_lo, q_hi, 0, n, s_max, s_sum));
    if (!(log_budget > -INFINITY)) how = kDecideAll;
  }
  if (how == kDecideBounds) { /* the same for every thread: L is */
    units_buckets(p, q_lo, q_hi, 0, n, log_budget, s_bucket, s_sum_bucket);
    first_skipped = kde_prune_first_skipped(s_sum_bucket);
  }
  const long long total = units_decide(p, q_lo, q_hi, 0, words, how, log_budget,
                                       first_skipped, mask + b * words, s_visits);
  if (threadIdx.x == 0) {
    count[b] = total;
    skipped[b] = log_skipped(how, log_budget, s_sum_bucket, first_skipped);
  }
}

/* ---- the decision in chunks (few query blocks) ---------------------------- */

/* Grid (chunks, blocks): chunk c of block b covers the units of mask words
 * [c * chunk_words, (c + 1) * chunk_words). Three launches: L's parts, the
 * buckets' parts (each CUDA block merging L's parts in chunk order), then
 * the decisions (each merging the buckets' parts in chunk order), so every
 * chunk of a query block uses the same L and the same first skipped
 * bucket. */
struct plan_chunks {
  int64_t chunks, chunk_words;
  double *part_lse;    /* blocks x chunks x (max, sum) */
  double *part_bucket; /* blocks x chunks x KDE_PRUNE_BUCKETS */
};

__device__ __forceinline__ int64_t chunk_first_unit(const plan_chunks &c, int64_t chunk)
{
  return chunk * c.chunk_words * 32;
}
__device__ __forceinline__ int64_t chunk_end_unit(const plan_chunks &c, int64_t chunk, int64_t n)
{
  const int64_t end = (chunk + 1) * c.chunk_words * 32;
  return end < n ? end : n;
}

/* L of block b from its chunks' parts, for every lane of the calling
 * warp: lane l merges parts l, l + 32, ... in order, then the lanes merge
 * by xor-butterfly (a fixed order: the same L on every run). */
static __device__ kde_lse merged_lower(const plan_chunks &c, int64_t b)
{
  const double *part = c.part_lse + b * c.chunks * 2;
  kde_lse lower = kde_lse_empty();
  for (int64_t k = threadIdx.x % 32; k < c.chunks; k += 32)
    lower = kde_lse_merge(lower, kde_lse_make(part[2 * k], part[2 * k + 1]));
  return warp_lse(lower);
}

__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_lower_kernel(const kde_prune_plan p, const double *box, const plan_chunks c)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ double s_max[kPlanWarps], s_sum[kPlanWarps];
  const int64_t chunk = blockIdx.x, b = blockIdx.y;
  load_box(box, b, p.dim, s_box);
  const kde_lse lower =
      units_lower(p, s_box, s_box + p.dim, chunk_first_unit(c, chunk),
                  chunk_end_unit(c, chunk, p.n_tiles), s_max, s_sum);
  if (threadIdx.x == 0) {
    c.part_lse[(b * c.chunks + chunk) * 2] = lower.max;
    c.part_lse[(b * c.chunks + chunk) * 2 + 1] = lower.sum;
  }
}

__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_bucket_kernel(const kde_prune_plan p, const double *box, const plan_chunks c)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ double s_bucket[kBucketSlots][KDE_PRUNE_BUCKETS];
  __shared__ double s_sum_bucket[KDE_PRUNE_BUCKETS];
  __shared__ double s_budget;
  const int64_t chunk = blockIdx.x, b = blockIdx.y;
  if (threadIdx.x < 32) {
    const double budget = budget_of(p, merged_lower(c, b));
    if (threadIdx.x == 0) s_budget = budget;
  }
  __syncthreads();
  const double log_budget = s_budget;
  if (!(log_budget > -INFINITY)) return; /* every unit visited: no buckets */
  load_box(box, b, p.dim, s_box);
  units_buckets(p, s_box, s_box + p.dim, chunk_first_unit(c, chunk),
                chunk_end_unit(c, chunk, p.n_tiles), log_budget, s_bucket, s_sum_bucket);
  if (threadIdx.x < KDE_PRUNE_BUCKETS)
    c.part_bucket[(b * c.chunks + chunk) * KDE_PRUNE_BUCKETS + threadIdx.x] =
        s_sum_bucket[threadIdx.x];
}

/* count[b] must be 0 before: the chunks add their visits to it (integers:
 * the order of the atomic adds does not matter). */
__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_decide_kernel(const kde_prune_plan p, const double *box, const plan_chunks c,
                           int64_t words, uint32_t *mask, int64_t *count, double *skipped)
{
  __shared__ double s_box[2 * kPlanMaxDim];
  __shared__ long long s_visits[kPlanWarps];
  __shared__ double s_budget, s_sum_bucket[KDE_PRUNE_BUCKETS];
  const int64_t chunk = blockIdx.x, b = blockIdx.y;
  int how = plan_decision(p);
  double log_budget = 0.0;
  int first_skipped = KDE_PRUNE_BUCKETS;
  if (how == kDecideBounds) {
    if (threadIdx.x < 32) {
      const double budget = budget_of(p, merged_lower(c, b));
      if (threadIdx.x == 0) s_budget = budget;
    }
    __syncthreads();
    log_budget = s_budget;
    if (!(log_budget > -INFINITY)) how = kDecideAll;
  }
  if (how == kDecideBounds) {
    /* thread k sums bucket k over the chunks, in chunk order */
    if (threadIdx.x < KDE_PRUNE_BUCKETS) {
      const double *part = c.part_bucket + b * c.chunks * KDE_PRUNE_BUCKETS + threadIdx.x;
      double sum = part[0];
      for (int64_t ch = 1; ch < c.chunks; ch++) sum += part[ch * KDE_PRUNE_BUCKETS];
      s_sum_bucket[threadIdx.x] = sum;
    }
    __syncthreads();
    first_skipped = kde_prune_first_skipped(s_sum_bucket);
  }
  load_box(box, b, p.dim, s_box);
  const int64_t w0 = chunk * c.chunk_words;
  const int64_t w1 = w0 + c.chunk_words < words ? w0 + c.chunk_words : words;
  const long long visits = units_decide(p, s_box, s_box + p.dim, w0, w1, how, log_budget,
                                        first_skipped, mask + b * words, s_visits);
  if (threadIdx.x == 0 && visits > 0)
    atomicAdd((unsigned long long *) &count[b], (unsigned long long) visits);
  if (threadIdx.x == 0 && chunk == 0)
    skipped[b] = log_skipped(how, log_budget, s_sum_bucket, first_skipped);
}

/* Chunks per query block: enough CUDA blocks to fill a device
 * (kPlanFillBlocks) where a batch has few query blocks, no more than one
 * per kPlanChunkWords words of units (the words then shared out evenly); 1
 * (the one-block decision) otherwise.
 * It depends on the batch and the model only, so every device makes the
 * same plan of a batch. */
static plan_chunks choose_chunks(int64_t blocks, int64_t words)
{
  plan_chunks c;
  memset(&c, 0, sizeof c);
  int64_t chunks = ceil_div(kPlanFillBlocks, blocks);
  const int64_t most = ceil_div(words, kPlanChunkWords);
  if (chunks > most) chunks = most;
  if (chunks < 1) chunks = 1;
  c.chunk_words = ceil_div(words, chunks);
  c.chunks = ceil_div(words, c.chunk_words);
  return c;
}

plan_groups replica_groups(const kde_cuda_model *model, const kde_replica *rep)
{
  const kde_prune_groups *g = &model->device_groups;
  const int64_t box = g->n_groups * model->dim;
  plan_groups out;
  memset(&out, 0, sizeof out);
  if (rep->groups == NULL || g->n_groups < 1) return out;
  out.n_groups = g->n_groups;
  out.group_tiles = g->group_tiles;
  out.lo = rep->groups;
  out.hi = rep->groups + box;
  out.log_weight_sum = rep->groups + 2 * box;
  out.log_rest_sum = rep->groups + 2 * box + g->n_groups;
  return out;
}

/* ---- the lists ------------------------------------------------------------ */

/* Block b's list from the OR of its mask_rows rows (1, or the groups'
 * kQueryGroups); with groups (mask_rows = kQueryGroups), the groups that
 * need each unit beside it. */
__global__ void __launch_bounds__(kPlanThreads)
    kde_plan_fill_kernel(const uint32_t *mask, int64_t words, int mask_rows,
                         const int64_t *offset, int32_t *visit, uint8_t *groups)
{
  typedef cub::BlockScan<int, kPlanThreads> scan;
  __shared__ typename scan::TempStorage temp;
  const int64_t b = blockIdx.x;
  const uint32_t *rows = mask + b * mask_rows * words;
  int64_t at = offset[b];
  for (int64_t c = 0; c < words; c += kPlanThreads) {
    const int64_t word = c + threadIdx.x;
    uint32_t row_bits[kQueryGroups] = {}, bits = 0u;
    if (word < words)
#pragma unroll
      for (int r = 0; r < kQueryGroups; r++)
        if (r < mask_rows) bits |= row_bits[r] = rows[r * words + word];
    /* most chunks of a large fit's rows are empty: no scan for them */
    if (!__syncthreads_or(bits != 0u)) continue;
    int before = 0, chunk = 0;
    scan(temp).ExclusiveSum(__popc(bits), before, chunk);
    int64_t to = at + before;
    while (bits != 0u) { /* ascending: lowest set bit first */
      const int bit = __ffs((int) bits) - 1;
      visit[to] = (int32_t) (word * 32 + bit);
      if (groups != nullptr) groups[to] = (uint8_t) groups_of_bit(row_bits, bit);
      to++;
      bits &= bits - 1u;
    }
    at += chunk;
    __syncthreads(); /* temp is reused by the next chunk */
  }
}

int plan_dim_unserved(const kde_prune_plan *plan, kde_status *status)
{
  if (plan->dim <= kPlanMaxDim) return 0;
  kde_status_set(status, KDE_ERR_ARGUMENT, "internal: the device plan serves d <= %d",
                 kPlanMaxDim);
  return 1;
}

int plan_reserve_counts(int64_t blocks, kde_replica *rep, kde_status *status)
{
  size_t temp_bytes = 0;
  if (/* the counts, a 0 after them (the scan's total) and the group rows */
      buffer_reserve(&rep->plan_count, (size_t) (blocks + 2) * sizeof(int64_t), status) != 0 ||
      buffer_reserve(&rep->visit_offset, (size_t) (blocks + 1) * sizeof(int64_t), status) != 0 ||
      buffer_reserve(&rep->plan_skipped, (size_t) blocks * sizeof(double), status) != 0)
    return -1;
  KDE_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, (int64_t *) rep->plan_count.ptr,
                                             (int64_t *) rep->visit_offset.ptr, blocks + 1,
                                             rep->stream));
  return buffer_reserve(&rep->plan_temp, temp_bytes > 0 ? temp_bytes : 1, status);
cleanup:
  return -1;
}

int plan_count(const kde_cuda_model *model, const kde_prune_plan *plan, const double *box,
               int64_t blocks, kde_replica *rep, plan_counts *counts, kde_status *status)
{
  const int64_t words = ceil_div(plan->n_tiles, 32);
  const plan_groups groups = replica_groups(model, rep);
  int64_t *count;
  plan_chunks chunked;
  counts->blocks = blocks;
  counts->total = counts->last_count = counts->group_rows = 0;
  if (blocks < 1) return 0;
  if (plan_dim_unserved(plan, status)) return -1;
  if (buffer_reserve(&rep->plan_mask, (size_t) (blocks * words) * sizeof(uint32_t),
                     status) != 0 ||
      plan_reserve_counts(blocks, rep, status) != 0)
    return -1;
  count = (int64_t *) rep->plan_count.ptr;
  chunked = choose_chunks(blocks, words);
  if (blocks >= kPlanGroupedMinBlocks && plan_groups_apply(*plan, groups)) {
    /* the groups first, then the units of the groups near each block */
    if (plan_grouped_boxes(groups, plan, box, blocks, rep, status) != 0) return -1;
  } else if (chunked.chunks == 1) {
    kde_plan_count_kernel<<<(unsigned) blocks, kPlanThreads, 0, rep->stream>>>(
        *plan, box, words, (uint32_t *) rep->plan_mask.ptr, count,
        (double *) rep->plan_skipped.ptr);
    KDE_CUDA_LAUNCHED("plan count kernel");
    /* count[blocks] = 0, so that the exclusive sum ends with the total */
    KDE_CUDA_TRY(cudaMemsetAsync(count + blocks, 0, sizeof(int64_t), rep->stream));
  } else {
    const dim3 grid((unsigned) chunked.chunks, (unsigned) blocks);
    if (buffer_reserve(&rep->plan_part,
                       (size_t) (blocks * chunked.chunks * (2 + KDE_PRUNE_BUCKETS)) *
                           sizeof(double),
                       status) != 0)
      return -1;
    chunked.part_lse = (double *) rep->plan_part.ptr;
    chunked.part_bucket = chunked.part_lse + blocks * chunked.chunks * 2;
    KDE_CUDA_TRY(cudaMemsetAsync(count, 0, (size_t) (blocks + 1) * sizeof(int64_t), rep->stream));
    if (plan_decision(*plan) == kDecideBounds) {
      kde_plan_lower_kernel<<<grid, kPlanThreads, 0, rep->stream>>>(*plan, box, chunked);
      KDE_CUDA_LAUNCHED("plan lower-bound kernel");
      kde_plan_bucket_kernel<<<grid, kPlanThreads, 0, rep->stream>>>(*plan, box, chunked);
      KDE_CUDA_LAUNCHED("plan bucket kernel");
    }
    kde_plan_decide_kernel<<<grid, kPlanThreads, 0, rep->stream>>>(
        *plan, box, chunked, words, (uint32_t *) rep->plan_mask.ptr, count,
        (double *) rep->plan_skipped.ptr);
    KDE_CUDA_LAUNCHED("plan decision kernel");
  }
  return plan_scan_counts(blocks, rep, counts, status);
cleanup:
  return -1;
}

int plan_scan_counts(int64_t blocks, kde_replica *rep, plan_counts *counts, kde_status *status)
{
  int64_t tail[2] = {0, 0};
  size_t temp_bytes = rep->plan_temp.bytes;
  int64_t *count = (int64_t *) rep->plan_count.ptr, *offset = (int64_t *) rep->visit_offset.ptr;
  KDE_CUDA_TRY(cub::DeviceScan::ExclusiveSum(rep->plan_temp.ptr, temp_bytes, count, offset,
                                             blocks + 1, rep->stream));
  KDE_CUDA_TRY(cudaMemcpyAsync(tail, offset + blocks - 1, sizeof tail, cudaMemcpyDeviceToHost,
                               rep->stream));
  KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
  counts->blocks = blocks;
  counts->total = tail[1];
  counts->last_count = tail[1] - tail[0];
  return 0;
cleanup:
  return -1;
}

int plan_scan_group_counts(int64_t blocks, kde_replica *rep, plan_counts *counts,
                           kde_status *status)
{
  /* pageable: returns once copied, after the kernels before it */
  KDE_CUDA_TRY(cudaMemcpyAsync(&counts->group_rows, (int64_t *) rep->plan_count.ptr + blocks + 1,
                               sizeof(int64_t), cudaMemcpyDeviceToHost, rep->stream));
  return plan_scan_counts(blocks, rep, counts, status);
cleanup:
  return -1;
}

int plan_fill(const kde_prune_plan *plan, const plan_counts *counts, int mask_rows, int groups,
              kde_replica *rep, kde_status *status)
{
  const int64_t words = ceil_div(plan->n_tiles, 32);
  const size_t entries = (size_t) (counts->total > 0 ? counts->total : 1);
  if (counts->blocks < 1) return 0;
  if (buffer_reserve(&rep->visit, entries * sizeof(int32_t), status) != 0 ||
      (groups && buffer_reserve(&rep->visit_groups, entries, status) != 0))
    return -1;
  kde_plan_fill_kernel<<<(unsigned) counts->blocks, kPlanThreads, 0, rep->stream>>>(
      (const uint32_t *) rep->plan_mask.ptr, words, mask_rows,
      (const int64_t *) rep->visit_offset.ptr, (int32_t *) rep->visit.ptr,
      groups ? (uint8_t *) rep->visit_groups.ptr : nullptr);
  KDE_CUDA_LAUNCHED("plan fill kernel");
  return 0;
cleanup:
  return -1;
}

/* ---- a batch's plan ------------------------------------------------------ */

/* The pairs of a batch's lists: `total` units visited by its blocks of
 * kBlockQueries queries (`last` by the last block, maybe shorter), each unit
 * kUnit points. When the devices split the training set, each evaluates
 * its share (job_units of n_units) of the same lists: counted as that. */
static double planned_pairs(int64_t n_batch, int64_t blocks, int64_t total, int64_t last,
                            int64_t job_units, int64_t n_units)
{
  const int64_t last_rows = n_batch - (blocks - 1) * kBlockQueries;
  const double pairs = ((double) (total - last) * kBlockQueries + (double) last * last_rows) *
                       (double) kUnit;
  return pairs * (double) job_units / (double) n_units;
}

/* Visiting almost every unit: the plain sweep costs less. The lists range
 * over all n_units units, also where the devices split the training set
 * (each visits the entries in its share): against a device's share of
 * units, a plan of two devices was dropped from 45% of the pairs on, of
 * four from 22%. */
static int nearly_all(int64_t total, int64_t blocks, int64_t n_units)
{
  return (double) total >= kPlanDropShare * (double) blocks * (double) n_units;
}

/* KDEGPU_PLAN_REFINE=0: the device plan stops at the query blocks' boxes
 * (no per-query refinement); for A/B measurements. Read once. */
static int refine_enabled(void)
{
  static const int enabled = kde_env_switch("KDEGPU_PLAN_REFINE");
  return enabled;
}

/* KDEGPU_PLAN_PER_QUERY=0: a few query blocks are planned from their
 * boxes and refined (no per-query plans); for A/B measurements. Read once. */
static int per_query_enabled(void)
{
  static const int enabled = kde_env_switch("KDEGPU_PLAN_PER_QUERY");
  return enabled;
}

/* KDEGPU_PLAN_GROUPS=0: the kernels evaluate a block's whole list for all
 * of its queries (no per-group skipping); for A/B measurements. Read once. */
static int groups_enabled(void)
{
  static const int enabled = kde_env_switch("KDEGPU_PLAN_GROUPS");
  return enabled;
}

int plan_batch_device(const kde_cuda_model *model, kde_replica *rep,
                      const kde_prune_plan *host_plan, const double *z, int64_t ldz,
                      int64_t n_batch, int64_t job_units, int query_groups, batch_plan *out,
                      kde_status *status)
{
  kde_prune_plan plan = device_prune_plan(model, rep, host_plan->tolerance,
                                          host_plan->leave_one_out);
  plan_counts counts;
  int refined = 0;
  plan.derivative = host_plan->derivative;
  out->visiting = 0;
  out->pairs = 0;
  out->units_per_block = 0;
  out->groups = 0;
  const int64_t blocks = ceil_div(n_batch, kBlockQueries);
  /* KDEGPU_TRACE: each phase's wall time (the stream synchronised after it;
   * the refinement's includes the box lists' fill before it), for the
   * batches that keep a plan */
  const int trace = kde_trace_file() != NULL;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_count = t0, t_refine = t0;
  int64_t box_total = 0;
  const plan_groups groups = replica_groups(model, rep);
  /* one query's box is the query: refining cannot narrow it; without a
   * lower bound (a discrete column's factor can be 0) nothing is skipped */
  const int per_query = refine_enabled() && n_batch > 1 && plan.log_lower_factor > -INFINITY;
  if (per_query && per_query_enabled() && plan_query_applies(n_batch, groups.group_tiles) &&
      plan_groups_apply(plan, groups)) {
    if (plan_query(groups, &plan, z, ldz, n_batch, rep, &counts, status) != 0) return -1;
    refined = 1;
    t_count = t_refine = std::chrono::steady_clock::now();
  } else {
    if (plan_count(model, &plan, (const double *) rep->plan_box.ptr, blocks, rep, &counts,
                   status) != 0)
      return -1;
    t_count = t_refine = std::chrono::steady_clock::now();
    box_total = counts.total;
  }
  if (counts.blocks < 1) return 0;
  if (!refined && per_query && counts.total > 0 && plan_decision(plan) != kDecideAll &&
      (counts.blocks >= kRefineMinBlocks ||
       !nearly_all(counts.total, counts.blocks, plan.n_tiles))) {
    if (plan_fill(&plan, &counts, 1, 0, rep, status) != 0 ||
        plan_refine(&plan, z, ldz, n_batch, rep, &counts, status) != 0)
      return -1;
    refined = 1;
    t_refine = std::chrono::steady_clock::now();
  }
  out->groups = refined && query_groups && groups_enabled();
  /* nearly every pair: the plain sweep costs less */
  if (out->groups ? (double) counts.group_rows >= kPlanDropShare * (double) n_batch *
                                                      (double) plan.n_tiles
                  : nearly_all(counts.total, counts.blocks, plan.n_tiles))
    return 0;
  if (plan_fill(&plan, &counts, refined ? kQueryGroups : 1, out->groups, rep, status) != 0)
    return -1;
  out->pairs = out->groups ? (double) counts.group_rows * (double) kUnit * (double) job_units /
                                 (double) plan.n_tiles
                           : planned_pairs(n_batch, counts.blocks, counts.total,
                                           counts.last_count, job_units, plan.n_tiles);
  out->units_per_block = (double) counts.total * (double) job_units /
                         ((double) plan.n_tiles * (double) counts.blocks);
  out->visiting = 1;
  if (trace) {
    KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    const auto t_end = std::chrono::steady_clock::now();
    fprintf(kde_trace_file(),
            "plan device=%d blocks=%lld box_units=%lld units=%lld count_ms=%.2f"
            " refine_ms=%.2f fill_ms=%.2f\n",
            rep->device, (long long) blocks, (long long) box_total, (long long) counts.total,
            kde_ms_between(t0, t_count), kde_ms_between(t_count, t_refine),
            kde_ms_between(t_refine, t_end));
  }
  return 0;
cleanup:
  return -1;
}

int plan_batch_host(const kde_prune_plan *plan, const double *queries, int64_t n_query,
                    int threads, int64_t first, int64_t n_batch, int64_t job_units,
                    kde_replica *rep, batch_plan *out, kde_status *status)
{
  const int64_t blocks = ceil_div(n_batch, kBlockQueries);
  int64_t *offsets = NULL;
  int32_t *visit = NULL;
  int ok = 0;
  out->visiting = 0;
  out->pairs = 0;
  out->units_per_block = 0;
  out->groups = 0;
  KDE_HOST_ALLOC(offsets, blocks + 1, "the pruning plan");
  if (kde_plan_query_blocks(plan, queries, n_query, first, n_batch, kBlockQueries, threads,
                            offsets, NULL) != 0) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory planning the evaluation");
    goto cleanup;
  }
  if (blocks < 1 || nearly_all(offsets[blocks], blocks, plan->n_tiles)) {
    ok = 1;
    goto cleanup;
  }
  KDE_HOST_ALLOC(visit, offsets[blocks], "the pruning plan");
  if (kde_plan_query_blocks(plan, queries, n_query, first, n_batch, kBlockQueries, threads,
                            offsets, visit) != 0) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory planning the evaluation");
    goto cleanup;
  }
  if (buffer_reserve(&rep->visit, (size_t) (offsets[blocks] > 0 ? offsets[blocks] : 1) *
                                      sizeof(int32_t), status) != 0 ||
      buffer_reserve(&rep->visit_offset, (size_t) (blocks + 1) * sizeof(int64_t), status) != 0)
    goto cleanup;
  /* pageable sources: the calls return once the data have left them */
  if (offsets[blocks] > 0)
    KDE_CUDA_TRY(cudaMemcpyAsync(rep->visit.ptr, visit, (size_t) offsets[blocks] * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, rep->stream));
  KDE_CUDA_TRY(cudaMemcpyAsync(rep->visit_offset.ptr, offsets,
                               (size_t) (blocks + 1) * sizeof(int64_t),
                               cudaMemcpyHostToDevice, rep->stream));
  out->pairs = planned_pairs(n_batch, blocks, offsets[blocks], offsets[blocks] - offsets[blocks - 1],
                             job_units, plan->n_tiles);
  out->units_per_block = (double) offsets[blocks] * (double) job_units /
                         ((double) plan->n_tiles * (double) blocks);
  out->visiting = 1;
  ok = 1;
cleanup:
  free(offsets);
  free(visit);
  return ok ? 0 : -1;
}

} // namespace kdegpu
