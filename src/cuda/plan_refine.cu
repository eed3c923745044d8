/*
 * plan_refine.cu: launches the per-query refinement of a batch's plan
 * (plan_refine_kernels.cuh says what it does; prune.c why it holds).
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "kde_cuda_common.h"
#include "model.cuh"
#include "plan.cuh"
#include "plan_refine_kernels.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* kde_refine_blocks_kernel with the dimension a constant where it is small */
static auto refine_blocks_kernel_for(int64_t dim) -> decltype(&kde_refine_blocks_kernel<0>)
{
  switch (dim) {
  case 1: return kde_refine_blocks_kernel<1>;
  case 2: return kde_refine_blocks_kernel<2>;
  case 3: return kde_refine_blocks_kernel<3>;
  case 4: return kde_refine_blocks_kernel<4>;
  default: return kde_refine_blocks_kernel<0>;
  }
}

/* Shares of each query block's list: about `fill` in all where few query
 * blocks must fill the device, none shorter than `least` units (total: the
 * units of all the lists). */
static int64_t list_chunks(int64_t blocks, int64_t total, int64_t fill, int64_t least)
{
  int64_t chunks = ceil_div(fill, blocks);
  const int64_t most = ceil_div(ceil_div(total, blocks), least);
  if (chunks > most) chunks = most;
  return chunks < 1 ? 1 : chunks;
}

/* A list of the many-blocks path that holds more than 1/kRefineLongShare
 * of the batch's units (and more than kRefineLongMin) is long: it goes to
 * the kernels that share a list among many threads, its decisions among
 * kRefineLongChunks CUDA blocks per group. In kde_refine_blocks_kernel such
 * a list kept one CUDA block per group busy after the rest of the batch
 * had finished (n = 5e8, 1e7 queries, d = 3, one H200: 7 of 53 batches'
 * refinements took 230-490 ms against 30-100 ms). */
constexpr int64_t kRefineLongShare = 256;
/* Query blocks from which a batch takes kde_refine_blocks_kernel: its
 * kRefineQueryGroups CUDA blocks each then fill an H100 or H200 about once
 * (kRefineBlocksPerSM per SM). From 1024 blocks down to this, at n = 1e8,
 * d = 3, single (H200): 2e6 queries' refinement 840 -> 380 ms, 1e5
 * queries' 224 -> 129 ms (the evaluation 2.25 -> 1.79 s and 354 -> 259
 * ms); the same plans. Fewer (79 blocks, 1e4 queries) took 7% longer. */
constexpr int64_t kRefineBlocksMin = 256;
constexpr int64_t kRefineLongMin = 8192;
constexpr int64_t kRefineLongChunks = 32;

/* count[b] and the group rows in count[blocks + 1] from the groups' mask
 * rows (count[] 0 before), scanned, and read back. A warp per list, or per
 * share of one where few blocks leave the device idle. */
static int count_refined(int64_t rows, int64_t words, kde_replica *rep, plan_counts *counts,
                         kde_status *status)
{
  constexpr int64_t kWarps = kRefineCountThreads / 32;
  const int64_t blocks = counts->blocks;
  int64_t *count = (int64_t *) rep->plan_count.ptr;
  const int64_t chunks = list_chunks(blocks, counts->total, kPlanFillBlocks * kWarps, 32);
  kde_refine_count_kernel<<<(unsigned) ceil_div(blocks * chunks, kWarps), kRefineCountThreads,
                            0, rep->stream>>>(
      (const int32_t *) rep->visit.ptr, (const int64_t *) rep->visit_offset.ptr, blocks, chunks,
      rows, words, (const uint32_t *) rep->plan_mask.ptr, count,
      (unsigned long long *) (count + blocks + 1));
  KDE_CUDA_LAUNCHED("plan refinement count kernel");
  return plan_scan_group_counts(blocks, rep, counts, status);
cleanup:
  return -1;
}

/* The taken lists refined by the two kernels that share a list among many
 * threads: w warps per query row for its bounds, then `chunks` shares of
 * the list per group of queries for the decisions. */
