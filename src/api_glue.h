/* What the .Call entry points share (api_glue.c): argument checkers that
 * raise an R error naming the argument, the progress bar and interrupt
 * poll, status -> R condition, and the CUDA gate after fork(). Only the
 * api*.c files include this: it is the SEXP side of the package. */
#ifndef KDEGPU_API_GLUE_H
#define KDEGPU_API_GLUE_H

#include <stdint.h>
#include <Rinternals.h>

#include "kde_backend.h"
#include "kde_status.h"

/* A double matrix whose dim attribute matches its length; its data. */
const double *arg_matrix_shape(SEXP x, const char *name, int64_t *nrow,
                               int64_t *ncol);
/* The same, and every value finite. */
const double *arg_matrix(SEXP x, const char *name, int threads,
                         int64_t *nrow, int64_t *ncol);
const double *arg_double_vector(SEXP x, const char *name, int64_t length);
double arg_double_scalar(SEXP x, const char *name);
double arg_tolerance(SEXP tolerance);
int arg_int_scalar(SEXP x, const char *name);
int arg_flag(SEXP x, const char *name);
int arg_kernel(SEXP x);
void arg_weights(SEXP weight, int64_t n, int threads, kde_training_set *train);
/* `scale`: NULL or the adaptive estimator's lambda_j, one per point. */
/* An adaptive fit's per-point scales lambda_j (`scale`, NULL: none) as the
 * backends take them, 1 / lambda_j^2 (R-allocated). */
const double *arg_inv_scale2(SEXP scale, int64_t n);
kde_training_set arg_training_set(SEXP train, SEXP weight, SEXP scale,
                                  SEXP kernel, SEXP tile_size, int threads);
/* What a fit's whitened points lost to rounding (kde_fit_residual: n x d
 * floats, column-major, in the fit's spatial order; the caller frees it),
 * where its raw points come with it (object$x, $order, $center,
 * $transform, as R/device.R passes them) and reach KDE_OFFSET_MIN_EXTENT
 * bandwidths from its centre; else NULL. These are the fit's own fields,
 * not a user's arguments: what does not fit leaves *residual NULL, no
 * error. 0, or -1 out of memory. */
int arg_fit_residual(SEXP raw, SEXP order, SEXP center, SEXP transform,
                     const kde_training_set *train, float **residual);
/* The offset mode's residuals (kde_backend.h's kde_cpu_tiles) of the CPU
 * model `handle` (cpu_model.c), if it is a live one made of these n_train x
 * dim points (the same memory) with them; else NULL. */
const float *cpu_model_residual(SEXP handle, const double *train, int64_t n_train,
                               int64_t dim);
/* Mixed data: the last nrow(penalty) columns of the training set are
 * discrete codes, and penalty their kde_training_set.discrete_penalty
 * (NULL: none). */
void arg_discrete(SEXP penalty, kde_training_set *t);
/* The queries: dim coordinates, then n_discrete codes, per row. */
kde_query_set arg_query_set(SEXP query, SEXP center, SEXP transform,
                            SEXP log_const, SEXP leave_one_out,
                            SEXP tolerance, int64_t dim, int64_t n_discrete,
                            int64_t n_train, int threads);
int arg_threads(SEXP threads);
/* The CUDA model behind a fit's handle (api_cuda.c), and its shape. */
struct kde_cuda_model;
struct kde_cuda_model *arg_cuda_model(SEXP handle, int64_t *n_train, int64_t *dim);

/* Starts the progress bar of the running evaluation (`delay` seconds). */
void progress_begin(SEXP delay);
/* The backends' poll between chunks (kde_interrupt_probe): nonzero when
 * the user interrupted. */
int poll_between_chunks(double done);
/* Ends the bar; an error or interrupt status becomes an R condition. */
void raise_status(const kde_status *status);
/* The end of an evaluation's entry point: `out` (the last object it
 * protected) gets the share of pairs evaluated as its attribute
 * "pairs_share" when the evaluation succeeded, is unprotected, and an error
 * or interrupt status becomes an R condition; returns `out`. */
SEXP finish_evaluation(SEXP out, double share, const kde_status *status);
/* The CPU's log-densities of the queries (arg_query_set's arguments)
 * against `train`, with its tiles (NULL: made for this call): the end of
 * the CPU's evaluation entry points. */
SEXP evaluate_on_cpu(const kde_training_set *train, const kde_cpu_tiles *tiles, SEXP query,
                     SEXP center, SEXP transform, SEXP log_const, SEXP leave_one_out,
                     SEXP tolerance, int n_threads, SEXP progress_delay);
/* Whether this process may call the CUDA runtime (not a forked child of
 * one that did); remembers that it did. */
int cuda_allowed(kde_status *status);

#endif
