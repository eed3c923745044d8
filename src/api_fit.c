/*
 * The .Call glue of a fit's preparation on the host: the one-pass
 * summaries of its points and weights (data_summary.c) and its whitened
 * points in their spatial order (whiten.c, spatial.c). R has checked the
 * arguments; these checks are the second line of defence.
 */
#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "api_glue.h"
#include "data_summary.h"
#include "kde_backend.h"
#include "spatial.h"
#include "threads.h"
#include "whiten.h"

/* list(z, order, weights): z = (x - center) T in a k-d order (spatial.c)
 * whose runs of KDE_TILE_POINTS rows are the tiles, order its 1-based rows
 * of x and weights[order]. One copy of x's size besides x: the whitened
 * points are sorted where they are made. */
SEXP kdegpu_whiten_sort(SEXP x, SEXP center, SEXP transform, SEXP weights, SEXP threads)
{
  int64_t n, d, t_rows, t_cols;
  const int n_threads = arg_threads(threads);
  const double *data = arg_matrix(x, "x", n_threads, &n, &d);
  const double *c = arg_double_vector(center, "center", d);
  const double *t = arg_matrix(transform, "transform", n_threads, &t_rows, &t_cols);
  if (t_rows != d || t_cols != d)
    Rf_error("`transform` must be a %lld x %lld matrix", (long long) d, (long long) d);
  const double *w = arg_double_vector(weights, "weights", n);
  int64_t *order = (int64_t *) R_alloc((size_t) (n > 0 ? n : 1), sizeof(int64_t));
  const char *names[] = {"z", "order", "weights", ""};
  SEXP out = PROTECT(Rf_mkNamed(VECSXP, names));
  SEXP z = Rf_allocMatrix(REALSXP, (int) n, (int) d);
  SET_VECTOR_ELT(out, 0, z);
  SEXP rows = Rf_allocVector(REALSXP, (R_xlen_t) n);
  SET_VECTOR_ELT(out, 1, rows);
  SEXP sorted_w = Rf_allocVector(REALSXP, (R_xlen_t) n);
  SET_VECTOR_ELT(out, 2, sorted_w);
  kde_whiten(data, n, d, c, t, n_threads, REAL(z));
  kde_kd_sort(REAL(z), n, d, KDE_TILE_POINTS, KDE_QUERY_BLOCK, n_threads, order);
  double *r = REAL(rows), *sw = REAL(sorted_w);
#pragma omp parallel for num_threads(kde_thread_count_for(n_threads, (double) n)) \
    schedule(static)
  for (int64_t i = 0; i < n; i++) {
    r[i] = (double) order[i] + 1;
    sw[i] = w[order[i]];
  }
  UNPROTECT(1);
  return out;
}

/* c(total, sum_squares, smallest, largest, which_largest, positive):
 * kde_weight_facts_of, which_largest 1-based. */
SEXP kdegpu_weight_facts(SEXP weights, SEXP threads)
{
  if (TYPEOF(weights) != REALSXP) Rf_error("`weights` must be a double vector");
  kde_weight_facts f;
  kde_weight_facts_of(REAL(weights), (int64_t) XLENGTH(weights), arg_threads(threads), &f);
  const char *names[] = {"total", "sum_squares", "smallest", "largest", "which_largest",
                         "positive", ""};
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 6));
  double *v = REAL(out);
  v[0] = f.total;
  v[1] = f.sum_squares;
  v[2] = f.smallest;
  v[3] = f.largest;
  v[4] = (double) f.which_largest + 1;
  v[5] = (double) f.positive;
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, 6));
  for (int i = 0; i < 6; i++) SET_STRING_ELT(nm, i, Rf_mkChar(names[i]));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

/* sum_i w_i x_i (kde_weighted_centre). */
SEXP kdegpu_weighted_centre(SEXP x, SEXP weights, SEXP threads)
{
  int64_t n, d;
  const int n_threads = arg_threads(threads);
  const double *data = arg_matrix_shape(x, "x", &n, &d);
  const double *w = arg_double_vector(weights, "weights", n);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) d));
  kde_weighted_centre(data, n, d, w, n_threads, REAL(out));
  UNPROTECT(1);
  return out;
}

/* max_i |x_ik| per column k of the finite matrix x (kde_column_magnitudes). */
SEXP kdegpu_column_magnitudes(SEXP x, SEXP threads)
{
  int64_t n, d;
  const double *data = arg_matrix_shape(x, "x", &n, &d);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) d));
  kde_column_magnitudes(data, n, d, arg_threads(threads), REAL(out));
  UNPROTECT(1);
  return out;
}