static int refine_shared(const kde_prune_plan *plan, const double *z, int64_t ldz, int64_t rows,
                         int64_t blocks, int w, int64_t chunks, list_lengths taken, int64_t words,
                         double *remaining, int32_t *first_skipped, kde_replica *rep,
                         kde_status *status)
{
  if (plan_decision(*plan) == kDecideBounds) {
    const auto kernel = w == 1   ? kde_refine_bounds_kernel<1>
                        : w == 2 ? kde_refine_bounds_kernel<2>
                                 : kde_refine_bounds_kernel<4>;
    kernel<<<dim3((unsigned) blocks, (unsigned) (kBlockQueries * w / kRefineWarps)),
             kRefineThreads, 0, rep->stream>>>(
        *plan, z, ldz, rows, (const int32_t *) rep->visit.ptr,
        (const int64_t *) rep->visit_offset.ptr, (const double *) rep->plan_skipped.ptr,
        remaining, first_skipped, taken);
    KDE_CUDA_LAUNCHED("plan refinement bounds kernel");
  }
  kde_refine_decide_kernel<<<dim3((unsigned) blocks, (unsigned) (chunks * kQueryGroups)),
                             kPlanThreads, 0, rep->stream>>>(
      *plan, z, ldz, rows, (const int32_t *) rep->visit.ptr,
      (const int64_t *) rep->visit_offset.ptr, remaining, first_skipped, words,
      (uint32_t *) rep->plan_mask.ptr, taken);
  KDE_CUDA_LAUNCHED("plan refinement decision kernel");
  return 0;
cleanup:
  return -1;
}

int plan_refine(const kde_prune_plan *plan, const double *z, int64_t ldz, int64_t rows,
                kde_replica *rep, plan_counts *counts, kde_status *status)
{
  const int64_t blocks = counts->blocks, words = ceil_div(plan->n_tiles, 32);
  const int64_t ldq = blocks * kBlockQueries;
  const size_t mask_bytes = (size_t) (blocks * kQueryGroups * words) * sizeof(uint32_t);
  double *remaining = NULL;
  int32_t *first_skipped = NULL;
  if (blocks < 1) return 0;
  /* the kernels OR bits into the groups' mask rows; the count kernel
   * writes the counts and adds to the group rows after them */
  if (buffer_reserve(&rep->plan_mask, mask_bytes, status) != 0) return -1;
  KDE_CUDA_TRY(cudaMemsetAsync(rep->plan_mask.ptr, 0, mask_bytes, rep->stream));
  KDE_CUDA_TRY(cudaMemsetAsync(rep->plan_count.ptr, 0, (size_t) (blocks + 2) * sizeof(int64_t),
                               rep->stream));
  if (buffer_reserve(&rep->plan_query, (size_t) ldq * (sizeof(double) + sizeof(int32_t)),
                     status) != 0)
    return -1;
  remaining = (double *) rep->plan_query.ptr;
  first_skipped = (int32_t *) (remaining + ldq);
  if (blocks >= kRefineBlocksMin) { /* enough query blocks to fill the device */
    int64_t longest = counts->total / kRefineLongShare;
    if (longest < kRefineLongMin) longest = kRefineLongMin;
    const auto kernel = refine_blocks_kernel_for(plan->dim);
    kernel<<<dim3((unsigned) blocks, kRefineQueryGroups), kRefineBlockThreads, 0, rep->stream>>>(
        *plan, z, ldz, rows, (const int32_t *) rep->visit.ptr,
        (const int64_t *) rep->visit_offset.ptr, (const double *) rep->plan_skipped.ptr, words,
        (uint32_t *) rep->plan_mask.ptr, list_lengths{0, longest});
    KDE_CUDA_LAUNCHED("plan refinement kernel");
    /* the long lists, if any: 4 warps per query, chunks of each list */
    if (refine_shared(plan, z, ldz, rows, blocks, 4, kRefineLongChunks,
                      list_lengths{longest + 1, INT64_MAX}, words, remaining, first_skipped,
                      rep, status) != 0)
      return -1;
    return count_refined(rows, words, rep, counts, status);
  }
  {
    /* warps per query row: the fewest that make about kRefineFillWarps;
     * the lists shared among about kPlanFillBlocks CUDA blocks per group
     * of queries */
    const int w = rows >= kRefineFillWarps ? 1 : 2 * rows >= kRefineFillWarps ? 2 : 4;
    const int64_t chunks = list_chunks(blocks, counts->total, kPlanFillBlocks, kPlanThreads);
    if (refine_shared(plan, z, ldz, rows, blocks, w, chunks, kEveryList, words, remaining,
                      first_skipped, rep, status) != 0)
      return -1;
  }
  return count_refined(rows, words, rep, counts, status);
cleanup:
  return -1;
}

} // namespace kdegpu
