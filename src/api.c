/*
 * The .Call glue of the CPU backend and the small utilities: the only C
 * code, with api_cuda.c and api_moments.c, that sees a SEXP. Each entry
 * point checks its arguments by name (a direct .Call with junk errors,
 * never crashes), turns them into plain C values, calls a backend and
 * turns a kde_status into an R error (api_glue.c). R has validated
 * everything already; these checks are the second line of defence.
 */
#include <math.h>
#include <string.h>
#include <limits.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "covariance.h"
#include "api.h"
#include "api_glue.h"
#include "kde_backend.h"
#include "cdf.h"
#include "derivatives.h"
#include "kde_cuda.h"
#include "exp_values.h"
#include "finite.h"
#include "spatial.h"
#include "threads.h"
#include "unit_spread.h"
#include "whiten.h"
#include <kdegpu/kernels.h>

/* ---- CPU ---------------------------------------------------------------- */

SEXP kdegpu_log_density_cpu(SEXP train, SEXP weight, SEXP scale,
                            SEXP tile_size, SEXP query, SEXP center,
                            SEXP transform, SEXP kernel, SEXP log_const,
                            SEXP leave_one_out, SEXP tolerance, SEXP threads,
                            SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_training_set t = arg_training_set(train, weight, scale, kernel,
                                        tile_size, n_threads);
  return evaluate_on_cpu(&t, NULL, query, center, transform, log_const, leave_one_out,
                         tolerance, n_threads, progress_delay);
}

/* The CDF (cdf.h) of a product-kernel estimate, bounded coordinates folded
 * in; R checked the kernel and H. `images` is list(count, sign, shift);
 * `scale` NULL or an adaptive fit's lambda_j; `model` NULL (the CPU) or
 * the CUDA model of a fit of `train`, whose devices sum. */
SEXP kdegpu_cdf(SEXP train, SEXP weight, SEXP scale, SEXP bandwidth,
                SEXP kernel, SEXP query, SEXP lower, SEXP upper,
                SEXP images, SEXP model, SEXP threads, SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_cdf_problem p;
  int64_t query_rows, query_dim;
  p.kernel = arg_kernel(kernel);
  p.train = arg_matrix(train, "train", n_threads, &p.n_train, &p.dim);
  if (p.n_train < 1 || p.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  if (p.dim > 1 && p.kernel != KDE_GAUSSIAN)
    Rf_error("`kernel` must be the Gaussian (0) in more than one dimension");
  kde_training_set weights;
  arg_weights(weight, p.n_train, n_threads, &weights);
  p.weight = weights.weight;
  p.scale = NULL;
  if (!Rf_isNull(scale)) {
    p.scale = arg_double_vector(scale, "scale", p.n_train);
    for (int64_t j = 0; j < p.n_train; j++)
      if (!(p.scale[j] > 0) || !R_FINITE(p.scale[j]))
        Rf_error("`scale` must be positive and finite (element %lld is not)",
                 (long long) j + 1);
  }
  p.bandwidth = arg_double_vector(bandwidth, "bandwidth", p.dim);
  p.lower = arg_double_vector(lower, "lower", p.dim);
  p.upper = arg_double_vector(upper, "upper", p.dim);
  for (int64_t c = 0; c < p.dim; c++) {
    if (!(p.bandwidth[c] > 0) || !R_FINITE(p.bandwidth[c]))
      Rf_error("`bandwidth` must be positive and finite");
    if (ISNAN(p.lower[c]) || ISNAN(p.upper[c]) || !(p.lower[c] < p.upper[c]))
      Rf_error("`lower` must be below `upper` in every coordinate");
  }
  if (TYPEOF(images) != VECSXP || XLENGTH(images) != 3)
    Rf_error("`images` must be list(count, sign, shift)");
  SEXP count = VECTOR_ELT(images, 0);
  if (TYPEOF(count) != INTSXP || XLENGTH(count) != p.dim)
    Rf_error("`images$count` must be an integer vector with one count per column");
  int64_t *counts = (int64_t *) R_alloc((size_t) p.dim, sizeof(int64_t));
  int64_t n_images = 0;
  for (int64_t c = 0; c < p.dim; c++) {
    int value = INTEGER(count)[c];
    if (value == NA_INTEGER || value < 1)
      Rf_error("`images$count` must be positive");
    counts[c] = value;
    n_images += value;
  }
  p.image_count = counts;
  p.image_sign = arg_double_vector(VECTOR_ELT(images, 1), "images$sign", n_images);
  p.image_shift = arg_double_vector(VECTOR_ELT(images, 2), "images$shift", n_images);
  for (int64_t g = 0; g < n_images; g++)
    if ((p.image_sign[g] != 1 && p.image_sign[g] != -1) || !R_FINITE(p.image_shift[g]))
      Rf_error("`images` must have signs of 1 or -1 and finite shifts");
  const double *q = arg_matrix_shape(query, "query", &query_rows, &query_dim);
  if (query_dim != p.dim)
    Rf_error("`query` must have %lld columns, like `train`", (long long) p.dim);
  for (int64_t i = 0; i < query_rows * query_dim; i++)
    if (ISNAN(q[i])) Rf_error("`query` must not contain NA or NaN");

  kde_status status;
  kde_status_clear(&status);
  struct kde_cuda_model *handle = NULL;
  if (!Rf_isNull(model)) {
    int64_t model_n = 0, model_dim = 0;
    if (!cuda_allowed(&status)) raise_status(&status);
    handle = arg_cuda_model(model, &model_n, &model_dim);
    if (model_n != p.n_train || model_dim != p.dim)
      Rf_error("`model` must be the CUDA model of `train`");
  }

  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) query_rows));
  progress_begin(progress_delay);
  if (handle == NULL)
    kde_cpu_cdf(&p, q, query_rows, n_threads, poll_between_chunks, REAL(out), &status);
  else
    kde_cuda_cdf(handle, &p, q, query_rows, poll_between_chunks, REAL(out), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* The threads a CPU region of `work` units runs on (kde_thread_count_for):
 * for tests and kdegpu_info(). */
SEXP kdegpu_threads_for_work(SEXP threads, SEXP work)
{
  int n_threads = arg_threads(threads);
  double units = arg_double_scalar(work, "work");
  if (!(units >= 0)) Rf_error("`work` must be a non-negative number");
  return Rf_ScalarInteger(kde_thread_count_for(n_threads, units));
}

/* The backends' limits that R's dispatch and capability table read,
 * as a named integer vector (so that no R constant copies a C one). */
SEXP kdegpu_limits(void)
{
  static const struct { const char *name; int value; } limits[] = {
    {"cuda_derivative_max_dim", KDE_CUDA_DERIVATIVE_MAX_DIM},
    {"cuda_discrete_max", KDE_CUDA_DISCRETE_MAX},
    {"cuda_plan_max_dim", KDE_CUDA_PLAN_MAX_DIM},
    {"cuda_sample_max_dim", KDE_SAMPLE_MAX_DIM},
    {"derivative_result_max_dim", KDE_DERIVATIVE_RESULT_MAX_DIM},
  };
  const int n = (int) (sizeof limits / sizeof limits[0]);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, n));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    INTEGER(out)[i] = limits[i].value;
    SET_STRING_ELT(names, i, Rf_mkChar(limits[i].name));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

