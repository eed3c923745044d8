/*
 * The conditional CDF's entry point (conditional_cdf.h): R passes the
 * training points already transformed (R/conditional_cdf.R).
 */
#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include <limits.h>

#include "api.h"
#include "api_glue.h"
#include "conditional_cdf.h"

/* F(y | x) at the m queries; with `with_density` TRUE 2m values: F, then
 * the density of v (see conditional_cdf.h). `devices`: NULL (the CPU) or
 * the GPUs, with `memory_budget` bytes each (0: half of what is free). */
SEXP kdegpu_conditional_cdf(SEXP train, SEXP response, SEXP log_weight, SEXP scale,
                            SEXP query, SEXP value, SEXP with_density, SEXP devices,
                            SEXP memory_budget, SEXP threads, SEXP progress_delay)
{
  const int both = arg_flag(with_density, "with_density");
  const int n_threads = arg_threads(threads);
  kde_conditional_cdf_problem p;
  int64_t m, query_dim;
  p.train = arg_matrix(train, "train", n_threads, &p.n_train, &p.dim);
  if (p.n_train < 1 || p.dim < 1) Rf_error("`train` must have at least one row and one column");
  p.response = arg_double_vector(response, "response", p.n_train);
  p.log_weight = arg_double_vector(log_weight, "log_weight", p.n_train);
  p.scale = NULL;
  if (!Rf_isNull(scale)) p.scale = arg_double_vector(scale, "scale", p.n_train);
  for (int64_t j = 0; j < p.n_train; j++) {
    if (!R_FINITE(p.response[j])) Rf_error("`response` must be finite");
    if (ISNAN(p.log_weight[j]) || p.log_weight[j] == R_PosInf)
      Rf_error("`log_weight` must be finite or -Inf");
    if (p.scale != NULL && !(p.scale[j] > 0 && R_FINITE(p.scale[j])))
      Rf_error("`scale` must be positive and finite");
  }
  const double *z = arg_matrix(query, "query", n_threads, &m, &query_dim);
  if (query_dim != p.dim) Rf_error("`query` must have %lld columns, like `train`", (long long) p.dim);
  const double *v = arg_double_vector(value, "value", m);
  for (int64_t i = 0; i < m; i++)
    if (ISNAN(v[i])) Rf_error("`value` must not contain NA or NaN");

  const int on_gpu = !Rf_isNull(devices);
  double budget = 0;
  if (on_gpu) {
    if (TYPEOF(devices) != INTSXP || XLENGTH(devices) < 1 || XLENGTH(devices) > INT_MAX)
      Rf_error("`devices` must be a non-empty integer vector");
    for (R_xlen_t i = 0; i < XLENGTH(devices); i++)
      if (INTEGER(devices)[i] == NA_INTEGER || INTEGER(devices)[i] < 0)
        Rf_error("`devices` must hold non-negative device indices");
    budget = arg_double_scalar(memory_budget, "memory_budget");
  }
  kde_status status;
  kde_status_clear(&status);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) (both ? 2 * m : m)));
  progress_begin(progress_delay);
  if (!on_gpu)
    kde_cpu_conditional_cdf(&p, z, v, m, n_threads, poll_between_chunks, REAL(out),
                            both ? REAL(out) + m : NULL, &status);
  else if (cuda_allowed(&status))
    kde_cuda_conditional_cdf(&p, z, v, m, INTEGER(devices), (int) XLENGTH(devices), budget,
                             poll_between_chunks, REAL(out), both ? REAL(out) + m : NULL,
                             &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}
