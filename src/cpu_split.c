/*
 * The CPU backend's plans (kde_cpu.c drives them): which tiles a block of
 * queries visits (prune.c's proof, through the groups where they pay), and
 * the splits of a wide block into its k-d halves, down to single queries,
 * each part with its own plan, while they pay.
 */
#include <math.h>
#include <stdint.h>

#include "cpu_block.h"
#include "prune.h"
#include <kdegpu/kernels.h>

/* Sparse queries (far apart, far from the data, between clusters): a
 * block of them spans a box far wider than a kernel, and its plan, whose
 * bounds hold for every point of the box, visits nearly every tile. A
 * block whose box's diagonal reaches REFINE_MIN_REACH2 (squared, in
 * kernel units: one sd for the Gaussian, the support's radius for the
 * compact kernels: two of them) is split in its k-d halves, each with its own plan,
 * while the halves visit at most REFINE_GAIN of the block's pairs; down to
 * single queries (a block whose halves save too little but that spans
 * REFINE_SCATTERED_REACH2, a few queries scattered over the data, may go
 * to single queries at once). A split is tried only where what it can save pays for
 * the halves' plans: a bound costs about REFINE_PLAN_PAIRS pairs (~30 ns
 * against ~2 ns a pair at d = 2 and 3). Dense queries'
 * blocks are far narrower than a kernel: no plan is made twice. */
#define REFINE_MIN_REACH2 4.0
#define REFINE_GAIN 0.8
#define REFINE_SCATTERED_REACH2 64.0 /* a block 8 kernels wide: scattered */
#define REFINE_PLAN_PAIRS 16.0

/* The box [lo, hi] of the queries rows[0 .. len) (dim coordinates). */
static void rows_box(const kde_query_set *query, int64_t dim, const int64_t *rows, int64_t len,
                     double *lo, double *hi)
{
  const int64_t m = query->n_query;
  for (int64_t k = 0; k < dim; k++) {
    const double *col = query->query + k * m;
    double a = col[rows[0]], b = a;
    for (int64_t i = 1; i < len; i++) {
      a = col[rows[i]] < a ? col[rows[i]] : a;
      b = col[rows[i]] > b ? col[rows[i]] : b;
    }
    lo[k] = a;
    hi[k] = b;
  }
}

/* A plan proven to visit at least this share of the tiles is not made
 * (kde_plan_may_pay): sweeping them all then costs at most 3% more, the
 * plan of a block of a few queries against 1e6 points about 5%. */
#define PLAN_SKIP_SHARE 0.97

/* The tiles block `rows` (block_len queries) visits: the plan's, or all;
 * their count. box_and_scratch: 2 * dim + 2 * n_tiles doubles. */
static int64_t block_tiles(const kde_prune_plan *plan, const kde_prune_groups *groups,
                           const kde_query_set *query, const int64_t *rows, int64_t block_len,
                           int64_t n_tiles, double *box_and_scratch, int64_t *visit)
{
  const int64_t dim = plan != NULL ? plan->dim : 0;
  double *q_lo = box_and_scratch, *q_hi = q_lo + dim;
  rows_box(query, dim, rows, block_len, q_lo, q_hi);
  if (plan == NULL || !kde_plan_may_pay(plan, groups, q_lo, q_hi, PLAN_SKIP_SHARE)) {
    for (int64_t v = 0; v < n_tiles; v++) visit[v] = v;
    return n_tiles;
  }
  return kde_tiles_to_visit_grouped(plan, groups, q_lo, q_hi, q_hi + dim, visit);
}

/* The points in the tiles visit[0 .. n_visit) (ascending: only the last
 * may be the short tile). */
static double listed_points(const kde_training_set *train, const int64_t *visit,
                            int64_t n_visit, int64_t tile, int64_t n_tiles)
{
  if (n_visit < 1) return 0.0;
  const int64_t last_tile_points = train->n_train - (n_tiles - 1) * tile;
  return (double) (n_visit * tile -
                   (visit[n_visit - 1] == n_tiles - 1 ? tile - last_tile_points : 0));
}


/* About how many bounds a half's plan takes: the groups and, looked into,
 * the tiles near it (about the block's own list); every tile without
 * groups (kde_tiles_to_visit_grouped). */
static double refine_plan_bounds(const block_work *w, int64_t n_visit)
{
  const int64_t n_groups = w->groups != NULL ? w->groups->n_groups : 0;
  return n_groups > 0 ? (double) (n_groups + n_visit) : (double) w->n_tiles;
}

