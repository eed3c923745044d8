/*
 * The C interface between the .Call glue (api.c) and the backends
 * (kde_cpu.c, src/cuda/). Backends see plain C arrays, never a SEXP, and
 * report failure through kde_status; only api_glue.c turns a status into an R
 * error.
 */
#ifndef KDEGPU_KDE_BACKEND_H
#define KDEGPU_KDE_BACKEND_H

#include <stdint.h>

#include "kde_status.h"
#include "prune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Polled on the calling thread between chunks of work with the fraction of
 * the evaluation done so far (0..1), which api_glue.c turns into a progress bar
 * for long interactive runs; returns non-zero when the user asked to stop.
 * Never longjmps (see api_glue.c). */
typedef int (*kde_interrupt_probe)(double done);

/*
 * One evaluation: log f(q_i) - log_const = log sum_j w_j k(|q_i - x_j|^2)
 * for the rows q_i of `query`. Coordinates are whitened and divided by the
 * kernel's radius scale, so s^2 = |q_i - x_j|^2 (see kernels.h): the
 * training points by the caller, the queries by the caller or, given a
 * `transform`, by the backend.
 *
 * Matrices are column-major, as R stores them: element (row r, col c) of an
 * n x d matrix is at [r + c * n]. All counts are 64-bit.
 */
typedef struct {
  int kernel;                /* kde_kernel */
  int64_t n_train;           /* >= 1 */
  int64_t dim;               /* >= 1 */
  const double *train;       /* n_train x dim */
  const double *weight;      /* n_train, >= 0, sum 1 */
  const double *log_weight;  /* n_train, log(weight), -inf where weight 0 */
  /* NULL, or the sample-point adaptive estimator's per-point scales as
   * 1 / lambda_j^2: point j's kernel is k(|q - x_j|^2 / lambda_j^2). Its
   * normalisation, lambda_j^-d, is the caller's: already in `weight`
   * (whose sum stays 1, the rest of the constant in log_const). */
  const double *inv_scale2;
  /* KDE_TILE_POINTS when the points are in a spatial (k-d) order whose runs
   * of that many points are compact tiles (kde_kd_sort, at fit time), so
   * that an evaluation may skip tiles that provably cannot matter; 0 when
   * they are in no particular order (every tile is visited). */
  int64_t tile_size;
  /* CPU threads the CUDA backend may use for its host work (0: all that
   * are allowed); the CPU backend takes its threads as an argument. */
  int host_threads;
  /* Discrete columns (mixed data, R/mixed.R; 0: none, Gaussian kernel
   * only). Each pair's term is multiplied by exp(sum_k p_k), p_k = 0 where
   * the pair's codes in column k match and mismatch[k] + per_level[k] *
   * |c_q - c_x| where they differ (the discrete kernels relative to a
   * match; at most 0, -inf allowed). The skipping's bounds hold with them:
   * the upper bounds ignore factors that are at most 1, and the lower
   * bound takes every column's smallest, worst[k]. */
  int64_t n_discrete;
  const double *codes;              /* n_train x n_discrete: level ranks */
  const double *discrete_penalty;   /* n_discrete x 3, column-major:
                                       mismatch, per_level, worst */
  /* NULL, or what `train`'s whitening lost to rounding (n_train x dim,
   * arg_fit_residual): the CUDA backend's anchored double models store
   * each point from train + residual (pack.cu) and keep it for the
   * training points as queries (kde_cuda_log_density). */
  const float *residual;
} kde_training_set;

/* log of the smallest factor a pair's discrete columns can give, the sum
 * of their worst penalties (prune.h's log_lower_factor); 0 without. */
static inline double kde_discrete_log_lower_factor(const kde_training_set *t)
{
  double sum = 0.0;
  for (int64_t k = 0; k < t->n_discrete; k++) sum += t->discrete_penalty[2 * t->n_discrete + k];
  return sum;
}

/* Points per spatial tile of the training set: the CPU backend's unit of
 * skipping, and the CUDA backend's unit of padding and splitting (kUnit),
 * so that one fit-time order serves both. */
#define KDE_TILE_POINTS 256

/* Points per spatial block of queries in the CPU backend: what one pass
 * over a training tile serves (QUERY_BLOCK in kde_cpu.c). */
#define KDE_QUERY_BLOCK 16

