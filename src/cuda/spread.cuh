/*
 * spread.cuh: an anchored model's spread layout (spread.cu).
 */
#ifndef KDEGPU_CUDA_SPREAD_CUH
#define KDEGPU_CUDA_SPREAD_CUH

#include "kde_backend.h"
#include "kde_cuda.h"
#include "kde_status.h"
#include "unit_spread.h"

namespace kdegpu {

/* The training set in the spread layout: n_positions points, null ones
 * (weight 0, coordinates of their unit's first point) where a split run's
 * unit is not full; `set` points at the arrays here. */
struct spread_set {
  kde_unit_spread layout; /* n_positions 0: the plain layout serves */
  kde_training_set set;
  double *train, *weight, *log_weight, *inv_scale2, *codes;
  float *residual;
};

/* The layout for `train` (kde_unit_spread_make at the widths above) and,
 * where it splits runs, the training set in it. 0, or -1 with the status
 * set (nothing left allocated). */
int spread_training_set(const kde_training_set *train, spread_set *out, kde_status *status);

/* Frees the arrays (not the layout, which the model keeps). */
void spread_set_free(spread_set *s);

/* Leave-one-out's queries, the training points, in the model's spread
 * layout (one per position: a null position's query is its unit's first
 * point, whose result is dropped), and room for their results. */
struct spread_queries_t {
  kde_query_set set;
  double *query, *query_lo, *codes, *out;
};
int spread_queries(const kde_cuda_model *model, const kde_query_set *query,
                   spread_queries_t *out, kde_status *status);
void spread_queries_free(spread_queries_t *q);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_SPREAD_CUH */
