/*
 * Kernel-derivative sums on the CPU (see derivatives.h): a plain loop over
 * the training points per query, OpenMP over queries, double throughout,
 * with the same online rescaling as the density's log-sum-exp so that a
 * query far out in a Gaussian or exponential tail keeps finite ratios.
 * The Gaussian's (fixed bandwidth) come from the moment engine instead,
 * whose exponentials are vectorised (moments.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "derivatives.h"
#include "moments.h"
#include "slices.h"
#include "threads.h"
#include <kdegpu/kernels.h>

/* One query's sums; v is scratch for dim values. Returns M. */
static double sums_at(const kde_derivative_problem *p, int64_t i, double *v,
                      double *s0, double *k1sum, double *first, double *second)
{
  const int64_t n = p->n_train, m = p->n_query, d = p->dim;
  const int kernel = p->kernel;
  double scale = -INFINITY; /* M so far */
  double sum0 = 0, sum1 = 0;
  for (int64_t c = 0; c < d; c++) first[c] = 0;
  if (second != NULL) for (int64_t c = 0; c < d * d; c++) second[c] = 0;
  for (int64_t j = 0; j < n; j++) {
    double t = 0;
    for (int64_t c = 0; c < d; c++) {
      v[c] = p->train[j + c * n] - p->query[i + c * m];
      if (p->train_residual != NULL) /* the offset mode */
        v[c] += (double) p->train_residual[j + c * n] -
                (p->query_residual != NULL ? p->query_residual[i + c * m] : 0.0);
      t += v[c] * v[c];
    }
    const double s = p->inv_scale2 != NULL ? p->inv_scale2[j] : 1.0;
    const double ts = t * s;
    const double log_term = p->log_weight[j] + kde_log_profile(kernel, ts);
    if (!(log_term > -INFINITY)) continue;
    if (log_term > scale) { /* rescale what is summed so far */
      const double f = exp(scale - log_term);
      sum0 *= f;
      sum1 *= f;
      for (int64_t c = 0; c < d; c++) first[c] *= f;
      if (second != NULL) for (int64_t c = 0; c < d * d; c++) second[c] *= f;
      scale = log_term;
    }
    /* w k e^-M times k1 / k and k2 / k (finite where k > 0) */
    const double term = exp(log_term - scale);
    sum0 += term;
    const double a1 = term * kde_profile_ratio1(kernel, ts) * s;
    if (t == 0) {
      /* v = 0: no direction, nothing for first and second; k1 still adds
       * to k1sum (the Hessian's 2 k1 I term, the mean-shift denominator)
       * where it is finite, i.e. but for the cusps of the triangular and
       * exponential kernels */
      if (isfinite(a1)) sum1 += a1;
      continue;
    }
    sum1 += a1;
    for (int64_t c = 0; c < d; c++) first[c] += a1 * v[c];
    if (second != NULL) {
      const double a2 = term * kde_profile_ratio2(kernel, ts) * (s * s);
      for (int64_t e = 0; e < d; e++)
        for (int64_t c = 0; c <= e; c++) second[c + e * d] += a2 * v[c] * v[e];
    }
  }
  if (second != NULL)
    for (int64_t e = 0; e < d; e++)
      for (int64_t c = e + 1; c < d; c++) second[c + e * d] = second[e + c * d];
  *s0 = sum0;
  *k1sum = sum1;
  return scale;
}

/* Queries per call of the moment engine: its sums of a chunk take at most
 * this many bytes. */
#define MOMENT_CHUNK_BYTES (64.0 * 1024 * 1024)

/* The Gaussian's sums from its moment sums S_a (degree 1, or 2 with
 * `second`): k1 = -k / 2 and k2 = k / 4, so s0 = S_0, k1sum = -S_0 / 2,
 * first[, c] = -S_{e_c} / 2 and second[, c, e] = S_{e_c + e_e} / 4. */