SEXP kdegpu_cpu_info(SEXP threads)
{
  int n_threads = arg_threads(threads);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 3));
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(kde_has_openmp()));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(kde_thread_count(n_threads)));
  SET_VECTOR_ELT(out, 2, Rf_ScalarLogical(kde_in_forked_child()));
  SET_STRING_ELT(names, 0, Rf_mkChar("openmp"));
  SET_STRING_ELT(names, 1, Rf_mkChar("threads"));
  SET_STRING_ELT(names, 2, Rf_mkChar("forked_child"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* Row-wise log-sum-exp of an m x k matrix of log values (-Inf allowed),
 * with the kernels' own merge: how partial results over training shards,
 * computed anywhere, are combined. */
SEXP kdegpu_lse_rows(SEXP parts)
{
  int64_t m, k;
  const double *p = arg_matrix_shape(parts, "parts", &m, &k);
  for (int64_t i = 0; i < m * k; i++)
    if (ISNAN(p[i]) || p[i] == INFINITY)
      Rf_error("`parts` must hold log values in [-Inf, Inf), not NaN or Inf");
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) m));
  for (int64_t i = 0; i < m; i++) {
    kde_lse state = kde_lse_empty();
    for (int64_t c = 0; c < k; c++) state = kde_lse_add(state, p[i + c * m]);
    REAL(out)[i] = kde_lse_log(state);
  }
  UNPROTECT(1);
  return out;
}

/* The 1-based position of the first NA, NaN or infinite element of a double
 * vector, 0 if there is none: R's is.finite() would allocate a logical
 * copy of the data (256 MB for 1e6 points in 64-D) just to say "fine". */
