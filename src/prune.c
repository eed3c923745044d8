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
 * - Groups of consecutive tiles (kde_prune_groups, box G, weight W_G):
 *   min2_G <= min2_T and max2_G >= max2_T for each tile T of the group, so
 *   W_G k(min2_G) bounds the group's tiles' upper bounds together and
 *   W_G k(max2_G) is at most their share of L. kde_tiles_to_visit_grouped
 *   puts groups (whole) and tiles in the same buckets: the same proof. L
 *   is a sum of lower bounds over any partition of the tiles, so a group
 *   looked into tile by tile for L may still be bucketed whole.
 *   Where the box is one query's point, a tile's share of L may be Jensen's
 *   bound (below).
 * - Per-query plans (a few query blocks on the device,
 *   src/cuda/plan_grouped.cu): each query's own grouped plan, its point as
 *   the box; a group of queries visits the union of its queries' lists, so
 *   each query visits at least what its own plan proves it needs.
 * - Per-query refinement (the device plan, src/cuda/plan_refine.cu): a
 *   block's plan skips tiles whose upper bounds add up to S <= tolerance *
 *   L. Each query q of the block then bounds its own sum from its own
 *   distances (its point as the box): L_q over the tiles the block visits
 *   (a part of a lower bound is one; each tile's share the larger of its
 *   farthest corner's and Jensen's bound from its centroid,
 *   kde_prune_log_lower_query), and among those tiles a set S_q whose
 *   bounds from q add up to at most tolerance * L_q - S
 *   (kde_prune_log_remaining). The block visits the tiles some query needs;
 *   a tile it skips is in the block's S (whose bounds from q are at most the
 *   box's: q lies in the box) or in q's S_q, so q misses at most S +
 *   (tolerance * L_q - S) = tolerance * L_q of its sum. For compact
 *   kernels a query needs the tiles within its own support.
 * The bounds are kde_prune_log_upper and kde_prune_log_lower (prune.h),
 * which the device plan (src/cuda/plan.cu) shares.
 * Sums are kept as logarithms, so nothing underflows however far apart
 * the points are. An adaptive fit's points carry kernels of their own
 * radius lambda_j (their lambda_j^-d is in the weights): kde_prune_scale
 * (prune.h) takes each tile's bounds at its widest and narrowest kernel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prune.h"
#include "spatial.h"
#include "kde_limits.h"
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

/* The tiles [k * group_tiles, group_end) of group k. */
static inline int64_t group_end(const kde_prune_groups *g, int64_t k, int64_t n_tiles)
{
  return (k + 1) * g->group_tiles < n_tiles ? (k + 1) * g->group_tiles : n_tiles;
}

