/*
 * The proof that lets an evaluation skip training tiles.
 *
 * Every kernel's profile k(s^2) decreases in s^2. For a block of queries
 * in the box Q and a tile of training points in the box T, every pair is
 * at squared distance between min2 = dist^2(Q, T) and max2 (the farthest
 * corners), so the tile adds between W_T k(max2) and W_T k(min2) to the
 * kernel sum of every query in the block (W_T: the tile's weight).
 *
 * - Compact kernels (k = 0 for s^2 >= 1): a tile with min2 >= 1 adds
 *   exactly 0 to every query of the block and is skipped; nothing else is.
 * - Gaussian and exponential (k > 0 everywhere): every query's sum is at
 *   least L = sum_T W_T k(max2_T) (with leave-one-out, W_T less its largest
 *   weight). A set S of tiles whose upper bounds add up to at most
 *   tolerance * L is skipped: what it would have added is at most
 *   tolerance times each query's full sum, so every result is within
 *   relative `tolerance` of the exact one (and never above it). The set is
 *   the tiles of the smallest bounds, found with buckets of e-fold width
 *   rather than a sort (linear in the number of tiles).
 * - Derivative sums (derivatives.h: k1sum, first and, for Hessians, second)
 *   bound each skipped pair's terms by F times its kernel term, F from the
 *   tile's own distances (kde_prune_log_factor):
 *     Gaussian     |k1| / k = 1/2, |k1 v| / k = |v| / 2 <= sqrt(max2) / 2,
 *                  |k2 v v'| / k <= |v|^2 / 4 <= max2 / 4;
 *     exponential  |k1| / k = 1 / (2 s), |k1 v| / k = 1/2,
 *                  |k2 v v'| / k <= (1 + 1 / s) / 4, s >= sqrt(min2)
 *   (F = max(1, ...)). The tiles' bounds W_T k(min2) F then add up to at
 *   most tolerance * L <= tolerance * s0, so every sum is within that of
 *   the full one.
 * The bounds are kde_prune_log_upper and kde_prune_log_lower (prune.h),
 * which the device plan (src/cuda/plan.cu) shares.
 * Sums are kept as logarithms, so nothing underflows however far apart
 * the points are. An adaptive fit's points carry kernels of their own
 * radius lambda_j (their lambda_j^-d is in the weights): kde_prune_scale
 * (prune.h) takes each tile's bounds at its widest and narrowest kernel.
 */
#include <math.h>
#include <stdlib.h>

#include "prune.h"
#include "spatial.h"
#include "threads.h"
#include <kdegpu/kernels.h>

int64_t kde_tiles_to_visit(const kde_prune_plan *plan, const double *q_lo,
                           const double *q_hi, double *scratch, int64_t *visit)
{
  const int64_t n_tiles = plan->n_tiles, d = plan->dim;
  const int kernel = plan->kernel;
  double *key = scratch;             /* log bound relative to the budget */
  double *log_lower = scratch + n_tiles;
  int64_t n_visit = 0;

  if (kde_kernel_is_compact(kernel)) {
    for (int64_t t = 0; t < n_tiles; t++) {
      double min2, max2;
      kde_box_distances(q_lo, q_hi, plan->lo + t * d, plan->hi + t * d, d, &min2, &max2);
      kde_prune_scale(plan, t, &min2, &max2);
      if (min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN) visit[n_visit++] = t;
    }
    return n_visit;
  }
  if (!(plan->tolerance > 0)) {
    for (int64_t t = 0; t < n_tiles; t++) visit[t] = t;
    return n_tiles;
  }

  /* L: the proven lower bound of every query's sum */
  kde_lse lower = kde_lse_empty();
  for (int64_t t = 0; t < n_tiles; t++) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, plan->lo + t * d, plan->hi + t * d, d, &min2, &max2);
    kde_prune_scale(plan, t, &min2, &max2);
    key[t] = kde_prune_log_upper(plan, t, min2, max2);
    log_lower[t] = kde_prune_log_lower(plan, t, max2);
    lower = kde_lse_add(lower, log_lower[t]);
  }
  const double log_budget = log(plan->tolerance) + kde_lse_log(lower);
  if (!(log_budget > -INFINITY)) { /* no lower bound: visit everything */
    for (int64_t t = 0; t < n_tiles; t++) visit[t] = t;
    return n_tiles;
  }

  /* bounds relative to the budget, summed per bucket (a bound alone above
   * the budget is in none: visited) */
  double bucket_sum[KDE_PRUNE_BUCKETS] = {0};
  for (int64_t t = 0; t < n_tiles; t++) {
    key[t] -= log_budget;
    const int b = kde_prune_bucket(key[t]);
    if (b >= 0) bucket_sum[b] += exp(key[t]);
  }
  /* skip the buckets of the smallest bounds while they fit the budget */
  const int first_skipped = kde_prune_first_skipped(bucket_sum);
  for (int64_t t = 0; t < n_tiles; t++)
    if (kde_prune_bucket(key[t]) < first_skipped) visit[n_visit++] = t;
  return n_visit;
}

int kde_plan_query_blocks(const kde_prune_plan *plan, const double *q,
                          int64_t n_query, int64_t first, int64_t rows,
                          int64_t block, int threads, int64_t *offsets,
                          int32_t *visit)
{
  const int64_t n_blocks = (rows + block - 1) / block, d = plan->dim;
  const int64_t n_tiles = plan->n_tiles;
  const int n_threads = kde_thread_count(threads);
  int failed = 0;
#pragma omp parallel num_threads(n_threads) reduction(| : failed)
  {
    /* per thread: the block's box, the decision's scratch, its list */
    double *box = malloc((size_t) (2 * d + 2 * n_tiles) * sizeof(double));
    int64_t *tiles = malloc((size_t) (n_tiles > 0 ? n_tiles : 1) * sizeof(int64_t));
    /* every thread meets the loop (a worksharing construct), allocated or not */
#pragma omp for schedule(dynamic, 16)
    for (int64_t b = 0; b < n_blocks; b++) {
      if (box == NULL || tiles == NULL) {
        failed = 1;
        continue;
      }
      const int64_t begin = first + b * block;
      const int64_t end = begin + block < first + rows ? begin + block : first + rows;
      kde_rows_box(q, n_query, d, begin, end, box, box + d);
      const int64_t count = kde_tiles_to_visit(plan, box, box + d, box + 2 * d, tiles);
      if (visit == NULL) {
        offsets[b + 1] = count;
      } else {
        for (int64_t v = 0; v < count; v++) visit[offsets[b] + v] = (int32_t) tiles[v];
      }
    }
    free(box);
    free(tiles);
  }
  if (failed) return -1;
  if (visit == NULL) {
    offsets[0] = 0;
    for (int64_t b = 0; b < n_blocks; b++) offsets[b + 1] += offsets[b];
  }
  return 0;
}

void kde_tile_log_weights(const double *weight, int64_t n, int64_t tile,
                          double *log_total, double *log_rest)
{
  const int64_t n_tiles = (n + tile - 1) / tile;
  for (int64_t i = 0; i < n_tiles; i++) {
    const int64_t begin = i * tile;
    const int64_t end = begin + tile < n ? begin + tile : n;
    double total = 0.0, largest = 0.0;
    for (int64_t j = begin; j < end; j++) {
      total += weight[j];
      largest = weight[j] > largest ? weight[j] : largest;
    }
    log_total[i] = total > 0 ? log(total) : -INFINITY;
    log_rest[i] = total - largest > 0 ? log(total - largest) : -INFINITY;
  }
}
