/*
 * The CPU backend's pieces, driven by kde_cpu.c: one query block against
 * its listed tiles (cpu_block.c) and a block's plan and splits
 * (cpu_split.c).
 */
#ifndef KDEGPU_CPU_BLOCK_H
#define KDEGPU_CPU_BLOCK_H

#include <stdint.h>

#include "kde_backend.h"
#include "prune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queries that share one pass over a training tile: the tile stays in L1
 * while this many queries read it; also the block whose box decides which
 * tiles it visits. */
#define QUERY_BLOCK KDE_QUERY_BLOCK
/* A block splits at most this many times (QUERY_BLOCK = 16 = 2^4). */
#define REFINE_LEVELS 4

/* Training points read per pass (they and their distances stay in L1). */
int64_t kde_cpu_chunk(int64_t dim);
/* Doubles of scratch kde_cpu_evaluate_block takes. */
int64_t kde_cpu_block_scratch(int64_t dim, int64_t chunk, int64_t n_discrete);

/* The queries query_rows[0 .. block_len) (at most QUERY_BLOCK; leaving one
 * out, also the training point each query is) against the training tiles
 * visit[0 .. n_visit) (tile t holds points [t * tile, (t + 1) * tile)),
 * read in chunks of `chunk` points: each query's state into state[].
 * residual: NULL, or the offset mode's (kde_backend.h's kde_cpu_tiles):
 * the points' residuals; the queries' are qs->query_lo (NULL: none, or
 * where the queries are the training set itself, the points'). */
void kde_cpu_evaluate_block(int kernel, const kde_training_set *t, const kde_query_set *qs,
                            const int64_t *query_rows, int64_t block_len,
                            const int64_t *visit, int64_t n_visit, int64_t tile,
                            int64_t chunk, const float *residual, double *scratch,
                            kde_lse *state);

/* The queries of the block that starts at sorted row `first`. */
static inline int64_t kde_cpu_block_length(int64_t first, int64_t m)
{
  return first + QUERY_BLOCK < m ? QUERY_BLOCK : m - first;
}

/* What the evaluation of a block reads and writes on one thread. */
typedef struct {
  const kde_training_set *train;
  const kde_query_set *query;
  const kde_prune_plan *plan; /* NULL: every tile */
  const kde_prune_groups *groups;
  int64_t n_tiles, tile, chunk;
  const float *residual; /* NULL, or the offset mode's */
  double *scratch;      /* evaluate_block_dispatch's */
  double *plan_scratch; /* block_tiles' */
  int64_t *halves;      /* 2 * REFINE_LEVELS lists of n_tiles */
} block_work;

/* What becomes of each of a block's parts after the splits (the queries
 * rows[0 .. len), their tiles visit[0 .. n_visit)): evaluated at once, or
 * kept for the few-blocks path. */
typedef void (*unit_fn)(void *ctx, const int64_t *rows, int64_t len, const int64_t *visit,
                        int64_t n_visit);

/* The block of QUERY_BLOCK queries that starts at sorted row `first`:
 * its plan (into visit, n_tiles entries) and its splits, each part to
 * emit(); returns the pairs. */
double kde_cpu_plan_block(const block_work *w, const int64_t *query_order, int64_t first,
                          int64_t m, int64_t *visit, unit_fn emit, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_CPU_BLOCK_H */
