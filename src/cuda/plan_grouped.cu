/*
 * plan_grouped.cu: launches the plans made from the units' groups
 * (plan_grouped_kernels.cuh): a query block's box, for batches of many
 * blocks (plan_count), and a query's point, for batches of few
 * (plan_query: prune.c's "per-query plans").
 *
 * A block of 128 sparse queries (a few new points scored against a large
 * fit) has a box that spans the data: the box plan keeps nearly every
 * unit, and refining that list per query reads it whole for every query.
 * A query's own plan costs the groups plus the units of the groups near
 * it: a CUDA block per query, its visits ORed into its group's mask row
 * (kGroupRows queries a row, plan_refine's layout), then each block's
 * rows counted and scanned for plan_fill.
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "kde_cuda_common.h"
#include "model.cuh"
#include "plan.cuh"
#include "plan_grouped_kernels.cuh"
#include "tuning.cuh"

namespace kdegpu {

int plan_grouped_boxes(const plan_groups &groups, const kde_prune_plan *plan,
                       const double *box, int64_t blocks, kde_replica *rep, kde_status *status)
{
  const int64_t words = ceil_div(plan->n_tiles, 32);
  int64_t *count = (int64_t *) rep->plan_count.ptr;
  kde_plan_grouped_kernel<<<(unsigned) blocks, kPlanThreads, 0, rep->stream>>>(
      *plan, groups, box, words, (uint32_t *) rep->plan_mask.ptr, count,
      (double *) rep->plan_skipped.ptr);
  KDE_CUDA_LAUNCHED("grouped plan kernel");
  /* count[blocks] = 0, so that the exclusive sum ends with the total */
  KDE_CUDA_TRY(cudaMemsetAsync(count + blocks, 0, sizeof(int64_t), rep->stream));
  return 0;
cleanup:
  return -1;
}

int plan_query(const plan_groups &groups, const kde_prune_plan *plan, const double *z,
               int64_t ldz, int64_t rows, kde_replica *rep, plan_counts *counts,
               kde_status *status)
{
  const int64_t blocks = ceil_div(rows, kBlockQueries), words = ceil_div(plan->n_tiles, 32);
  const size_t mask_bytes = (size_t) (blocks * kQueryGroups * words) * sizeof(uint32_t);
  int64_t *count;
  counts->blocks = blocks;
  counts->total = counts->last_count = counts->group_rows = 0;
  if (blocks < 1) return 0;
  if (plan_dim_unserved(plan, status)) return -1;
  if (buffer_reserve(&rep->plan_mask, mask_bytes, status) != 0 ||
      plan_reserve_counts(blocks, rep, status) != 0)
    return -1;
  count = (int64_t *) rep->plan_count.ptr;
  /* the queries OR their visits into the rows; the count kernel writes
   * count[b] and adds to the group rows after count[blocks] (0: the scan's
   * total) */
  KDE_CUDA_TRY(cudaMemsetAsync(rep->plan_mask.ptr, 0, mask_bytes, rep->stream));
  KDE_CUDA_TRY(cudaMemsetAsync(count + blocks, 0, 2 * sizeof(int64_t), rep->stream));
  switch (plan_query_warps(rows)) {
  case 32:
    kde_plan_query_grouped_kernel<32><<<(unsigned) rows, 32 * 32, 0, rep->stream>>>(
        *plan, groups, z, ldz, words, (uint32_t *) rep->plan_mask.ptr);
    break;
  case 16:
    kde_plan_query_grouped_kernel<16><<<(unsigned) rows, 16 * 32, 0, rep->stream>>>(
        *plan, groups, z, ldz, words, (uint32_t *) rep->plan_mask.ptr);
    break;
  default:
    kde_plan_query_grouped_kernel<8><<<(unsigned) rows, 8 * 32, 0, rep->stream>>>(
        *plan, groups, z, ldz, words, (uint32_t *) rep->plan_mask.ptr);
  }
  KDE_CUDA_LAUNCHED("per-query plan kernel");
  kde_plan_rows_count_kernel<<<(unsigned) blocks, kPlanThreads, 0, rep->stream>>>(
      (const uint32_t *) rep->plan_mask.ptr, words, rows, count,
      (unsigned long long *) (count + blocks + 1));
  KDE_CUDA_LAUNCHED("per-query plan count kernel");
  return plan_scan_group_counts(blocks, rep, counts, status);
cleanup:
  return -1;
}

} // namespace kdegpu