SEXP kdegpu_first_nonfinite(SEXP x, SEXP threads)
{
  if (TYPEOF(x) != REALSXP) Rf_error("`x` must be a double vector");
  int n_threads = arg_threads(threads);
  return Rf_ScalarReal(
      (double) kde_first_nonfinite(REAL(x), (int64_t) XLENGTH(x), n_threads) + 1);
}

/* exp(x) on the allowed cores, with x's attributes (names): the same
 * values as R's exp(). */
SEXP kdegpu_exp(SEXP x, SEXP threads)
{
  if (TYPEOF(x) != REALSXP) Rf_error("`x` must be a double vector");
  int n_threads = arg_threads(threads);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, XLENGTH(x)));
  kde_exp_values(REAL(x), REAL(out), (int64_t) XLENGTH(x), n_threads);
  SHALLOW_DUPLICATE_ATTRIB(out, x);
  UNPROTECT(1);
  return out;
}

/* The spatial order of a fit's whitened points (kde_kd_sort: tiles of
 * KDE_TILE_POINTS, each in blocks of KDE_QUERY_BLOCK, so that
 * leave-one-out's queries, the training points themselves, come in compact
 * blocks too), 1-based for R. */
SEXP kdegpu_spatial_order(SEXP x, SEXP threads)
{
  int64_t n, d;
  int n_threads = arg_threads(threads);
  const double *data = arg_matrix(x, "x", n_threads, &n, &d);
  int64_t *order = (int64_t *) R_alloc((size_t) (n > 0 ? n : 1), sizeof(int64_t));
  double *sorted = (double *) R_alloc((size_t) (n * d > 0 ? n * d : 1), sizeof(double));
  if (n * d > 0) memcpy(sorted, data, (size_t) (n * d) * sizeof(double));
  kde_kd_sort(sorted, n, d, KDE_TILE_POINTS, KDE_QUERY_BLOCK, n_threads, order);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) n));
  for (int64_t i = 0; i < n; i++) REAL(out)[i] = (double) order[i] + 1;
  UNPROTECT(1);
  return out;
}

/* The CUDA backend's layout of a spatially ordered (whitened) training set
 * (unit_spread.h), for the tests: each point's position, 1-based, and the
 * width the split units keep; positions NULL where the plain layout
 * serves. */
SEXP kdegpu_unit_spread(SEXP z, SEXP width, SEXP growth, SEXP threads)
{
  int64_t n, d;
  int n_threads = arg_threads(threads);
  const double *data = arg_matrix(z, "z", n_threads, &n, &d);
  if (!Rf_isReal(width) || XLENGTH(width) != 1 || !(REAL(width)[0] > 0))
    Rf_error("`width` must be one positive number");
  if (!Rf_isReal(growth) || XLENGTH(growth) != 1 || !(REAL(growth)[0] >= 0))
    Rf_error("`growth` must be one number >= 0");
  /* R's objects first: nothing can fail (and jump) while C holds memory */
  const char *names[] = {"position", "n_positions", "width", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP pos = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) n));
  SET_VECTOR_ELT(out, 1, Rf_ScalarReal(0));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal(0));
  kde_unit_spread s;
  if (kde_unit_spread_make(data, n, d, KDE_TILE_POINTS, REAL(width)[0], REAL(growth)[0],
                           n_threads, &s) != 0)
    Rf_error("out of memory laying out the points");
  REAL(VECTOR_ELT(out, 1))[0] = (double) s.n_positions;
  REAL(VECTOR_ELT(out, 2))[0] = s.width;
  if (s.n_positions > 0) {
    for (int64_t i = 0; i < n; i++) REAL(pos)[i] = (double) s.position_of[i] + 1;
    SET_VECTOR_ELT(out, 0, pos);
  }
  kde_unit_spread_free(&s);
  UNPROTECT(2);
  return out;
}

/* The arguments of a whitening, z = (x - center) T, checked. */
typedef struct {
  const double *x, *center, *transform;
  int64_t n, d;
  int threads;
} whitening_args;

static whitening_args arg_whitening(SEXP x, SEXP center, SEXP transform, SEXP threads)
{
  whitening_args a;
  int64_t t_rows, t_cols;
  a.threads = arg_threads(threads);
  a.x = arg_matrix(x, "x", a.threads, &a.n, &a.d);
  a.center = arg_double_vector(center, "center", a.d);
  a.transform = arg_matrix(transform, "transform", a.threads, &t_rows, &t_cols);
  if (t_rows != a.d || t_cols != a.d)
    Rf_error("`transform` must be a %lld x %lld matrix", (long long) a.d, (long long) a.d);
  return a;
}

