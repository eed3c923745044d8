/*
 * Which training tiles a block of queries must visit (prune.c): the proven
 * bounds behind `tolerance` (kde_backend.h).
 */
#ifndef KDEGPU_PRUNE_H
#define KDEGPU_PRUNE_H

#include <stdint.h>

#include <kdegpu/kernels.h> /* KDE_HD: the device plan (src/cuda/plan.cu) shares these */

#ifdef __cplusplus
extern "C" {
#endif

/* What the decision needs to know of the training tiles. */
typedef struct {
  int kernel;
  int64_t dim;
  int64_t n_tiles;
  const double *lo, *hi;          /* n_tiles x dim boxes, tile-major */
  const double *log_weight;       /* log of each tile's total weight */
  const double *log_weight_rest;  /* log(total - largest weight): what is
                                     left of a tile without one point */
  /* Adaptive fits (NULL otherwise): each tile's smallest and largest
   * 1 / lambda_j^2, the squared inverse of its widest and its narrowest
   * kernel's radius: kde_tile_boxes() of inv_scale2 as a 1-column matrix. */
  const double *inv_scale2_lo, *inv_scale2_hi;
  /* Each tile's weighted centroid (n_tiles x dim, tile-major) and its
   * points' weighted mean squared distance from it, or NULL: a single
   * query's lower bound (kde_prune_log_lower_query). Fixed bandwidths. */
  const double *centroid, *spread2;
  /* log of the smallest factor the pairs' other terms can take (at most
   * 0; -inf: none is proven): the discrete columns' worst penalty
   * (kde_training_set), added to the lower bound only. 0 otherwise. */
  double log_lower_factor;
  double tolerance;               /* relative; 0: skip only exact zeros */
  int leave_one_out;
  int derivative;                 /* KDE_PRUNE_*: which sums the plan serves */
} kde_prune_plan;

/* What a plan bounds (prune.c): the density's kernel sum; with it the
 * gradient's and mean shift's sums (k1sum, first); or those and the
 * Hessian's (second) as well (derivatives.h). */
enum { KDE_PRUNE_DENSITY = 0, KDE_PRUNE_GRADIENT = 1, KDE_PRUNE_HESSIAN = 2 };

/* The squared distances min2, max2 between a query box and tile t, in
 * units of the tile's kernels: with per-point scales lambda_j (an adaptive
 * fit) every pair's s^2 is |q - x_j|^2 / lambda_j^2, so the upper bound
 * takes the tile's widest kernel and the lower bound its narrowest, and
 * both stay proven. Host and device (plan.cu). */
KDE_HD void kde_prune_scale(const kde_prune_plan *p, int64_t t, double *min2,
                            double *max2)
{
  if (p->inv_scale2_lo != NULL) {
    *min2 *= p->inv_scale2_lo[t];
    *max2 *= p->inv_scale2_hi[t];
  }
}

/* log F: what bounds a pair's derivative terms relative to its term of the
 * kernel sum, from its tile's distances (prune.c says why); 0 for the
 * density. Gaussian and exponential only (compact kernels skip by their
 * support alone). */
KDE_HD double kde_prune_log_factor(int kernel, int derivative, double min2, double max2)
{
  double f = 1.0;
  if (derivative == KDE_PRUNE_DENSITY) return 0.0;
  if (kernel == KDE_GAUSSIAN) {
    f = fmax(f, 0.5 * sqrt(max2));
    if (derivative == KDE_PRUNE_HESSIAN) f = fmax(f, 0.25 * max2);
  } else {
    const double s = sqrt(min2);
    f = fmax(f, 0.5 / s);
    if (derivative == KDE_PRUNE_HESSIAN) f = fmax(f, 0.25 + 0.25 / s);
  }
  return log(f);
}

/* log of tile t's upper bound on what it adds to every sum the plan serves,
 * from the distances min2, max2 (after kde_prune_scale). */
KDE_HD double kde_prune_log_upper(const kde_prune_plan *p, int64_t t, double min2, double max2)
{
  const double density = p->log_weight[t] + kde_log_profile(p->kernel, min2);
  if (p->derivative == KDE_PRUNE_DENSITY) return density;
  return density + kde_prune_log_factor(p->kernel, p->derivative, min2, max2);
}

/* log of tile t's share of L, the lower bound of every query's kernel sum
 * (without each query's own point when leaving one out). */
KDE_HD double kde_prune_log_lower(const kde_prune_plan *p, int64_t t, double max2)
{
  const double *weight = p->leave_one_out ? p->log_weight_rest : p->log_weight;
  return weight[t] + kde_log_profile(p->kernel, max2) + p->log_lower_factor;
}

/* Tile t's share of L for one query q (the per-query refinement): the
 * larger of kde_prune_log_lower and, where the plan keeps centroids (not
 * leaving one out), Jensen's bound. The Gaussian's and the exponential's
 * k(s^2) are convex in s^2, so sum_j w_j k(s_j^2) >= W k(mean s^2), and
 * the weighted mean of |q - x_j|^2 is |q - c|^2 + spread2 for the centroid
 * c: near the query's side of a wide tile this is e^(r a) tighter than the
 * farthest corner, r the distance and a the tile's half diagonal. The mean
 * is raised for rounding: 1e-12 relative for the sums, and for the
 * centroid's own error (at most 1e-13 S per coordinate, S the sum of |c_k|
 * and |q_k| and 1, its points' residuals included), whose cross term 2 |q -
 * c| |delta| is at most 1e-12 |q - c|^2 + 1e-14 S^2. dim: p->dim, or the
 * same as a constant, for loops the compiler unrolls. */
KDE_HD double kde_prune_log_lower_query(const kde_prune_plan *p, int64_t t, double max2,
                                        const double *q, int64_t dim)
{
  const double corner = kde_prune_log_lower(p, t, max2);
  if (p->centroid == NULL || p->leave_one_out || p->inv_scale2_lo != NULL ||
      kde_kernel_is_compact(p->kernel))
    return corner;
  const double *c = p->centroid + t * dim;
  double c2 = 0.0, size = 1.0;
  for (int64_t k = 0; k < dim; k++) {
    const double diff = q[k] - c[k];
    c2 += diff * diff;
    size += fabs(q[k]) + fabs(c[k]);
  }
  const double mean2 = (c2 + p->spread2[t]) * (1.0 + 1e-12) + 1e-14 * size * size;
  const double jensen = p->log_weight[t] + kde_log_profile(p->kernel, mean2) + p->log_lower_factor;
  return jensen > corner ? jensen : corner;
}

/* Tile t's share of L for a box (q_lo, q_hi of kde_tiles_to_visit_grouped)
 * that is `point` (its one point) or not (NULL): a query's own plan takes
 * Jensen's bound as the refinement does, a block's box the corner. */
KDE_HD double kde_prune_log_lower_box(const kde_prune_plan *p, int64_t t, double max2,
                                      const double *point, int64_t dim)
{
  return point != NULL ? kde_prune_log_lower_query(p, t, max2, point, dim)
                       : kde_prune_log_lower(p, t, max2);
}

/* q_lo itself where the box (q_lo, q_hi) is one point, else NULL. */
KDE_HD const double *kde_box_point(const double *q_lo, const double *q_hi, int64_t dim)
{
  for (int64_t k = 0; k < dim; k++)
    if (!(q_lo[k] == q_hi[k])) return NULL;
  return q_lo;
}

/* A tile is beyond a compact kernel's support when min2 exceeds 1 by more
 * than the rounding of min2 and of any pair's s^2 (both about d * 1e-16
 * relative): its pairs then evaluate to exactly 0 as well. */
#define KDE_PRUNE_SUPPORT_MARGIN 1e-9

/* Bucket b holds the tiles whose bound is between e^-(b+1) and e^-b of
 * the budget; the last one everything smaller. */
#define KDE_PRUNE_BUCKETS 64

/* The bucket of a tile whose upper bound is exp(key) times the budget; -1
 * for a bound alone above the budget (always visited). */
KDE_HD int kde_prune_bucket(double key)
{
  const double depth = -key;
  if (!(key < 0)) return -1;
  return depth >= KDE_PRUNE_BUCKETS - 1 ? KDE_PRUNE_BUCKETS - 1 : (int) depth;
}

/* Given each bucket's sum of bounds relative to the budget: the buckets of
 * the smallest bounds are skipped while their sum fits the budget (1);
 * returns the first skipped one (buckets >= it are skipped; KDE_PRUNE_BUCKETS:
 * none). */
KDE_HD int kde_prune_first_skipped(const double *bucket_sum)
{
  double skipped = 0.0;
  int first_skipped = KDE_PRUNE_BUCKETS;
  for (int b = KDE_PRUNE_BUCKETS - 1; b >= 0; b--) {
    if (skipped + bucket_sum[b] > 1.0) break;
    skipped += bucket_sum[b];
    first_skipped = b;
  }
  return first_skipped;
}

/* The sum, relative to the budget, of the buckets from first_skipped on:
 * what kde_prune_first_skipped let skip (at most 1). */
KDE_HD double kde_prune_skipped_sum(const double *bucket_sum, int first_skipped)
{
  double skipped = 0.0;
  for (int b = KDE_PRUNE_BUCKETS - 1; b >= first_skipped; b--) skipped += bucket_sum[b];
  return skipped;
}

/* What a block's plan leaves of one query's budget (prune.c's per-query
 * refinement): log(B_q - S) for its own budget B_q = exp(log_budget) and
 * S = exp(log_skipped), the bounds the block's plan skipped; -inf when
 * nothing is left (the query then needs every tile the block visits). */
KDE_HD double kde_prune_log_remaining(double log_budget, double log_skipped)
{
  if (!(log_skipped > -INFINITY)) return log_budget;
  if (!(log_skipped < log_budget)) return -INFINITY;
  return log_budget + log1p(-exp(log_skipped - log_budget));
}


/* The tiles (ascending indices, written to visit[]) that the queries in
 * the box [q_lo, q_hi] must visit so that each one's kernel sum is within
 * relative `tolerance` of the full sum (exactly the full sum for compact
 * kernels, whose skipped tiles contribute 0); returns their number.
 * scratch: 2 * n_tiles doubles. */
int64_t kde_tiles_to_visit(const kde_prune_plan *plan, const double *q_lo,
                           const double *q_hi, double *scratch, int64_t *visit);

/* Each tile's log total weight, and log(total - largest weight), which
 * bounds what a tile holds without any one of its points (leave one out),
 * for tiles of `tile` consecutive weights of n. */
void kde_tile_log_weights(const double *weight, int64_t n, int64_t tile, int threads,
                          double *log_total, double *log_rest);

/* Each tile's weighted centroid (n_tiles x dim, tile-major) and weighted
 * mean squared distance of its points from it (kde_prune_plan.centroid),
 * for tiles of `tile` consecutive rows of the n x dim column-major x;
 * points of weight 0 (a layout's empty places) take no part, and a tile of
 * none has centroid 0 and spread 0 (its log weight is -inf). */
void kde_tile_centroids(const double *x, const double *weight, int64_t n, int64_t dim,
                        int64_t tile, int threads, double *centroid, double *spread2);

/* The tiles that each block of `block` consecutive query rows visits, for
 * the rows [first, first + rows) of the n_query x dim column-major matrix q
 * (the last block may be shorter), as compressed lists: offsets[0..n_blocks]
 * (n_blocks = ceil(rows / block)) and, when visit is not NULL, visit[
 * offsets[b] .. offsets[b + 1]) the tiles of block b, ascending. Call it
 * with visit = NULL for the offsets, then again with room for
 * offsets[n_blocks] tiles. Returns 0, or -1 when out of memory. */
int kde_plan_query_blocks(const kde_prune_plan *plan, const double *q,
                          int64_t n_query, int64_t first, int64_t rows,
                          int64_t block, int threads, int64_t *offsets,
                          int32_t *visit);

/* Groups of group_tiles consecutive tiles (a coarse level of the tiles'
 * spatial order) that tell in microseconds whether a plan can pay: each
 * group's box (n_groups x dim, row-major as the tiles'); the box of its
 * tiles' points nearest the data's centre (each tile's box clamps the
 * centre: a point of the tile, and for the sparse outer tiles, whose boxes
 * are wide, their inner corner); its smallest tile log weight and its log
 * total weight. */
typedef struct {
  int64_t n_groups, group_tiles;
  double *lo, *hi, *inner_lo, *inner_hi;
  double *log_weight_min, *log_weight_sum;
  double *log_rest_sum; /* of the tiles' log_weight_rest (NULL: not made) */
} kde_prune_groups;

/* The groups of n_tiles tiles (boxes tile_lo, tile_hi: n_tiles x dim, row-major; log
 * weights log_weight): about KDE_PRUNE_TEST_GROUPS groups of at
 * least KDE_PRUNE_TEST_MIN_TILES tiles (the test then takes about 3 us per
 * query block: 15 us with 1024 groups, where the device's plan of one block
 * against 1e7 points took 70 us); 0, or -1 when out of memory (g then
 * empty). */
#define KDE_PRUNE_TEST_GROUPS 256
#define KDE_PRUNE_TEST_MIN_TILES 16
int kde_prune_groups_make(int64_t dim, int64_t n_tiles, const double *tile_lo,
                          const double *tile_hi, const double *log_weight,
                          const double *log_weight_rest, kde_prune_groups *g);
/* The tiles per group of kde_prune_groups_make. */
int64_t kde_prune_test_group_tiles(int64_t n_tiles);
/* The same with group_tiles tiles per group (the last may have fewer). */
int kde_prune_groups_make_sized(int64_t dim, int64_t n_tiles, int64_t group_tiles,
                                const double *tile_lo, const double *tile_hi,
                                const double *log_weight, const double *log_weight_rest,
                                kde_prune_groups *g);
void kde_prune_groups_free(kde_prune_groups *g);

/* 0 when the groups prove that the density's plan for the query box
 * [q_lo, q_hi] (fixed bandwidth) would visit at least `share` of the tiles,
 * so that planning cannot pay; 1 otherwise. */
int kde_plan_may_pay(const kde_prune_plan *plan, const kde_prune_groups *g,
                     const double *q_lo, const double *q_hi, double share);

/* An estimate from the groups of the share of the tiles that the plan of
 * a query at the data keeps (dim up to KDE_CUDA_PLAN_MAX_DIM, fixed
 * bandwidth; else 1): cheap enough to make once per fit and tolerance
 * (n_groups^2 terms), for the device's choice of whether a plan can pay. */
double kde_prune_groups_local_share(const kde_prune_plan *plan, const kde_prune_groups *g);

/* Groups whose bound is below the budget by more than this (in log units,
 * beyond log n_groups) are not looked into: all of them together are at
 * most e^-3 of the budget, and they are skipped whole or visited whole
 * (here and in the device's grouped plan, src/cuda/plan_grouped_kernels.cuh). */
#define KDE_PRUNE_GROUPED_CUT 3.0

/* kde_tiles_to_visit with the same guarantee at a cost of about the groups
 * plus the tiles near the box (the CPU's per-query plans of sparse
 * queries): L's first bound comes from the groups' corners; a group whose
 * bound is below tolerance * L / n_groups by e^3 is skipped or visited
 * whole, the others are looked into tile by tile (for L's second bound;
 * those below the same cut from it are then whole again), and the
 * unopened groups and the opened tiles fill the same buckets. The plain
 * plan where the groups do not apply (adaptive fits, derivatives, leaving
 * one out without the groups' log_rest_sum).
 * scratch: 2 * n_tiles doubles. */
int64_t kde_tiles_to_visit_grouped(const kde_prune_plan *plan, const kde_prune_groups *g,
                                   const double *q_lo, const double *q_hi, double *scratch,
                                   int64_t *visit);

#ifdef __cplusplus
}
#endif

#endif
