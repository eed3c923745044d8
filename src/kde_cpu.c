/*
 * CPU backend: fused, tiled kernel density evaluation with an online
 * log-sum-exp per query, OpenMP over blocks of queries, float64 throughout.
 * This file drives it: the tiles' boxes and weights, the queries' order,
 * the blocks shared among the threads (or, for a few blocks, their tiles),
 * interrupts; cpu_split.c plans and splits a block, cpu_block.c evaluates
 * one.
 *
 * Memory is O(n + m): per thread, one tile of squared distances and one
 * block of query coordinates. The n x m kernel matrix is never formed.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>

#include "cpu_block.h"
#include "kde_backend.h"
#include "prune.h"
#include "spatial.h"
#include "slices.h"
#include "threads.h"
#include "whiten.h"
#include <kdegpu/kernels.h>

/* At most this many query blocks (a few queries against a large fit): each
 * block's tiles are shared out in parts, so that every thread works (one
 * block of 16 queries took one thread), about FEW_ITEMS parts in all, each
 * at least FEW_MIN_TILES tiles. The parts depend on the blocks and tiles
 * alone, never the thread count: the results do not either. */
#define FEW_BLOCKS 32
#define FEW_ITEMS 128
#define FEW_MIN_TILES 16

void kde_cpu_tiles_free(kde_cpu_tiles *tiles)
{
  free(tiles->lo);
  free(tiles->hi);
  free(tiles->log_weight);
  free(tiles->log_rest);
  free(tiles->scale_lo);
  free(tiles->scale_hi);
  free(tiles->residual);
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
  double *whitened_lo;   /* the offset mode's: what their rounding lost */
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
  free(b->whitened_lo);
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
  kde_cpu_evaluate_block(w->train->kernel, w->train, w->query, rows, len, visit, n_visit,
                          w->tile, w->chunk, w->residual, w->scratch,
                          c->state + (rows - c->block_rows));
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
  const int64_t chunk = kde_cpu_chunk(dim);
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

  /* the offset mode (kde_backend.h): where the tiles have it; queries
   * whitened here keep what their rounding lost (query_lo) */
  const float *residual = spatial && tiles != NULL ? tiles->residual : NULL;
  if (query->transform != NULL) {
    CPU_ALLOC(buf.whitened, m * dim);
    kde_whiten(query->query, m, dim, query->center, query->transform, n_threads,
               buf.whitened);
    if (residual != NULL) {
      CPU_ALLOC(buf.whitened_lo, m * dim);
      kde_whiten_residual(query->query, m, dim, query->center, query->transform, n_threads,
                          buf.whitened, buf.whitened_lo);
    }
    whitened_query = *query;
    whitened_query.query = buf.whitened;
    whitened_query.query_lo = buf.whitened_lo; /* NULL outside the offset mode */
    whitened_query.center = whitened_query.transform = NULL;
    query = &whitened_query;
  }

  /* Queries in blocks of nearby points: in a k-d order of their own, or,
   * leaving one out, in the training set's (already spatial) order. */
  CPU_ALLOC(buf.query_order, m);
  if (spatial && !query->leave_one_out) {
    /* the order only: the evaluation reads the queries through it */
    CPU_ALLOC(buf.sorted, m * dim);
    kde_copy_bytes(buf.sorted, query->query, (size_t) (m * dim) * sizeof(double), n_threads);
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
    plan.centroid = plan.spread2 = NULL; /* the CPU plans blocks of queries only */
    plan.log_lower_factor = kde_discrete_log_lower_factor(train);
    plan.tolerance = query->tolerance;
    plan.leave_one_out = query->leave_one_out;
  }

  /* per thread: distances and exponents of a tile, the block's points,
   * (mixed data) a tile's log weights and the block's codes, then (from
   * plan_at) the block's box and the pruning scratch; and the lists of
   * tiles to visit, the block's and its halves' */
  const int64_t plan_at = kde_cpu_block_scratch(dim, chunk, train->n_discrete);
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
                             residual, NULL, NULL, NULL};
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
      pairs += kde_cpu_plan_block(&work, buf.query_order, block * QUERY_BLOCK, m,
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
          kde_cpu_evaluate_block(train->kernel, train, query, buf.query_order + u->first,
                                  u->len, u->visit + from, to - from, tile, chunk,
                                  residual,
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
          const int64_t first = block * QUERY_BLOCK, block_len = kde_cpu_block_length(first, m);
          const int64_t *rows = buf.query_order + first;
          kde_lse state[QUERY_BLOCK];
          evaluate_ctx ctx = {&work, rows, state};
          pairs += kde_cpu_plan_block(&work, buf.query_order, first, m, buf.visit + thread * n_tiles,
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
