/*
 * The C interface between the .Call glue (api.c) and the backends
 * (kde_cpu.c, kde_cuda.cu). Backends see plain C arrays, never a SEXP, and
 * report failure through kde_status; only api.c turns a status into an R
 * error.
 */
#ifndef KDEGPU_KDE_BACKEND_H
#define KDEGPU_KDE_BACKEND_H

#include <stdint.h>

#include "kde_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Polled on the calling thread between chunks of work with the fraction of
 * the evaluation done so far (0..1), which api.c turns into a progress bar
 * for long interactive runs; returns non-zero when the user asked to stop.
 * Never longjmps (see api.c). */
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
} kde_training_set;

typedef struct {
  int64_t n_query;
  const double *query;       /* n_query x dim */
  /* Whitening that the backend applies to the queries first,
   * z = (query - center) transform (center: dim values, transform: dim x dim,
   * column-major), so the caller need not hold a whitened copy. Both NULL
   * when the queries are whitened already. */
  const double *center;
  const double *transform;
  double log_const;          /* added to every result */
  /* Leave one out: the queries are the training points and the term
   * j == i is excluded exactly (not subtracted afterwards). */
  int leave_one_out;
} kde_query_set;

/* CPU backend (kde_cpu.c). Writes n_query log-densities to `out`. */
void kde_cpu_log_density(const kde_training_set *train,
                         const kde_query_set *query, int threads,
                         kde_interrupt_probe interrupted, double *out,
                         kde_status *status);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_KDE_BACKEND_H */