static void gaussian_sums(const kde_derivative_problem *p, int threads,
                          kde_interrupt_probe interrupted, double *log_scale, double *s0,
                          double *k1sum, double *first, double *second, kde_status *status)
{
  const int64_t m = p->n_query, d = p->dim;
  const int degree = second != NULL ? 2 : 1;
  const int64_t count = kde_moment_count(d, degree, INT32_MAX);
  int64_t chunk = (int64_t) (MOMENT_CHUNK_BYTES / ((double) count * sizeof(double)));
  int *exponents = malloc((size_t) (count * d) * sizeof *exponents);
  int64_t *pair = malloc((size_t) (count * 2) * sizeof *pair); /* (c, e) of S_a */
  double *query = NULL, *sums = NULL, *query_lost = NULL;
  kde_moment_problem mp;
  if (chunk < 1024) chunk = 1024;
  if (chunk > m) chunk = m;
  if (exponents != NULL && pair != NULL) {
    query = malloc((size_t) (chunk * d) * sizeof *query);
    sums = malloc((size_t) (chunk * count) * sizeof *sums);
    if (p->query_residual != NULL)
      query_lost = malloc((size_t) (chunk * d) * sizeof *query_lost);
  }
  if (query == NULL || sums == NULL || (p->query_residual != NULL && query_lost == NULL)) {
    kde_status_set(status, KDE_ERR_ALLOC, "could not allocate memory for the derivative sums");
    goto done;
  }
  /* the coordinates of each multi-index: (c, -1) for e_c, (c, e) for e_c + e_e */
  kde_moment_index(d, degree, count, exponents, NULL, NULL);
  for (int64_t a = 0; a < count; a++) {
    pair[2 * a] = pair[2 * a + 1] = -1;
    for (int64_t c = 0; c < d; c++)
      for (int k = 0; k < exponents[a + c * count]; k++)
        pair[2 * a + (pair[2 * a] < 0 ? 0 : 1)] = c;
  }
  mp.n_train = p->n_train;
  mp.dim = d;
  mp.train = p->train;
  mp.log_weight = p->log_weight;
  mp.query = query;
  mp.degree = degree;
  mp.pairs = KDE_PAIRS_ALL;
  mp.train_residual = p->train_residual;
  mp.query_residual = query_lost;
  for (int64_t at = 0; at < m; at += chunk) {
    const int64_t rows = m - at < chunk ? m - at : chunk;
    for (int64_t c = 0; c < d; c++) {
      memcpy(query + c * rows, p->query + at + c * m, (size_t) rows * sizeof(double));
      if (query_lost != NULL)
        memcpy(query_lost + c * rows, p->query_residual + at + c * m,
               (size_t) rows * sizeof(double));
    }
    mp.n_query = rows;
    kde_cpu_moments(&mp, threads, interrupted, log_scale + at, sums, status);
    if (status->code != KDE_OK) break;
    for (int64_t i = 0; i < rows; i++) {
      s0[at + i] = sums[i];
      k1sum[at + i] = -0.5 * sums[i];
    }
    for (int64_t a = 1; a < count; a++) {
      const int64_t c = pair[2 * a], e = pair[2 * a + 1];
      const double *col = sums + a * rows;
      if (e < 0) {
        for (int64_t i = 0; i < rows; i++) first[at + i + c * m] = -0.5 * col[i];
      } else {
        for (int64_t i = 0; i < rows; i++) second[at + i + (c + e * d) * m] = 0.25 * col[i];
        if (c != e)
          for (int64_t i = 0; i < rows; i++) second[at + i + (e + c * d) * m] = 0.25 * col[i];
      }
    }
  }
done:
  free(exponents);
  free(pair);
  free(query);
  free(sums);
  free(query_lost);
}

