/*
 * CPU backend: fused, tiled kernel density evaluation with an online
 * log-sum-exp per query, OpenMP over blocks of queries, float64 throughout.
 *
 * Memory is O(n + m): per thread, one tile of squared distances and one
 * block of query coordinates. The n x m kernel matrix is never formed.
 */
/* The vector loops below select between values (compact support, zero
 * weights, underflow); GCC vectorises such selects only when it may assume
 * that floating-point operations do not trap and that sqrt need not set
 * errno. Neither changes a computed value. Set here rather than in
 * Makevars so the build flags stay portable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>

#include "kde_backend.h"
#include "vector_math.h"
#include "prune.h"
#include "spatial.h"
#include "slices.h"
#include "threads.h"
#include "whiten.h"
#include <kdegpu/kernels.h>

/* Queries that share one pass over a training tile: the tile stays in L1
 * while this many queries read it; also the block whose box decides which
 * tiles it visits. */
#define QUERY_BLOCK KDE_QUERY_BLOCK

/* At most this many query blocks (a few queries against a large fit): each
 * block's tiles are shared out in parts, so that every thread works (one
 * block of 16 queries took one thread), about FEW_ITEMS parts in all, each
 * at least FEW_MIN_TILES tiles. The parts depend on the blocks and tiles
 * alone, never the thread count: the results do not either. */
#define FEW_BLOCKS 32
#define FEW_ITEMS 128
#define FEW_MIN_TILES 16

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
#define REFINE_LEVELS 4 /* QUERY_BLOCK = 16 = 2^4 */

/* A chunk of training points read in one pass should fit in L1 with its
 * distances: chunk * (dim + 2) doubles of about 32 KiB, at least 64 points
 * so the vector loops stay long. */
#define CHUNK_BYTES (32 * 1024)
#define CHUNK_MIN 64
#define CHUNK_MAX 1024

/* Squared distances from one query to a tile of training points. */
static ALWAYS_INLINE void tile_squared_distances(const double *train,
                                                 int64_t n_train, int64_t dim,
                                                 int64_t tile_begin,
                                                 int64_t tile_len,
                                                 const double *query_point,
                                                 double *s2)
{
  const double *x0 = train + tile_begin;
  const double q0 = query_point[0];
#pragma omp simd
  for (int64_t j = 0; j < tile_len; j++) {
    double diff = x0[j] - q0;
    s2[j] = diff * diff;
  }
  for (int64_t k = 1; k < dim; k++) {
    const double *xk = train + k * n_train + tile_begin;
    const double qk = query_point[k];
#pragma omp simd
    for (int64_t j = 0; j < tile_len; j++) {
      double diff = xk[j] - qk;
      s2[j] += diff * diff;
    }
  }
}

/* Mixed data: the log weights of a chunk of training points times each
 * pair's discrete factors with one query (kde_training_set): p_k = 0 on a
 * match, mismatch[k] + per_level[k] * |c_q - c_x| otherwise. */
static ALWAYS_INLINE void discrete_log_weights(const kde_training_set *t,
                                               int64_t chunk_begin, int64_t chunk_len,
                                               const double *query_codes,
                                               double *log_weight)
{
  const int64_t n = t->n_train, k_n = t->n_discrete;
  memcpy(log_weight, t->log_weight + chunk_begin, (size_t) chunk_len * sizeof(double));
  for (int64_t k = 0; k < k_n; k++) {
    const double *codes = t->codes + k * n + chunk_begin;
    const double qk = query_codes[k];
    const double mismatch = t->discrete_penalty[k];
    const double per_level = t->discrete_penalty[k_n + k];
#pragma omp simd
    for (int64_t j = 0; j < chunk_len; j++) {
      const double distance = fabs(codes[j] - qk);
      /* a select, not a product: per_level * 0 is NaN at -inf */
      log_weight[j] += distance == 0 ? 0.0 : mismatch + per_level * distance;
    }
  }
}