int64_t kde_tiles_to_visit_grouped(const kde_prune_plan *plan, const kde_prune_groups *g,
                                   const double *q_lo, const double *q_hi, double *scratch,
                                   int64_t *visit)
{
  const int64_t n_tiles = plan->n_tiles, d = plan->dim, n_groups = g->n_groups;
  const int compact = kde_kernel_is_compact(plan->kernel);
  if (n_groups < 1 || 2 * n_groups > n_tiles || plan->inv_scale2_lo != NULL ||
      (plan->leave_one_out && g->log_rest_sum == NULL) ||
      plan->derivative != KDE_PRUNE_DENSITY || (!compact && !(plan->tolerance > 0)))
    return kde_tiles_to_visit(plan, q_lo, q_hi, scratch, visit);
  /* L's weights: leaving one out, each tile's less its largest point (at
   * most one point is the query's own; this counts one per tile) */
  const double *group_lower_weight = plan->leave_one_out ? g->log_rest_sum : g->log_weight_sum;
  double *key = scratch;                     /* per tile of an opened group */
  double *group_key = scratch + n_tiles;     /* per group: its bound */
  double *group_lower = group_key + n_groups; /* per group: its term of L; NAN: opened */
  int64_t n_visit = 0;

  if (compact) { /* a group beyond the support holds no tile within it */
    for (int64_t k = 0; k < n_groups; k++) {
      double min2, max2;
      kde_box_distances(q_lo, q_hi, g->lo + k * d, g->hi + k * d, d, &min2, &max2);
      if (!(min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN)) continue;
      for (int64_t t = k * g->group_tiles; t < group_end(g, k, n_tiles); t++) {
        kde_box_distances(q_lo, q_hi, plan->lo + t * d, plan->hi + t * d, d, &min2, &max2);
        if (min2 < 1.0 + KDE_PRUNE_SUPPORT_MARGIN) visit[n_visit++] = t;
      }
    }
    return n_visit;
  }

  /* L from the groups: each group's total weight at its farthest corner */
  kde_lse lower = kde_lse_empty();
  for (int64_t k = 0; k < n_groups; k++) {
    double min2, max2;
    kde_box_distances(q_lo, q_hi, g->lo + k * d, g->hi + k * d, d, &min2, &max2);
    group_key[k] = g->log_weight_sum[k] + kde_log_profile(plan->kernel, min2);
    group_lower[k] = group_lower_weight[k] + kde_log_profile(plan->kernel, max2) +
                     plan->log_lower_factor;
    lower = kde_lse_add(lower, group_lower[k]);
  }
  const double open_cut = log(plan->tolerance) + kde_lse_log(lower) - log((double) n_groups) -
                          KDE_PRUNE_GROUPED_CUT;
  if (!(open_cut > -INFINITY)) return kde_tiles_to_visit(plan, q_lo, q_hi, scratch, visit);
  /* the groups that may matter, tile by tile: their tiles' bounds, and L
   * again with their tiles' own corners (each at most the group's), or
   * for a point also Jensen's bound */
  const double *point = kde_box_point(q_lo, q_hi, d);
  lower = kde_lse_empty();
  for (int64_t k = 0; k < n_groups; k++) {
    if (!(group_key[k] > open_cut)) {
      lower = kde_lse_add(lower, group_lower[k]);
      continue;
    }
    group_lower[k] = NAN;
    for (int64_t t = k * g->group_tiles; t < group_end(g, k, n_tiles); t++) {
      double min2, max2;
      kde_box_distances(q_lo, q_hi, plan->lo + t * d, plan->hi + t * d, d, &min2, &max2);
      key[t] = kde_prune_log_upper(plan, t, min2, max2);
      lower = kde_lse_add(lower, kde_prune_log_lower_box(plan, t, max2, point, d));
    }
  }
  const double log_budget = log(plan->tolerance) + kde_lse_log(lower);
  /* L from the opened groups' tiles is the larger: the opened groups whose
   * bound is below its budget by the cut are closed again (their tiles' terms
   * stay in L, a lower bound whichever way they are grouped), so that fewer
   * groups are decided tile by tile */
  const double close_cut = log_budget - log((double) n_groups) - KDE_PRUNE_GROUPED_CUT;
  for (int64_t k = 0; k < n_groups; k++)
    if (group_lower[k] != group_lower[k] && !(group_key[k] > close_cut)) group_lower[k] = 0.0;
  /* the unopened groups and the opened groups' tiles in one set of buckets */
  double bucket_sum[KDE_PRUNE_BUCKETS] = {0};
  for (int64_t k = 0; k < n_groups; k++) {
    if (group_lower[k] == group_lower[k]) {
      group_key[k] -= log_budget;
      const int b = kde_prune_bucket(group_key[k]);
      if (b >= 0) bucket_sum[b] += exp(group_key[k]);
      continue;
    }
    for (int64_t t = k * g->group_tiles; t < group_end(g, k, n_tiles); t++) {
      key[t] -= log_budget;
      const int b = kde_prune_bucket(key[t]);
      if (b >= 0) bucket_sum[b] += exp(key[t]);
    }
  }
  const int first_skipped = kde_prune_first_skipped(bucket_sum);
  for (int64_t k = 0; k < n_groups; k++) {
    const int opened = group_lower[k] != group_lower[k];
    if (!opened && !(kde_prune_bucket(group_key[k]) < first_skipped)) continue;
    for (int64_t t = k * g->group_tiles; t < group_end(g, k, n_tiles); t++)
      if (!opened || kde_prune_bucket(key[t]) < first_skipped) visit[n_visit++] = t;
  }
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

void kde_tile_log_weights(const double *weight, int64_t n, int64_t tile, int threads,
                          double *log_total, double *log_rest)
{
  const int64_t n_tiles = (n + tile - 1) / tile;
#pragma omp parallel for num_threads(kde_thread_count_for(threads, (double) n)) schedule(static)
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

void kde_tile_centroids(const double *x, const double *weight, int64_t n, int64_t dim,
                        int64_t tile, int threads, double *centroid, double *spread2)
{
  const int64_t n_tiles = (n + tile - 1) / tile;
#pragma omp parallel for num_threads(kde_thread_count_for(threads, (double) n * (double) dim)) \
    schedule(static)
  for (int64_t i = 0; i < n_tiles; i++) {
    const int64_t begin = i * tile;
    const int64_t end = begin + tile < n ? begin + tile : n;
    double *c = centroid + i * dim;
    double total = 0.0, spread = 0.0;
    for (int64_t k = 0; k < dim; k++) c[k] = 0.0;
    for (int64_t j = begin; j < end; j++) {
      if (!(weight[j] > 0)) continue;
      total += weight[j];
      for (int64_t k = 0; k < dim; k++) c[k] += weight[j] * x[j + k * n];
    }
    if (total > 0) {
      for (int64_t k = 0; k < dim; k++) c[k] /= total;
      for (int64_t j = begin; j < end; j++) {
        if (!(weight[j] > 0)) continue;
        double s2 = 0.0;
        for (int64_t k = 0; k < dim; k++) {
          const double diff = x[j + k * n] - c[k];
          s2 += diff * diff;
        }
        spread += weight[j] * s2;
      }
      spread /= total;
    }
    spread2[i] = spread;
  }
}

/* (fmin and fmax are calls where NaNs must be kept: the boxes here are
 * finite, and the test runs per group per query block) */
static inline double smaller(double a, double b) { return a < b ? a : b; }
static inline double larger(double a, double b) { return a > b ? a : b; }

int64_t kde_prune_test_group_tiles(int64_t n_tiles)
{
  const int64_t group_tiles = (n_tiles + KDE_PRUNE_TEST_GROUPS - 1) / KDE_PRUNE_TEST_GROUPS;
  return group_tiles < KDE_PRUNE_TEST_MIN_TILES ? KDE_PRUNE_TEST_MIN_TILES : group_tiles;
}

int kde_prune_groups_make(int64_t dim, int64_t n_tiles, const double *tile_lo,
                          const double *tile_hi, const double *log_weight,
                          const double *log_weight_rest, kde_prune_groups *g)
{
  return kde_prune_groups_make_sized(dim, n_tiles, kde_prune_test_group_tiles(n_tiles), tile_lo,
                                     tile_hi, log_weight, log_weight_rest, g);
}

int kde_prune_groups_make_sized(int64_t dim, int64_t n_tiles, int64_t group_tiles,
                                const double *tile_lo, const double *tile_hi,
                                const double *log_weight, const double *log_weight_rest,
                                kde_prune_groups *g)
{
  const int64_t d = dim;
  if (group_tiles < 1) group_tiles = 1;
  memset(g, 0, sizeof *g);
  g->group_tiles = group_tiles;
  g->n_groups = (n_tiles + group_tiles - 1) / group_tiles;
  const size_t count = (size_t) (g->n_groups > 0 ? g->n_groups : 1);
  double *centre = calloc((size_t) (d > 0 ? d : 1), sizeof(double));
  g->lo = malloc(count * (size_t) d * sizeof(double));
  g->hi = malloc(count * (size_t) d * sizeof(double));
  g->inner_lo = malloc(count * (size_t) d * sizeof(double));
  g->inner_hi = malloc(count * (size_t) d * sizeof(double));
  g->log_weight_min = malloc(count * sizeof(double));
  g->log_weight_sum = malloc(count * sizeof(double));
  if (log_weight_rest != NULL) g->log_rest_sum = malloc(count * sizeof(double));
  if (centre == NULL || g->lo == NULL || g->hi == NULL || g->inner_lo == NULL ||
      g->inner_hi == NULL || g->log_weight_min == NULL || g->log_weight_sum == NULL ||
      (log_weight_rest != NULL && g->log_rest_sum == NULL)) {
    free(centre);
    kde_prune_groups_free(g);
    return -1;
  }
  /* the centre: the mean of the tiles' middles (any point would do) */
  for (int64_t t = 0; t < n_tiles; t++)
    for (int64_t j = 0; j < d; j++)
      centre[j] += 0.5 * (tile_lo[t * d + j] + tile_hi[t * d + j]) / (double) n_tiles;
  for (int64_t k = 0; k < g->n_groups; k++) {
    const int64_t t0 = k * group_tiles, t1 = group_end(g, k, n_tiles);
    double *lo = g->lo + k * d, *hi = g->hi + k * d;
    double *inner_lo = g->inner_lo + k * d, *inner_hi = g->inner_hi + k * d;
    kde_lse total = kde_lse_empty(), rest = kde_lse_empty();
    double least = INFINITY;
    for (int64_t j = 0; j < d; j++) {
      lo[j] = inner_lo[j] = INFINITY;
      hi[j] = inner_hi[j] = -INFINITY;
    }
    for (int64_t t = t0; t < t1; t++) {
      for (int64_t j = 0; j < d; j++) {
        const double a = tile_lo[t * d + j], b = tile_hi[t * d + j];
        const double inner = smaller(larger(centre[j], a), b);
        lo[j] = smaller(lo[j], a);
        hi[j] = larger(hi[j], b);
        inner_lo[j] = smaller(inner_lo[j], inner);
        inner_hi[j] = larger(inner_hi[j], inner);
      }
      total = kde_lse_add(total, log_weight[t]);
      if (log_weight_rest != NULL) rest = kde_lse_add(rest, log_weight_rest[t]);
      least = smaller(least, log_weight[t]);
    }
    g->log_weight_min[k] = least;
    g->log_weight_sum[k] = kde_lse_log(total);
    if (log_weight_rest != NULL) g->log_rest_sum[k] = kde_lse_log(rest);
  }
  free(centre);
  return 0;
}

void kde_prune_groups_free(kde_prune_groups *g)
{
  free(g->lo);
  free(g->hi);
  free(g->inner_lo);
  free(g->inner_hi);
  free(g->log_weight_min);
  free(g->log_weight_sum);
  free(g->log_rest_sum);
  memset(g, 0, sizeof *g);
}

static double group_far2(const double *q_lo, const double *q_hi, const double *lo,
                         const double *hi, int64_t d)
{
  double far2 = 0.0;
  for (int64_t j = 0; j < d; j++) {
    /* the point of [lo, hi] nearest Q's middle is the nearest to both of
     * Q's ends at once; its distance to the farther end */
    const double mid = 0.5 * (q_lo[j] + q_hi[j]);
    const double p = smaller(larger(mid, lo[j]), hi[j]);
    const double reach = p < mid ? q_hi[j] - p : p - q_lo[j];
    far2 += reach * reach;
  }
  return far2;
}

static double group_h2(const double *q_lo, const double *q_hi, const double *lo,
                       const double *hi, int64_t d)
{
  double h2 = 0.0;
  for (int64_t j = 0; j < d; j++) {
    const double reach = larger(0.0, larger(q_lo[j] - lo[j], hi[j] - q_hi[j]));
    h2 += reach * reach;
  }
  return h2;
}

/* A tile t of group G is visited when its bound W_t k(min2_t) reaches the
 * budget tolerance * L (kde_tiles_to_visit). min2_t is at most the squared
 * distance from any point of the tile to Q, so at most h2, the largest
 * squared distance to Q from the box of G's inner points (one per tile),
 * and W_t k(min2_t) >= (G's smallest W_t) k(h2). Every tile's max2 (to Q's
 * farthest corner) is at least far2, the least over the points of G's box
 * of the squared distance to Q's farthest corner, so L <= sum_G W_G
 * k(far2) (times the lower-bound factor). Tiles for which the first
 * exceeds tolerance times the second are visited by any plan. Per
 * coordinate both are a distance from an interval to an interval, so they
 * add over the coordinates.
 * Called per query block before a few queries' evaluation, so kept to
 * arithmetic: L's bound takes an exp only for the groups within e^-40 of
 * the largest term and counts each of the others as that much (still an
 * upper bound); the count stops once it decides. */
int kde_plan_may_pay(const kde_prune_plan *plan, const kde_prune_groups *g,
                     const double *q_lo, const double *q_hi, double share)
{
  const int64_t d = plan->dim;
  const int compact = kde_kernel_is_compact(plan->kernel);
  if (plan->inv_scale2_lo != NULL || plan->derivative != KDE_PRUNE_DENSITY ||
      (!compact && !(plan->tolerance > 0)))
    return 1;
  double log_budget = 0.0;
  if (!compact) {
    const double cut = -40.0, below_cut = 4.248354255291589e-18; /* e^-40 */
    /* each group's log term of L's bound (kde_prune_groups_make makes at
     * most KDE_PRUNE_TEST_GROUPS groups) */
    double term[KDE_PRUNE_TEST_GROUPS];
    double top = -INFINITY, sum = 0.0;
    if (g->n_groups > KDE_PRUNE_TEST_GROUPS) return 1;
    for (int64_t k = 0; k < g->n_groups; k++) {
      term[k] = g->log_weight_sum[k] +
                kde_log_profile(plan->kernel,
                                group_far2(q_lo, q_hi, g->lo + k * d, g->hi + k * d, d));
      top = larger(top, term[k]);
    }
    if (!(top > -INFINITY)) return 0; /* no lower bound: every unit is visited */
    for (int64_t k = 0; k < g->n_groups; k++)
      sum += term[k] - top > cut ? exp(term[k] - top) : below_cut;
    /* a margin for the plan's own rounding of the same quantities (the
     * distances' relative rounding, times their size in the exponent) */
    log_budget = log(plan->tolerance) + top + log(sum) + plan->log_lower_factor + 1e-9 +
                 1e-15 * fabs(top);
  }
  const double needed = share * (double) plan->n_tiles;
  double visited = 0.0, left = (double) plan->n_tiles;
  for (int64_t k = 0; k < g->n_groups; k++) {
    const double tiles = (double) (group_end(g, k, plan->n_tiles) - k * g->group_tiles);
    const double h2 = group_h2(q_lo, q_hi, g->inner_lo + k * d, g->inner_hi + k * d, d);
    const int surely = compact ? h2 < 1.0
                               : g->log_weight_min[k] + kde_log_profile(plan->kernel, h2) >
                                     log_budget;
    if (surely) visited += tiles;
    left -= tiles;
    if (visited >= needed) return 0;
    if (visited + left < needed) return 1;
  }
  return 1;
}

/* The groups' estimate of the share of the tiles that a query at the data
 * keeps: for a query at the centroid (else the box's middle) of each
 * group's middle tile, the tiles of the groups whose bound (total weight
 * at the box's nearest point) reaches the budget; L bounded below by the
 * tiles around it in its group (kde_prune_log_lower_query) and every other
 * group's total weight at its farthest corner. Averaged over the
 * groups, each counted by its tiles. A group-level plan's share, so above
 * what a tile-level plan for the same point keeps (the plan_pays emulator
 * checks it), though below what a block of spread queries keeps. On one
 * H200's fits: N(0, I) data at Scott's rule 0.13-0.67 (d = 1-3, n = 2e5 to
 * 2e6), 20 clusters far apart 0.09, a GPS-like set 0.01. */
double kde_prune_groups_local_share(const kde_prune_plan *plan, const kde_prune_groups *g)
{
  const int64_t d = plan->dim, n_groups = g->n_groups;
  const int compact = kde_kernel_is_compact(plan->kernel);
  if (n_groups < 1 || n_groups > KDE_PRUNE_TEST_GROUPS || d > KDE_CUDA_PLAN_MAX_DIM ||
      plan->inv_scale2_lo != NULL || (!compact && !(plan->tolerance > 0)))
    return 1.0;
  double q[KDE_CUDA_PLAN_MAX_DIM];
  kde_lse lower;
  double kept = 0.0;
  for (int64_t j = 0; j < n_groups; j++) {
    const int64_t first = j * g->group_tiles, end = group_end(g, j, plan->n_tiles);
    const int64_t probe = (first + end) / 2;
    for (int64_t k = 0; k < d; k++)
      q[k] = plan->centroid != NULL ? plan->centroid[probe * d + k]
                                    : 0.5 * (plan->lo[probe * d + k] + plan->hi[probe * d + k]);
    double log_budget = -INFINITY;
    if (!compact) {
      /* the probe's nearest KDE_PRUNE_TEST_MIN_TILES tiles in the order
       * (the group's others left out: L stays bounded below) */
      const int64_t from = probe - KDE_PRUNE_TEST_MIN_TILES / 2 > first
                               ? probe - KDE_PRUNE_TEST_MIN_TILES / 2
                               : first;
      const int64_t to = from + KDE_PRUNE_TEST_MIN_TILES < end ? from + KDE_PRUNE_TEST_MIN_TILES
                                                               : end;
      lower = kde_lse_empty();
      for (int64_t t = from; t < to; t++) {
        double min2, max2;
        kde_box_distances(q, q, plan->lo + t * d, plan->hi + t * d, d, &min2, &max2);
        lower = kde_lse_add(lower, kde_prune_log_lower_query(plan, t, max2, q, d));
      }
      for (int64_t k = 0; k < n_groups; k++)
        if (k != j)
          lower = kde_lse_add(lower, g->log_weight_sum[k] + plan->log_lower_factor +
                                  kde_log_profile(plan->kernel, group_h2(q, q, g->lo + k * d,
                                                                         g->hi + k * d, d)));
      if (!(lower.max > -INFINITY)) return 1.0;
      log_budget = log(plan->tolerance) + kde_lse_log(lower);
    }
    double tiles = (double) (end - first); /* its own group: needed */
    for (int64_t k = 0; k < n_groups; k++) {
      if (k == j) continue;
      const double near2 = group_far2(q, q, g->lo + k * d, g->hi + k * d, d);
      const int may = compact ? near2 < 1.0
                              : g->log_weight_sum[k] + kde_log_profile(plan->kernel, near2) >
                                    log_budget;
      if (may) tiles += (double) (group_end(g, k, plan->n_tiles) - k * g->group_tiles);
    }
    kept += tiles * (double) (end - first);
  }
  return kept / ((double) plan->n_tiles * (double) plan->n_tiles);
}