typedef struct {
  int64_t n_query;
  const double *query;       /* n_query x dim */
  /* Whitening that the backend applies to the queries first,
   * z = (query - center) transform (center: dim values, transform: dim x dim,
   * column-major), so the caller need not hold a whitened copy. Both NULL
   * when the queries are whitened already. */
  const double *center;
  const double *transform;
  /* NULL, or what whitened queries (center and transform NULL) lost to
   * rounding, n_query x dim, rounded to float (kde_whiten_residual): the
   * CUDA backend's models with their points' residuals (kde_training_set)
   * add it, as they whiten queries given raw to twice double's precision;
   * so does the CPU backend's offset mode (kde_cpu_tiles), whitening raw
   * queries the same way. */
  const double *query_lo;
  /* n_query x n_discrete: the queries' level ranks (NULL when the
   * training set has no discrete columns) */
  const double *codes;
  double log_const;          /* added to every result */
  /* Leave one out: the queries are the training points and the term
   * j == i is excluded exactly (not subtracted afterwards). */
  int leave_one_out;
  /* Tiles whose kernel values are provably 0 at every query of a block are
   * skipped; with tolerance > 0, Gaussian and exponential tiles whose
   * proven upper bounds add up to at most `tolerance` times a proven lower
   * bound of each query's sum are skipped too, so every result is within
   * relative `tolerance` of the full sum (prune.c). 0: the full sum. Needs
   * a spatially ordered training set (tile_size > 0). */
  double tolerance;
  int host_threads;          /* as in kde_training_set */
  /* Out, when not NULL: the share of the n_query x n_train pairs that the
   * evaluation computed (1 without pruning; the CUDA backend counts its
   * padded units of 256 points, of its layout's positions: n_train
   * rounded up to 256, or more where units were split, unit_spread.h). */
  double *pairs_share;
} kde_query_set;

/* What the CPU backend's skipping reads of a spatially ordered training
 * set (kde_cpu_tiles_make): per tile its box (n_tiles x dim, tile-major),
 * its log weights (prune.h), and an adaptive fit's range of 1 / lambda^2.
 *
 * The offset mode (kde_cpu_offsets_make, cpu_offsets.c): whitened
 * coordinates keep eps |z| of precision, which for data thousands of
 * bandwidths from their centre costs 1e-13 of a density (maps, GPS). With
 * `residual` (per point the exact whitened coordinate minus train's, from
 * the raw data, n_train x dim, column-major) a block's pairs are formed
 * from coordinates relative to one of its queries, both sides' residuals
 * added (the queries' from kde_whiten_residual): rounding then follows the
 * distances from the queries, not from the centre. NULL otherwise. */
typedef struct {
  int64_t n_tiles;
  double *lo, *hi, *log_weight, *log_rest;
  double *scale_lo, *scale_hi; /* NULL unless adaptive */
  kde_prune_groups groups;     /* for the test of whether a plan can pay */
  float *residual;             /* the offset mode's, or NULL */
} kde_cpu_tiles;

/* 0, or -1 (out of memory, nothing left allocated). */
int kde_cpu_tiles_make(const kde_training_set *train, int threads, kde_cpu_tiles *tiles);
void kde_cpu_tiles_free(kde_cpu_tiles *tiles);

/* The offset mode for tiles made of `train`, with its points' residuals
 * (arg_fit_residual: made where the whitened points reach
 * KDE_OFFSET_MIN_EXTENT bandwidths from the centre), which the tiles then
 * own: the boxes and groups widened to the exact points
 * (kde_tile_boxes_widen). 1 made, 0 not (the residual freed), -1 out of
 * memory (nothing made, the residual freed). */
#define KDE_OFFSET_MIN_EXTENT 256.0
int kde_cpu_offsets_make(const kde_training_set *train, float *residual, kde_cpu_tiles *tiles);

/* CPU backend (kde_cpu.c). Writes n_query log-densities to `out`. `tiles`:
 * the training set's, made once per fit (cpu_model.c), or NULL to make
 * them for this evaluation (a spatially ordered set only). */
void kde_cpu_log_density(const kde_training_set *train, const kde_cpu_tiles *tiles,
                         const kde_query_set *query, int threads,
                         kde_interrupt_probe interrupted, double *out,
                         kde_status *status);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_KDE_BACKEND_H */