/* One query against one tile, as a log-sum-exp state. `self` is the tile
 * position of the query's own training point under leave-one-out, -1
 * otherwise; that term is dropped exactly, not subtracted afterwards. */
static ALWAYS_INLINE kde_lse tile_state(int kernel, const double *s2,
                                        const double *weight,
                                        const double *log_weight,
                                        int64_t tile_len, int64_t self,
                                        double *exponent)
{
  if (kde_kernel_is_compact(kernel)) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < tile_len; j++) {
      double term = weight[j] * kde_profile(kernel, s2[j]);
      sum += (j == self) ? 0.0 : term;
    }
    return kde_lse_make(0.0, sum);
  }
  double tile_max = -INFINITY;
#pragma omp simd reduction(max : tile_max)
  for (int64_t j = 0; j < tile_len; j++) {
    double e = log_weight[j] + kde_log_profile(kernel, s2[j]);
    e = (j == self) ? -INFINITY : e;
    exponent[j] = e;
    tile_max = e > tile_max ? e : tile_max;
  }
  if (tile_max == -INFINITY) return kde_lse_empty();
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < tile_len; j++)
    sum += exp_nonpositive(exponent[j] - tile_max);
  return kde_lse_make(tile_max, sum);
}

/* The queries of one block, at most QUERY_BLOCK of them, against the
 * training tiles listed in `visit` (tile t holds points [t * tile,
 * (t + 1) * tile)). Consecutive listed tiles are one range of points, read
 * in chunks of `chunk` points that stay in L1 with their distances.
 * `query_rows` are the block's rows of the query matrix (leaving one out,
 * also the training point each query is). Writes each query's state to
 * state[]. */
static ALWAYS_INLINE void evaluate_query_block(int kernel,
                                               const kde_training_set *t,
                                               const kde_query_set *qs,
                                               const int64_t *query_rows,
                                               int64_t block_len,
                                               const int64_t *visit,
                                               int64_t n_visit, int64_t tile,
                                               int64_t chunk, double *scratch,
                                               kde_lse *state)
{
  const int64_t dim = t->dim, n = t->n_train, m = qs->n_query, k_n = t->n_discrete;
  double *s2 = scratch;                       /* chunk */
  double *exponent = scratch + chunk;         /* chunk */
  double *points = scratch + 2 * chunk;       /* QUERY_BLOCK x dim, by row */
  double *mixed_log_weight = points + QUERY_BLOCK * dim; /* chunk (mixed data) */
  double *codes = mixed_log_weight + chunk;   /* QUERY_BLOCK x k_n, by row */

  for (int64_t b = 0; b < block_len; b++) {
    state[b] = kde_lse_empty();
    for (int64_t k = 0; k < dim; k++)
      points[b * dim + k] = qs->query[query_rows[b] + k * m];
    for (int64_t k = 0; k < k_n; k++)
      codes[b * k_n + k] = qs->codes[query_rows[b] + k * m];
  }
  for (int64_t v = 0; v < n_visit;) {
    int64_t last = visit[v];
    const int64_t first = last;
    while (++v < n_visit && visit[v] == last + 1) last++;
    const int64_t range_end = (last + 1) * tile < n ? (last + 1) * tile : n;
    for (int64_t chunk_begin = first * tile; chunk_begin < range_end;
         chunk_begin += chunk) {
      const int64_t chunk_len =
          range_end - chunk_begin < chunk ? range_end - chunk_begin : chunk;
      for (int64_t b = 0; b < block_len; b++) {
        int64_t self = -1;
        if (qs->leave_one_out) {
          int64_t own = query_rows[b] - chunk_begin;
          if (own >= 0 && own < chunk_len) self = own;
        }
        tile_squared_distances(t->train, n, dim, chunk_begin, chunk_len,
                               points + b * dim, s2);
        if (t->inv_scale2 != NULL) { /* adaptive: kernels of radius lambda_j */
          const double *inv = t->inv_scale2 + chunk_begin;
#pragma omp simd
          for (int64_t j = 0; j < chunk_len; j++) s2[j] *= inv[j];
        }
        const double *log_weight = t->log_weight + chunk_begin;
        if (k_n > 0) {
          discrete_log_weights(t, chunk_begin, chunk_len, codes + b * k_n, mixed_log_weight);
          log_weight = mixed_log_weight;
        }
        kde_lse part = tile_state(kernel, s2, t->weight + chunk_begin, log_weight,
                                  chunk_len, self, exponent);
        state[b] = kde_lse_merge(state[b], part);
      }
    }
  }
}

