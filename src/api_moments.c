/*
 * The .Call glue of the pair-sum engines behind plug-in bandwidths and
 * derivatives: Gaussian moment sums (moments.h, on either backend) and
 * kernel-derivative sums (derivatives.h).
 */
#include <math.h>
#include <string.h>
#include <limits.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "api_glue.h"
#include "kde_backend.h"
#include "kde_cuda.h"
#include "moments.h"
#include "derivatives.h"
#include "threads.h"

/* ---- Gaussian moment sums (moments.h) ----------------------------------- */

/* Multi-indices beyond this many would take more memory per query than any
 * caller needs (d = 100 at degree 2 has 5151). */
#define MOMENT_COUNT_LIMIT 100000

static int arg_degree(SEXP degree)
{
  int p = arg_int_scalar(degree, "degree");
  if (p < 0 || p > KDE_MOMENT_MAX_DEGREE)
    Rf_error("`degree` must be in 0..%d, not %d", KDE_MOMENT_MAX_DEGREE, p);
  return p;
}

/* The problem from (train, weight, query, degree, pairs); log weights in
 * R's memory. Weights need not sum to 1. */
static kde_moment_problem arg_moment_problem(SEXP train, SEXP weight,
                                             SEXP query, SEXP degree,
                                             SEXP pairs, int threads,
                                             int64_t *count)
{
  kde_moment_problem pr;
  int64_t query_dim;
  pr.train = arg_matrix(train, "train", threads, &pr.n_train, &pr.dim);
  if (pr.n_train < 1 || pr.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  pr.query = arg_matrix(query, "query", threads, &pr.n_query, &query_dim);
  if (query_dim != pr.dim)
    Rf_error("`query` must have %lld columns, like `train`, not %lld",
             (long long) pr.dim, (long long) query_dim);
  const double *w = arg_double_vector(weight, "weight", pr.n_train);
  double *log_w = (double *) R_alloc((size_t) pr.n_train, sizeof(double));
  for (int64_t j = 0; j < pr.n_train; j++) {
    if (!R_FINITE(w[j]) || w[j] < 0)
      Rf_error("`weight` must be finite and non-negative (element %lld is not)",
               (long long) j + 1);
    log_w[j] = w[j] > 0 ? log(w[j]) : -INFINITY;
  }
  pr.log_weight = log_w;
  pr.train_residual = NULL;
  pr.query_residual = NULL;
  pr.degree = arg_degree(degree);
  pr.pairs = arg_int_scalar(pairs, "pairs");
  if (pr.pairs < KDE_PAIRS_ALL || pr.pairs > KDE_PAIRS_ABOVE)
    Rf_error("`pairs` must be 0 (all), 1 (leave one out) or 2 (j > i), not %d",
             pr.pairs);
  if (pr.pairs != KDE_PAIRS_ALL && pr.n_query != pr.n_train)
    Rf_error("`pairs` %d needs the queries to be the training points", pr.pairs);
  *count = kde_moment_count(pr.dim, pr.degree, MOMENT_COUNT_LIMIT);
  if (*count < 0)
    Rf_error("%lld dimensions at degree %d give more than %d moment sums per query",
             (long long) pr.dim, pr.degree, MOMENT_COUNT_LIMIT);
  return pr;
}

/* list(log_scale = n_query values, sums = n_query x count matrix). */
static SEXP moment_result(int64_t n_query, int64_t count)
{
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_VECTOR_ELT(out, 0, Rf_allocVector(REALSXP, (R_xlen_t) n_query));
  SET_VECTOR_ELT(out, 1, Rf_allocMatrix(REALSXP, (int) n_query, (int) count));
  SET_STRING_ELT(names, 0, Rf_mkChar("log_scale"));
  SET_STRING_ELT(names, 1, Rf_mkChar("sums"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

SEXP kdegpu_moments_cpu(SEXP train, SEXP weight, SEXP query, SEXP degree,
                        SEXP pairs, SEXP threads, SEXP progress_delay)
{
  int64_t count;
  int n_threads = arg_threads(threads);
  kde_moment_problem pr = arg_moment_problem(train, weight, query, degree,
                                             pairs, n_threads, &count);
  if (pr.n_query > INT_MAX) Rf_error("`query` has too many rows");
  SEXP out = PROTECT(moment_result(pr.n_query, count));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  kde_cpu_moments(&pr, n_threads, poll_between_chunks,
                  REAL(VECTOR_ELT(out, 0)), REAL(VECTOR_ELT(out, 1)), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

SEXP kdegpu_moments_cuda(SEXP train, SEXP weight, SEXP query, SEXP degree,
                         SEXP pairs, SEXP devices, SEXP memory_budget,
                         SEXP threads, SEXP progress_delay)
{
  int64_t count;
  int n_threads = arg_threads(threads);
  kde_moment_problem pr = arg_moment_problem(train, weight, query, degree,
                                             pairs, n_threads, &count);
  if (pr.n_query > INT_MAX) Rf_error("`query` has too many rows");
  if (TYPEOF(devices) != INTSXP || XLENGTH(devices) < 1 || XLENGTH(devices) > INT_MAX)
    Rf_error("`devices` must be a non-empty integer vector");
  for (R_xlen_t i = 0; i < XLENGTH(devices); i++)
    if (INTEGER(devices)[i] == NA_INTEGER || INTEGER(devices)[i] < 0)
      Rf_error("`devices` must hold non-negative device indices");
  double budget = arg_double_scalar(memory_budget, "memory_budget");
  SEXP out = PROTECT(moment_result(pr.n_query, count));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  if (cuda_allowed(&status) && pr.n_query > 0)
    kde_cuda_moments(&pr, INTEGER(devices), (int) XLENGTH(devices), budget,
                     poll_between_chunks,
                     REAL(VECTOR_ELT(out, 0)), REAL(VECTOR_ELT(out, 1)), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* The multi-indices of kde_moment_index, as a count x dim integer matrix
 * (row m: the exponents of moment sum m). */
SEXP kdegpu_moment_index(SEXP dim, SEXP degree)
{
  int d = arg_int_scalar(dim, "dim");
  int p = arg_degree(degree);
  if (d < 1) Rf_error("`dim` must be at least 1");
  int64_t count = kde_moment_count(d, p, MOMENT_COUNT_LIMIT);
  /* the matrix holds count x d integers: bound it before allocating */
  if (count < 0 || (double) count * d > (double) MOMENT_COUNT_LIMIT * 64)
    Rf_error("%d dimensions at degree %d give more than %d moment sums", d, p,
             MOMENT_COUNT_LIMIT);
  SEXP out = PROTECT(Rf_allocMatrix(INTSXP, (int) count, d));
  kde_moment_index(d, p, count, INTEGER(out), NULL, NULL);
  UNPROTECT(1);
  return out;
}

/* ---- kernel-derivative sums (derivatives.h) ------------------------------ */

/* The estimate's derivatives for predict(type = "gradient" / "hessian") from the derivative sums of m
 * queries (log_scale, s0, k1sum, first m x d, second m x d^2 or NULL),
 * the fit's log constant and whitening transform (d x d):
 * list(gradient m x d, log_density m, hessian m x d x d or NULL), their
 * dimensions named by `columns` (NULL or d names); kde_derivative_results
 * (derivatives.h) says what they are. One pass in C with OpenMP: in R,
 * each of five m x d^2 temporaries cost tens of milliseconds at m = 1e6,
 * more than the GPU's sums. */
static SEXP derivative_results(SEXP log_scale, SEXP s0, SEXP k1sum, SEXP first,
                               SEXP second, SEXP log_const, SEXP transform, SEXP of_log,
                               SEXP columns, int n_threads)
{
  const int64_t m = XLENGTH(log_scale);
  if (!Rf_isMatrix(transform) || Rf_nrows(transform) != Rf_ncols(transform))
    Rf_error("`transform` must be a square matrix");
  const int64_t d = Rf_nrows(transform);
  if (d < 1 || d > KDE_DERIVATIVE_RESULT_MAX_DIM)
    Rf_error("`transform` must be 1 x 1 to %d x %d", KDE_DERIVATIVE_RESULT_MAX_DIM,
             KDE_DERIVATIVE_RESULT_MAX_DIM);
  if (m > INT_MAX) Rf_error("`log_scale` has too many elements");
  const double *A = arg_double_vector(transform, "transform", d * d);
  const double *M = arg_double_vector(log_scale, "log_scale", m);
  const double *S0 = arg_double_vector(s0, "s0", m);
  const double *K1 = arg_double_vector(k1sum, "k1sum", m);
  const double *F = arg_double_vector(first, "first", m * d);
  const int want_second = second != R_NilValue;
  const double *S = want_second ? arg_double_vector(second, "second", m * d * d) : NULL;
  const double c = arg_double_scalar(log_const, "log_const");
  const int score = arg_flag(of_log, "log");
  if (columns != R_NilValue && (TYPEOF(columns) != STRSXP || XLENGTH(columns) != d))
    Rf_error("`columns` must be NULL or %lld names", (long long) d);

  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SEXP grad = SET_VECTOR_ELT(out, 0, Rf_allocMatrix(REALSXP, (int) m, (int) d));
  SEXP logf = SET_VECTOR_ELT(out, 1, Rf_allocVector(REALSXP, m));
  SEXP hess = R_NilValue;
  if (want_second)
    hess = SET_VECTOR_ELT(out, 2, Rf_alloc3DArray(REALSXP, (int) m, (int) d, (int) d));
  SEXP grad_names = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(grad_names, 1, columns);
  Rf_setAttrib(grad, R_DimNamesSymbol, grad_names);
  if (want_second) {
    SEXP hess_names = PROTECT(Rf_allocVector(VECSXP, 3));
    SET_VECTOR_ELT(hess_names, 1, columns);
    SET_VECTOR_ELT(hess_names, 2, columns);
    Rf_setAttrib(hess, R_DimNamesSymbol, hess_names);
    UNPROTECT(1);
  }
  kde_derivative_results(m, d, M, S0, K1, F, S, c, A, score, n_threads, REAL(grad), REAL(logf),
                         want_second ? REAL(hess) : NULL);
  UNPROTECT(2);
  return out;
}

/* The sums as they are (finish NULL: mean shift and modes use them), or
 * finished (finish = list(log_const, transform, log, columns)): one trip
 * down to C for predict(type = "gradient" / "hessian"). */
static SEXP finish_derivatives(SEXP sums, SEXP finish, int n_threads)
{
  if (finish == R_NilValue) return sums;
  if (TYPEOF(finish) != VECSXP || XLENGTH(finish) != 4)
    Rf_error("`finish` must be NULL or list(log_const, transform, log, columns)");
  return derivative_results(VECTOR_ELT(sums, 0), VECTOR_ELT(sums, 1), VECTOR_ELT(sums, 2),
                            VECTOR_ELT(sums, 3), VECTOR_ELT(sums, 4), VECTOR_ELT(finish, 0),
                            VECTOR_ELT(finish, 1), VECTOR_ELT(finish, 2), VECTOR_ELT(finish, 3),
                            n_threads);
}


/* The problem from (kernel, train, log_weight, query); whether `second`. */
static kde_derivative_problem arg_derivative_problem(SEXP kernel, SEXP train,
                                                     SEXP log_weight, SEXP query,
                                                     int threads)
{
  kde_derivative_problem p;
  int64_t query_dim;
  p.kernel = arg_kernel(kernel);
  p.train = arg_matrix(train, "train", threads, &p.n_train, &p.dim);
  if (p.n_train < 1 || p.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  p.query = arg_matrix(query, "query", threads, &p.n_query, &query_dim);
  if (query_dim != p.dim)
    Rf_error("`query` must have %lld columns, like `train`", (long long) p.dim);
  if (p.n_query > INT_MAX || p.dim * p.dim > INT_MAX / (p.n_query > 0 ? p.n_query : 1))
    Rf_error("`query` has too many rows");
  p.log_weight = arg_double_vector(log_weight, "log_weight", p.n_train);
  p.inv_scale2 = NULL;
  p.train_residual = NULL;
  p.query_residual = NULL;
  for (int64_t j = 0; j < p.n_train; j++)
    if (ISNAN(p.log_weight[j]) || p.log_weight[j] == INFINITY)
      Rf_error("`log_weight` must be below Inf and not NaN (element %lld)", (long long) j + 1);
  return p;
}

/* list(log_scale, s0, k1sum, first = m x d, second = m x d*d or NULL). */
static SEXP derivative_result(const kde_derivative_problem *p, int want_second)
{
  const int m = (int) p->n_query, d = (int) p->dim;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 5));
  SET_VECTOR_ELT(out, 0, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 1, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 2, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 3, Rf_allocMatrix(REALSXP, m, d));
  if (want_second) SET_VECTOR_ELT(out, 4, Rf_allocMatrix(REALSXP, m, d * d));
  UNPROTECT(1);
  return out;
}

/* The queries' residuals (R's whiten_for_sums()), NULL or n_query x dim. */
static const double *arg_query_residual(SEXP query_residual, const kde_derivative_problem *p,
                                        int threads)
{
  int64_t rows, cols;
  if (Rf_isNull(query_residual)) return NULL;
  const double *out = arg_matrix(query_residual, "query_residual", threads, &rows, &cols);
  if (rows != p->n_query || cols != p->dim)
    Rf_error("`query_residual` must be a %lld x %lld matrix, like `query`",
             (long long) p->n_query, (long long) p->dim);
  return out;
}

SEXP kdegpu_derivative_sums_cpu(SEXP kernel, SEXP train, SEXP log_weight,
                                SEXP scale, SEXP query, SEXP second, SEXP finish,
                                SEXP model, SEXP query_residual, SEXP threads,
                                SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_derivative_problem p = arg_derivative_problem(kernel, train, log_weight, query,
                                                    n_threads);
  p.inv_scale2 = arg_inv_scale2(scale, p.n_train);
  /* the offset mode, where `model` (NULL: none) is the CPU model of these
   * points and has it; `query_residual`: what the queries' whitening lost
   * (NULL: nothing) */
  p.train_residual = Rf_isNull(model) ? NULL : cpu_model_residual(model, p.train, p.n_train, p.dim);
  if (p.train_residual != NULL) p.query_residual = arg_query_residual(query_residual, &p, n_threads);
  int want_second = arg_flag(second, "second");
  SEXP out = PROTECT(derivative_result(&p, want_second));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  kde_cpu_derivative_sums(&p, n_threads, poll_between_chunks, REAL(VECTOR_ELT(out, 0)),
                          REAL(VECTOR_ELT(out, 1)), REAL(VECTOR_ELT(out, 2)),
                          REAL(VECTOR_ELT(out, 3)),
                          want_second ? REAL(VECTOR_ELT(out, 4)) : NULL, &status);
  raise_status(&status);
  out = finish_derivatives(out, finish, n_threads);
  UNPROTECT(1);
  return out;
}

/* The same on the GPU, for the fit whose CUDA model is `model` (made from
 * these training points and weights); the fit's precision, within relative
 * `tolerance` (kde_cuda_derivative_sums). */
SEXP kdegpu_derivative_sums_cuda(SEXP model, SEXP kernel, SEXP train, SEXP log_weight,
                                 SEXP query, SEXP query_residual, SEXP second, SEXP tolerance,
                                 SEXP finish, SEXP threads, SEXP progress_delay)
{
  int64_t n_train, dim;
  int n_threads = arg_threads(threads);
  kde_status status;
  kde_status_clear(&status);
  if (!cuda_allowed(&status)) raise_status(&status);
  kde_cuda_model *handle = arg_cuda_model(model, &n_train, &dim);
  kde_derivative_problem p = arg_derivative_problem(kernel, train, log_weight, query,
                                                    n_threads);
  if (p.n_train != n_train || p.dim != dim)
    Rf_error("`train` must be the %lld x %lld training set of `model`", (long long) n_train,
             (long long) dim);
  /* what the queries' whitening lost (NULL: nothing), which a model with
   * its points' residuals adds (kde_derivative_problem) */
  p.query_residual = arg_query_residual(query_residual, &p, n_threads);
  int want_second = arg_flag(second, "second");
  double tol = arg_tolerance(tolerance);
  SEXP out = PROTECT(derivative_result(&p, want_second));
  progress_begin(progress_delay);
  if (p.n_query > 0)
    kde_cuda_derivative_sums(handle, &p, tol, n_threads, poll_between_chunks,
                             REAL(VECTOR_ELT(out, 0)), REAL(VECTOR_ELT(out, 1)),
                             REAL(VECTOR_ELT(out, 2)), REAL(VECTOR_ELT(out, 3)),
                             want_second ? REAL(VECTOR_ELT(out, 4)) : NULL, &status);
  raise_status(&status);
  out = finish_derivatives(out, finish, n_threads);
  UNPROTECT(1);
  return out;
}