/* z = (x - center) T, the whitening every evaluation's queries go through. */
SEXP kdegpu_whiten(SEXP x, SEXP center, SEXP transform, SEXP threads)
{
  const whitening_args a = arg_whitening(x, center, transform, threads);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) a.n, (int) a.d));
  kde_whiten(a.x, a.n, a.d, a.center, a.transform, a.threads, REAL(out));
  UNPROTECT(1);
  return out;
}

/* The same and what its rounding lost: list(z, residual), z kdegpu_whiten's
 * (to the bit: a query at a training point stays on it), z + residual the
 * whitened points to twice double's precision (kde_whiten_residual);
 * residual NULL beyond KDE_WHITEN_EXACT_MAX_DIM columns. */
SEXP kdegpu_whiten_exact(SEXP x, SEXP center, SEXP transform, SEXP threads)
{
  const whitening_args a = arg_whitening(x, center, transform, threads);
  const int64_t n = a.n, d = a.d;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_STRING_ELT(names, 0, Rf_mkChar("z"));
  SET_STRING_ELT(names, 1, Rf_mkChar("residual"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  SEXP z = Rf_allocMatrix(REALSXP, (int) n, (int) d);
  SET_VECTOR_ELT(out, 0, z);
  kde_whiten(a.x, n, d, a.center, a.transform, a.threads, REAL(z));
  if (d <= KDE_WHITEN_EXACT_MAX_DIM) {
    SEXP residual = Rf_allocMatrix(REALSXP, (int) n, (int) d);
    SET_VECTOR_ELT(out, 1, residual);
    kde_whiten_residual(a.x, n, d, a.center, a.transform, a.threads, REAL(z), REAL(residual));
  }
  UNPROTECT(2);
  return out;
}

/* sum_i w_i (x_i - m)(x_i - m)' for weights summing to 1 (kde_weighted_cov). */
SEXP kdegpu_weighted_cov(SEXP x, SEXP weights, SEXP threads)
{
  int64_t n, d;
  int n_threads = arg_threads(threads);
  const double *data = arg_matrix(x, "x", n_threads, &n, &d);
  const double *w = arg_double_vector(weights, "weights", n);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) d, (int) d));
  const int status = kde_weighted_cov(data, n, d, w, n_threads, REAL(out));
  if (status == -1) Rf_error("`weights` must have a positive entry");
  if (status == -3) Rf_error("`x` must have at least one column");
  if (status != 0) Rf_error("out of memory computing the weighted covariance");
  UNPROTECT(1);
  return out;
}

/* list(positive, first, constant): kde_weighted_spread, first 1-based (0:
 * none), for the bandwidth rules' check that the data have a spread. */
SEXP kdegpu_weighted_spread(SEXP x, SEXP weights)
{
  int64_t n, d, first;
  /* x: the fit's data, already checked to be finite */
  const double *data = arg_matrix_shape(x, "x", &n, &d);
  const double *w = arg_double_vector(weights, "weights", n);
  const char *names[] = {"positive", "first", "constant", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP constant = Rf_allocVector(LGLSXP, (R_xlen_t) d);
  SET_VECTOR_ELT(out, 2, constant);
  const int64_t positive = kde_weighted_spread(data, n, d, w, &first, LOGICAL(constant));
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal((double) positive));
  SET_VECTOR_ELT(out, 1, Rf_ScalarReal((double) first + 1));
  UNPROTECT(1);
  return out;
}

/* ---- kernel constants --------------------------------------------------- */

/* c(scale, log_norm_const) of kernels.h, so R uses the same numbers. */
SEXP kdegpu_kernel_constants(SEXP kernel, SEXP dim)
{
  int k = arg_kernel(kernel);
  int d = arg_int_scalar(dim, "dim");
  if (d < 1) Rf_error("`dim` must be at least 1");
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = kde_scale(k, d);
  REAL(out)[1] = kde_log_norm_const(k, d);
  UNPROTECT(1);
  return out;
}

/* The kernel's profile k(s) at the radii s (kernels.h), and whether its
 * support is compact (attribute "compact"), for R's margins. */
SEXP kdegpu_kernel_profile(SEXP kernel, SEXP radius)
{
  int k = arg_kernel(kernel);
  if (TYPEOF(radius) != REALSXP) Rf_error("`radius` must be a double vector");
  const R_xlen_t n = XLENGTH(radius);
  const double *s = REAL(radius);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, n));
  for (R_xlen_t i = 0; i < n; i++) REAL(out)[i] = kde_profile(k, s[i] * s[i]);
  Rf_setAttrib(out, Rf_install("compact"), Rf_ScalarLogical(kde_kernel_is_compact(k)));
  UNPROTECT(1);
  return out;
}