void kde_cpu_derivative_sums(const kde_derivative_problem *p, int threads,
                             kde_interrupt_probe interrupted, double *log_scale,
                             double *s0, double *k1sum, double *first,
                             double *second, kde_status *status)
{
  kde_status_clear(status);
  if (p->kernel < 0 || p->kernel >= KDE_N_KERNELS || p->n_train < 1 || p->dim < 1 ||
      p->n_query < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the derivative sums");
    return;
  }
  if (p->kernel == KDE_GAUSSIAN && p->inv_scale2 == NULL) {
    if (p->n_query > 0)
      gaussian_sums(p, threads, interrupted, log_scale, s0, k1sum, first, second, status);
    return;
  }
  const int64_t m = p->n_query, d = p->dim;
  const double terms = (double) p->n_train * (double) (d * d + d + 1);
  const int n_threads = kde_thread_count_for(threads, terms * (double) m);
  /* per thread: v, first, second */
  const int64_t per_thread = 2 * d + d * d;
  double *scratch = malloc((size_t) (per_thread * n_threads) * sizeof *scratch);
  if (scratch == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC, "could not allocate memory for the derivative sums");
    return;
  }
  kde_slice slice = {0, m, 0};
  while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads)
    {
      const int thread = kde_thread_index();
      double *v = scratch + thread * per_thread, *f = v + d, *s = f + d;
      int64_t i, last;
      while (kde_slice_claim(&slice, 1, &i, &last)) {
        log_scale[i] = sums_at(p, i, v, s0 + i, k1sum + i, f, second != NULL ? s : NULL);
        for (int64_t c = 0; c < d; c++) first[i + c * m] = f[c];
        if (second != NULL)
          for (int64_t c = 0; c < d * d; c++) second[i + c * m] = s[c];
      }
    }
    if (slice.next < m && interrupted != NULL && interrupted(kde_slice_done(&slice))) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      break;
    }
  }
  free(scratch);
}

/* Rows per task of kde_derivative_results (its inputs and outputs are
 * column-major m x k: a task reads and writes k short runs). */
#define RESULT_ROWS 1024

void kde_derivative_results(int64_t m, int64_t d, const double *log_scale, const double *s0,
                            const double *k1sum, const double *first, const double *second,
                            double log_const, const double *transform, int score, int threads,
                            double *gradient, double *log_density, double *hessian)
{
  const double *A = transform;
  const int64_t n_blocks = (m + RESULT_ROWS - 1) / RESULT_ROWS;
  const int n_threads = kde_thread_count_for(threads, (double) m * (double) (d * d * d + d * d));
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t block = 0; block < n_blocks; block++) {
    double g[KDE_DERIVATIVE_RESULT_MAX_DIM], b[KDE_DERIVATIVE_RESULT_MAX_DIM];
    double ab[KDE_DERIVATIVE_RESULT_MAX_DIM];
    const int64_t end = (block + 1) * RESULT_ROWS < m ? (block + 1) * RESULT_ROWS : m;
    for (int64_t i = block * RESULT_ROWS; i < end; i++) {
      /* C e^M as f / s0 where s0 > 0: the GPU's lazy maximum leaves M up
       * to ~43 below the largest term (and s0 that much above 1), and e^M
       * alone would underflow first far in a tail */
      const double M = log_scale[i];
      log_density[i] = log_const + M + log(s0[i]);
      const double scale = !isfinite(M) ? (score ? NAN : 0.0)
                           : score      ? 1.0 / s0[i]
                           : s0[i] > 0  ? exp(log_density[i]) / s0[i]
                                        : exp(log_const + M);
      for (int64_t p = 0; p < d; p++) { /* g = -2 scale A first_i */
        double sum = 0;
        for (int64_t k = 0; k < d; k++) sum += A[p + k * d] * first[i + k * m];
        g[p] = -2.0 * scale * sum;
        gradient[i + p * m] = g[p];
      }
      if (second == NULL) continue;
      /* column e of B_i = 4 second_i + 2 k1sum_i I, then column e of
       * A B_i, then its share of entry (p, q) = scale (A B_i A')[p, q] =
       * scale sum_e (A B_i)[p, e] A[q, e] */
      for (int64_t e = 0; e < d; e++) {
        for (int64_t k = 0; k < d; k++) b[k] = 4.0 * second[i + (k + e * d) * m];
        b[e] += 2.0 * k1sum[i];
        for (int64_t p = 0; p < d; p++) {
          double sum = 0;
          for (int64_t k = 0; k < d; k++) sum += A[p + k * d] * b[k];
          ab[p] = scale * sum;
        }
        for (int64_t q = 0; q < d; q++) {
          const double a = A[q + e * d];
          double *out = hessian + i + q * d * m;
          if (e == 0)
            for (int64_t p = 0; p < d; p++) out[p * m] = ab[p] * a - (score ? g[p] * g[q] : 0.0);
          else
            for (int64_t p = 0; p < d; p++) out[p * m] += ab[p] * a;
        }
      }
    }
  }
}