/* The kernel becomes a compile-time constant in each case, so the profile's
 * switch folds away and every loop above vectorises. */
KDE_MULTIVERSION
static void evaluate_block_dispatch(int kernel, const kde_training_set *t,
                                    const kde_query_set *qs,
                                    const int64_t *query_rows, int64_t block_len,
                                    const int64_t *visit, int64_t n_visit,
                                    int64_t tile, int64_t chunk, double *scratch,
                                    kde_lse *state)
{
#define KDE_CASE(K)                                                         \
  case K:                                                                   \
    evaluate_query_block(K, t, qs, query_rows, block_len, visit, n_visit,   \
                         tile, chunk, scratch, state);                      \
    break;
  switch (kernel) {
    KDE_CASE(KDE_GAUSSIAN)
    KDE_CASE(KDE_EPANECHNIKOV)
    KDE_CASE(KDE_RECTANGULAR)
    KDE_CASE(KDE_TRIANGULAR)
    KDE_CASE(KDE_BIWEIGHT)
    KDE_CASE(KDE_COSINE)
    KDE_CASE(KDE_OPTCOSINE)
    KDE_CASE(KDE_EXPONENTIAL)
  default:
    break;
  }
#undef KDE_CASE
}

/* Training points read per pass: they and their distances stay in L1. */
static int64_t choose_chunk(int64_t dim)
{
  int64_t chunk = CHUNK_BYTES / (int64_t) ((dim + 2) * sizeof(double));
  if (chunk < CHUNK_MIN) chunk = CHUNK_MIN;
  if (chunk > CHUNK_MAX) chunk = CHUNK_MAX;
  return chunk - chunk % 8;
}

void kde_cpu_tiles_free(kde_cpu_tiles *tiles)
{
  free(tiles->lo);
  free(tiles->hi);
  free(tiles->log_weight);
  free(tiles->log_rest);
  free(tiles->scale_lo);
  free(tiles->scale_hi);
  kde_prune_groups_free(&tiles->groups);
  memset(tiles, 0, sizeof *tiles);
}

int kde_cpu_tiles_make(const kde_training_set *train, int threads, kde_cpu_tiles *tiles)
{
  const int64_t tile = train->tile_size, dim = train->dim;
  memset(tiles, 0, sizeof *tiles);
  if (tile < 1) return -1;
  tiles->n_tiles = (train->n_train + tile - 1) / tile;
  const size_t n_tiles = (size_t) tiles->n_tiles;
  tiles->lo = (double *) malloc(n_tiles * (size_t) dim * sizeof(double));
  tiles->hi = (double *) malloc(n_tiles * (size_t) dim * sizeof(double));
  tiles->log_weight = (double *) malloc(n_tiles * sizeof(double));
  tiles->log_rest = (double *) malloc(n_tiles * sizeof(double));
  if (train->inv_scale2 != NULL) {
    tiles->scale_lo = (double *) malloc(n_tiles * sizeof(double));
    tiles->scale_hi = (double *) malloc(n_tiles * sizeof(double));
  }
  if (tiles->lo == NULL || tiles->hi == NULL || tiles->log_weight == NULL ||
      tiles->log_rest == NULL ||
      (train->inv_scale2 != NULL && (tiles->scale_lo == NULL || tiles->scale_hi == NULL))) {
    kde_cpu_tiles_free(tiles);
    return -1;
  }
  kde_tile_boxes(train->train, train->n_train, dim, tile, threads, tiles->lo, tiles->hi);
  kde_tile_log_weights(train->weight, train->n_train, tile, threads, tiles->log_weight,
                       tiles->log_rest);
  if (train->inv_scale2 != NULL)
    kde_tile_boxes(train->inv_scale2, train->n_train, 1, tile, 1, tiles->scale_lo,
                   tiles->scale_hi);
  if (kde_prune_groups_make(dim, tiles->n_tiles, tiles->lo, tiles->hi, tiles->log_weight,
                            tiles->log_rest, &tiles->groups) != 0) {
    kde_cpu_tiles_free(tiles);
    return -1;
  }
  return 0;
}