/* The squared diagonal of the box of the queries rows[0 .. len).
 * box: 2 * dim doubles of scratch. */
static double rows_reach2(const kde_query_set *query, int64_t dim, const int64_t *rows,
                          int64_t len, double *box)
{
  double reach2 = 0.0;
  rows_box(query, dim, rows, len, box, box + dim);
  for (int64_t k = 0; k < dim; k++) reach2 += (box[dim + k] - box[k]) * (box[dim + k] - box[k]);
  return reach2;
}


/* The block rows[0 .. len) with its plan's tiles visit[0 .. n_visit),
 * split while splitting pays (REFINE_*): each part goes to emit(); returns
 * the pairs of all of them. A split's halves are k-d halves: the queries'
 * order sorts each block down to single points. */
static double refine_block(const block_work *w, const int64_t *rows, int64_t len,
                           const int64_t *visit, int64_t n_visit, int level, unit_fn emit,
                           void *ctx)
{
  const double pairs = (double) len * listed_points(w->train, visit, n_visit, w->tile, w->n_tiles);
  double reach2 = 0.0;
  if (w->plan != NULL && len > 1 && level < REFINE_LEVELS &&
      (1.0 - REFINE_GAIN) * pairs >= 2.0 * REFINE_PLAN_PAIRS * refine_plan_bounds(w, n_visit) &&
      (reach2 = rows_reach2(w->query, w->train->dim, rows, len, w->plan_scratch)) >=
          REFINE_MIN_REACH2) {
    const int64_t half = len / 2;
    int64_t *left = w->halves + 2 * level * w->n_tiles, *right = left + w->n_tiles;
    const int64_t n_left = block_tiles(w->plan, w->groups, w->query, rows, half, w->n_tiles,
                                       w->plan_scratch, left);
    const int64_t n_right = block_tiles(w->plan, w->groups, w->query, rows + half, len - half,
                                        w->n_tiles, w->plan_scratch, right);
    const double halves_pairs =
        (double) half * listed_points(w->train, left, n_left, w->tile, w->n_tiles) +
        (double) (len - half) * listed_points(w->train, right, n_right, w->tile, w->n_tiles);
    if (halves_pairs <= REFINE_GAIN * pairs) {
      return refine_block(w, rows, half, left, n_left, level + 1, emit, ctx) +
             refine_block(w, rows + half, len - half, right, n_right, level + 1, emit, ctx);
    }
    /* halves as wide as the block (a few queries scattered over the data)
     * can still leave single queries narrow: each its own plan, made twice
     * (counted, then kept) where that pays */
    if (level == 0 && len > 2 && reach2 >= REFINE_SCATTERED_REACH2 &&
        (1.0 - REFINE_GAIN) * pairs >=
            2.0 * (double) len * REFINE_PLAN_PAIRS * refine_plan_bounds(w, n_visit)) {
      double single_pairs = 0.0;
      for (int64_t i = 0; i < len; i++) {
        const int64_t n_one = block_tiles(w->plan, w->groups, w->query, rows + i, 1, w->n_tiles,
                                          w->plan_scratch, left);
        single_pairs += listed_points(w->train, left, n_one, w->tile, w->n_tiles);
      }
      if (single_pairs <= REFINE_GAIN * pairs) {
        for (int64_t i = 0; i < len; i++) {
          const int64_t n_one = block_tiles(w->plan, w->groups, w->query, rows + i, 1,
                                            w->n_tiles, w->plan_scratch, left);
          emit(ctx, rows + i, 1, left, n_one);
        }
        return single_pairs;
      }
    }
  }
  emit(ctx, rows, len, visit, n_visit);
  return pairs;
}

/* The block of QUERY_BLOCK queries that starts at sorted row `first`:
 * its plan (into visit, n_tiles entries) and its splits, each part to
 * emit(); returns the pairs. */
double kde_cpu_plan_block(const block_work *w, const int64_t *query_order, int64_t first,
                         int64_t m, int64_t *visit, unit_fn emit, void *ctx)
{
  const int64_t len = kde_cpu_block_length(first, m);
  const int64_t *rows = query_order + first;
  const int64_t n_visit =
      block_tiles(w->plan, w->groups, w->query, rows, len, w->n_tiles, w->plan_scratch, visit);
  return refine_block(w, rows, len, visit, n_visit, 0, emit, ctx);
}


