/*
 * Which training tiles a block of queries must visit (prune.c): the proven
 * bounds behind `tolerance` (kde_backend.h).
 */
#ifndef KDEGPU_PRUNE_H
#define KDEGPU_PRUNE_H

#include <stdint.h>

/* What the decision needs to know of the training tiles. */
typedef struct {
  int kernel;
  int64_t dim;
  int64_t n_tiles;
  const double *lo, *hi;          /* n_tiles x dim boxes, tile-major */
  const double *log_weight;       /* log of each tile's total weight */
  const double *log_weight_rest;  /* log(total - largest weight): what is
                                     left of a tile without one point */
  double tolerance;               /* relative; 0: skip only exact zeros */
  int leave_one_out;
} kde_prune_plan;

/* The tiles (ascending indices, written to visit[]) that the queries in
 * the box [q_lo, q_hi] must visit so that each one's kernel sum is within
 * relative `tolerance` of the full sum (exactly the full sum for compact
 * kernels, whose skipped tiles contribute 0); returns their number.
 * scratch: 2 * n_tiles doubles. */
int64_t kde_tiles_to_visit(const kde_prune_plan *plan, const double *q_lo,
                           const double *q_hi, double *scratch, int64_t *visit);

#endif