/* Few blocks: each part of a block after its splits, kept with a copy of
 * its list, for the parts of every list to be shared among the threads. */
typedef struct {
  int64_t first, len; /* its queries: query_order[first .. first + len) */
  int64_t *visit, n_visit;
} few_unit;

/* What the evaluation allocates, freed together on every path. */
typedef struct {
  double *whitened;      /* the queries, whitened (when the backend does it) */
  int64_t *query_order;  /* queries in spatial order (or 0..m-1) */
  double *sorted;        /* the queries' copy that kde_kd_sort ordered */
  kde_cpu_tiles tiles;   /* made here when the caller has none */
  double *scratch;       /* per thread */
  int64_t *visit;        /* per thread: a block's tiles to visit */
  int64_t *halves;       /* per thread: the lists of split blocks' halves */
  kde_lse *parts;        /* few blocks: each part's states */
  few_unit *units;       /* few blocks: QUERY_BLOCK slots per block */
  int64_t *n_units;      /* few blocks: each block's units */
  int64_t *unit_slots;   /* few blocks: the units' slots, in order */
  int64_t n_blocks;      /* few blocks: how many (for the units' lists) */
} cpu_buffers;

static void free_buffers(cpu_buffers *b)
{
  free(b->whitened);
  free(b->query_order);
  free(b->sorted);
  kde_cpu_tiles_free(&b->tiles);
  free(b->scratch);
  free(b->visit);
  free(b->halves);
  free(b->parts);
  if (b->units != NULL && b->n_units != NULL)
    for (int64_t k = 0; k < b->n_blocks; k++)
      for (int64_t j = 0; j < b->n_units[k]; j++) free(b->units[k * QUERY_BLOCK + j].visit);
  free(b->units);
  free(b->n_units);
  free(b->unit_slots);
}

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

/* The queries of the block that starts at sorted row `first`. */
static inline int64_t block_length(int64_t first, int64_t m)
{
  return first + QUERY_BLOCK < m ? QUERY_BLOCK : m - first;
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

/* What the evaluation of a block reads and writes on one thread. */
typedef struct {
  const kde_training_set *train;
  const kde_query_set *query;
  const kde_prune_plan *plan; /* NULL: every tile */
  const kde_prune_groups *groups;
  int64_t n_tiles, tile, chunk;
  double *scratch;      /* evaluate_block_dispatch's */
  double *plan_scratch; /* block_tiles' */
  int64_t *halves;      /* 2 * REFINE_LEVELS lists of n_tiles */
} block_work;

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

/* What becomes of each of a block's parts after the splits (the queries
 * rows[0 .. len), their tiles visit[0 .. n_visit)): evaluated at once, or
 * kept for the few-blocks path. */
typedef void (*unit_fn)(void *ctx, const int64_t *rows, int64_t len, const int64_t *visit,
                        int64_t n_visit);

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
static double plan_block(const block_work *w, const int64_t *query_order, int64_t first,
                         int64_t m, int64_t *visit, unit_fn emit, void *ctx)
{
  const int64_t len = block_length(first, m);
  const int64_t *rows = query_order + first;
  const int64_t n_visit =
      block_tiles(w->plan, w->groups, w->query, rows, len, w->n_tiles, w->plan_scratch, visit);
  return refine_block(w, rows, len, visit, n_visit, 0, emit, ctx);
}

/* Thread `thread`'s block_work: `shared` with its scratch (scratch_per_thread
 * doubles of b->scratch, the plan's from plan_at) and its halves' lists. */
static block_work thread_work(const block_work *shared, const cpu_buffers *b, int thread,
                              int64_t scratch_per_thread, int64_t plan_at)
{
  block_work w = *shared;
  w.scratch = b->scratch + thread * scratch_per_thread;
  w.plan_scratch = w.scratch + plan_at;
  w.halves = b->halves + (int64_t) thread * 2 * REFINE_LEVELS * w.n_tiles;
  return w;
}

/* Many blocks: each part evaluated at once into its queries' states. */
typedef struct {
  const block_work *work;
  const int64_t *block_rows;
  kde_lse *state; /* the block's */
} evaluate_ctx;

static void evaluate_unit(void *ctx, const int64_t *rows, int64_t len, const int64_t *visit,
                          int64_t n_visit)
{
  const evaluate_ctx *c = (const evaluate_ctx *) ctx;
  const block_work *w = c->work;
  evaluate_block_dispatch(w->train->kernel, w->train, w->query, rows, len, visit, n_visit,
                          w->tile, w->chunk, w->scratch, c->state + (rows - c->block_rows));
}

typedef struct {
  few_unit *units; /* the block's, at most QUERY_BLOCK */
  int64_t count;
  const int64_t *order;
} keep_ctx;

static void keep_unit(void *ctx, const int64_t *rows, int64_t len, const int64_t *visit,
                      int64_t n_visit)
{
  keep_ctx *c = (keep_ctx *) ctx;
  few_unit *u = &c->units[c->count++];
  u->first = rows - c->order;
  u->len = len;
  u->n_visit = n_visit;
  u->visit = malloc((size_t) (n_visit > 0 ? n_visit : 1) * sizeof(int64_t));
  if (u->visit != NULL) memcpy(u->visit, visit, (size_t) n_visit * sizeof(int64_t));
}

void kde_cpu_log_density(const kde_training_set *train, const kde_cpu_tiles *tiles,
                         const kde_query_set *query, int threads,
                         kde_interrupt_probe interrupted, double *out,
                         kde_status *status)
{
  kde_status_clear(status);
  if (train->kernel < 0 || train->kernel >= KDE_N_KERNELS ||
      train->n_train < 1 || train->dim < 1 || query->n_query < 0 ||
      (query->leave_one_out && query->n_query != train->n_train) ||
      train->tile_size < 0 || !(query->tolerance >= 0) ||
      (train->n_discrete > 0 && (train->kernel != KDE_GAUSSIAN || query->codes == NULL))) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CPU backend");
    return;
  }
  if (query->n_query == 0) return;

  const int64_t m = query->n_query, dim = train->dim;
  /* before pruning: a small job stays on one thread */
  const int n_threads =
      kde_thread_count_for(threads, (double) m * (double) train->n_train * (double) dim);
  const int spatial = train->tile_size > 0;
  const int64_t chunk = choose_chunk(dim);
  const int64_t tile = spatial ? train->tile_size : chunk;
  const int64_t n_tiles = (train->n_train + tile - 1) / tile;
  cpu_buffers buf = {0};
  kde_query_set whitened_query;

#define CPU_ALLOC(ptr, count)                                                \
  do {                                                                       \
    (ptr) = malloc((size_t) (count) * sizeof *(ptr));                        \
    if ((ptr) == NULL) {                                                     \
      kde_status_set(status, KDE_ERR_ALLOC,                                  \
                     "could not allocate CPU memory for the evaluation");   \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

  if (query->transform != NULL) {
    CPU_ALLOC(buf.whitened, m * dim);
    kde_whiten(query->query, m, dim, query->center, query->transform,
               n_threads, buf.whitened);
    whitened_query = *query;
    whitened_query.query = buf.whitened;
    whitened_query.center = whitened_query.transform = NULL;
    query = &whitened_query;
  }

  /* Queries in blocks of nearby points: in a k-d order of their own, or,
   * leaving one out, in the training set's (already spatial) order. */
  CPU_ALLOC(buf.query_order, m);
  if (spatial && !query->leave_one_out) {
    /* the order only: the evaluation reads the queries through it */
    CPU_ALLOC(buf.sorted, m * dim);
    memcpy(buf.sorted, query->query, (size_t) (m * dim) * sizeof(double));
    /* blocks of QUERY_BLOCK, each in a k-d order down to single points
     * (their halves are what a wide block splits into: refine_block) */
    kde_kd_sort(buf.sorted, m, dim, KDE_QUERY_BLOCK, 1, n_threads, buf.query_order);
    free(buf.sorted);
    buf.sorted = NULL;
  } else {
    for (int64_t i = 0; i < m; i++) buf.query_order[i] = i;
  }

  kde_prune_plan plan = {0};
  if (spatial) {
    if (tiles == NULL) {
      if (kde_cpu_tiles_make(train, n_threads, &buf.tiles) != 0) {
        kde_status_set(status, KDE_ERR_ALLOC,
                       "could not allocate CPU memory for the evaluation");
        goto cleanup;
      }
      tiles = &buf.tiles;
    }
    if (tiles->n_tiles != n_tiles) {
      kde_status_set(status, KDE_ERR_ARGUMENT,
                     "internal: the tiles are not the training set's");
      goto cleanup;
    }
    plan.kernel = train->kernel;
    plan.dim = dim;
    plan.n_tiles = n_tiles;
    plan.lo = tiles->lo;
    plan.hi = tiles->hi;
    plan.log_weight = tiles->log_weight;
    plan.log_weight_rest = tiles->log_rest;
    plan.inv_scale2_lo = tiles->scale_lo;
    plan.inv_scale2_hi = tiles->scale_hi;
    plan.log_lower_factor = kde_discrete_log_lower_factor(train);
    plan.tolerance = query->tolerance;
    plan.leave_one_out = query->leave_one_out;
  }

  /* per thread: distances and exponents of a tile, the block's points,
   * (mixed data) a tile's log weights and the block's codes, then (from
   * plan_at) the block's box and the pruning scratch; and the lists of
   * tiles to visit, the block's and its halves' */
  const int64_t mixed = train->n_discrete > 0 ? chunk + QUERY_BLOCK * train->n_discrete : 0;
  const int64_t plan_at = 2 * chunk + QUERY_BLOCK * dim + mixed;
  const int64_t scratch_per_thread = plan_at + 2 * dim + 2 * n_tiles;
  const int64_t n_blocks = (m + QUERY_BLOCK - 1) / QUERY_BLOCK;
  const int few = n_blocks <= FEW_BLOCKS && !query->leave_one_out;
  const kde_prune_plan *block_plan = spatial ? &plan : NULL;
  const kde_prune_groups *groups = spatial ? &tiles->groups : NULL;
  CPU_ALLOC(buf.scratch, (int64_t) n_threads * scratch_per_thread);
  CPU_ALLOC(buf.visit, (int64_t) n_threads * n_tiles);

  /* Pairs evaluated: each block's queries times the points of its tiles. */
  double pairs = 0.0;
  CPU_ALLOC(buf.halves, (int64_t) n_threads * 2 * REFINE_LEVELS * n_tiles);
  /* what every thread's blocks share; thread_work adds its scratch */
  const block_work shared = {train, query, block_plan, groups, n_tiles, tile, chunk,
                             NULL, NULL, NULL};
  if (few) {
    /* each block's plan and splits (units), then every unit's list in parts */
    buf.n_blocks = n_blocks;
    buf.units = calloc((size_t) (n_blocks * QUERY_BLOCK), sizeof(few_unit));
    buf.n_units = calloc((size_t) n_blocks, sizeof(int64_t));
    if (buf.units == NULL || buf.n_units == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC, "could not allocate CPU memory for the evaluation");
      goto cleanup;
    }
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(+ : pairs)
    for (int64_t block = 0; block < n_blocks; block++) {
      const int thread = kde_thread_index();
      const block_work work = thread_work(&shared, &buf, thread, scratch_per_thread, plan_at);
      keep_ctx keep = {buf.units + block * QUERY_BLOCK, 0, buf.query_order};
      pairs += plan_block(&work, buf.query_order, block * QUERY_BLOCK, m,
                          buf.visit + thread * n_tiles, keep_unit, &keep);
      buf.n_units[block] = keep.count;
    }
    /* the units in order (their slots), and their parts: part p of a unit
     * is its list's entries [p L / parts, (p + 1) L / parts) */
    CPU_ALLOC(buf.unit_slots, n_blocks * QUERY_BLOCK);
    int64_t n_units = 0;
    for (int64_t block = 0; block < n_blocks; block++) {
      for (int64_t j = 0; j < buf.n_units[block]; j++) {
        if (buf.units[block * QUERY_BLOCK + j].visit == NULL) {
          kde_status_set(status, KDE_ERR_ALLOC,
                         "could not allocate CPU memory for the evaluation");
          goto cleanup;
        }
        buf.unit_slots[n_units++] = block * QUERY_BLOCK + j;
      }
    }
    int64_t parts = FEW_ITEMS / n_units;
    if (parts > n_tiles / FEW_MIN_TILES) parts = n_tiles / FEW_MIN_TILES;
    if (parts < 1) parts = 1;
    CPU_ALLOC(buf.parts, n_units * parts * QUERY_BLOCK);
    kde_slice slice = {0, n_units * parts, 0};
    while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads)
      {
        const int thread = kde_thread_index();
        int64_t item, item_end;
        while (kde_slice_claim(&slice, 1, &item, &item_end)) {
          const few_unit *u = &buf.units[buf.unit_slots[item / parts]];
          const int64_t part = item % parts;
          const int64_t from = u->n_visit * part / parts, to = u->n_visit * (part + 1) / parts;
          evaluate_block_dispatch(train->kernel, train, query, buf.query_order + u->first,
                                  u->len, u->visit + from, to - from, tile, chunk,
                                  buf.scratch + thread * scratch_per_thread,
                                  buf.parts + item * QUERY_BLOCK);
        }
      }
      if (slice.next < slice.end && interrupted != NULL &&
          interrupted(kde_slice_done(&slice))) {
        kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
        goto cleanup;
      }
    }
    /* each query's parts merged in order */
    for (int64_t k = 0; k < n_units; k++) {
      const few_unit *u = &buf.units[buf.unit_slots[k]];
      for (int64_t b = 0; b < u->len; b++) {
        kde_lse state = kde_lse_empty();
        for (int64_t part = 0; part < parts; part++)
          state = kde_lse_merge(state, buf.parts[(k * parts + part) * QUERY_BLOCK + b]);
        out[buf.query_order[u->first + b]] = kde_lse_log(state) + query->log_const;
      }
    }
  } else {
    kde_slice slice = {0, n_blocks, 0};
    while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads) reduction(+ : pairs)
      {
        const int thread = kde_thread_index();
        const block_work work = thread_work(&shared, &buf, thread, scratch_per_thread, plan_at);
        int64_t block, block_end;
        while (kde_slice_claim(&slice, 1, &block, &block_end)) {
          const int64_t first = block * QUERY_BLOCK, block_len = block_length(first, m);
          const int64_t *rows = buf.query_order + first;
          kde_lse state[QUERY_BLOCK];
          evaluate_ctx ctx = {&work, rows, state};
          pairs += plan_block(&work, buf.query_order, first, m, buf.visit + thread * n_tiles,
                              evaluate_unit, &ctx);
          for (int64_t b = 0; b < block_len; b++)
            out[rows[b]] = kde_lse_log(state[b]) + query->log_const;
        }
      }
      if (slice.next < slice.end && interrupted != NULL &&
          interrupted(kde_slice_done(&slice))) {
        kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
        goto cleanup;
      }
    }
  }
  if (query->pairs_share != NULL)
    *query->pairs_share = pairs / ((double) m * (double) train->n_train);

cleanup:
  free_buffers(&buf);
#undef CPU_ALLOC
}
