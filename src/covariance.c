/*
 * The weighted covariance of a fit's points (the rules' S, SCV's and the
 * plug-in's pilots): in C with OpenMP because R's arithmetic on an n x d
 * matrix makes a temporary per step, and at n = 1e7 the R version took
 * 4 s of a fit's 16 on 2 cores.
 *
 * Sums are taken on the data scaled by a power of 2 per column (exact) and
 * centred on one of the points of positive weight, so that neither the
 * squares overflow at 1e300 nor the spread underflows at 1e-300, and in
 * blocks of rows fixed by n alone, added in block order: the same result
 * for any thread count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "covariance.h"
#include "data_summary.h"
#include "threads.h"

#define COV_RUN_ROWS 1024

int kde_weighted_cov(const double *x, int64_t n, int64_t d, const double *w, int threads,
                     double *S)
{
  int64_t first = 0;
  if (d < 1) return -3;
  while (first < n && !(w[first] > 0)) first++;
  if (first == n) return -1;
  const int64_t rows = kde_sum_block_rows(n), n_blocks = (n + rows - 1) / rows;
  double *scale = malloc((size_t) d * sizeof(double));
  double *inverse = malloc((size_t) d * sizeof(double));
  double *mean = calloc((size_t) d, sizeof(double));
  double *part = calloc((size_t) (n_blocks * d * d), sizeof(double));
  if (scale == NULL || inverse == NULL || mean == NULL || part == NULL) {
    free(scale);
    free(inverse);
    free(mean);
    free(part);
    return -2;
  }
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) (d * d));
  /* the scale of the points that count: a point of weight 0 takes no part,
   * however far it lies (nor does it meet an overflow below) */
  /* (each pass reads a block's rows in runs of COV_RUN_ROWS, all columns
   * of a run while it is in cache: column by column over all n, the six
   * pairs of d = 3 read x six times, 0.7 s at n = 1e8 on 16 cores) */
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t begin = b * rows, end = begin + rows < n ? begin + rows : n;
    double *top = part + b * d;
    for (int64_t run = begin; run < end; run += COV_RUN_ROWS) {
      const int64_t run_end = run + COV_RUN_ROWS < end ? run + COV_RUN_ROWS : end;
      for (int64_t k = 0; k < d; k++) {
        const double *col = x + k * n;
        double t = top[k];
        for (int64_t i = run; i < run_end; i++) {
          /* (fmax is a call where NaNs must be kept; x is finite; a
           * maximum is exact in any order) */
          const double a = w[i] > 0 ? fabs(col[i]) : 0.0;
          t = a > t ? a : t;
        }
        top[k] = t;
      }
    }
  }
  for (int64_t k = 0; k < d; k++) {
    double top = 0;
    for (int64_t b = 0; b < n_blocks; b++) top = part[b * d + k] > top ? part[b * d + k] : top;
    scale[k] = top > 0 ? ldexp(1.0, ilogb(top)) : 1.0;
    /* 1 / scale is exact where it is a normal number: a product then
     * gives the quotient's bits, at a fraction of a division's cost */
    inverse[k] = ilogb(top) > -1000 && ilogb(top) < 1000 ? 1.0 / scale[k] : 0.0;
  }
  /* the mean of u = (x - x_first) / scale, block by block */
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t begin = b * rows, end = begin + rows < n ? begin + rows : n;
    for (int64_t k = 0; k < d; k++) part[b * d + k] = 0;
    for (int64_t run = begin; run < end; run += COV_RUN_ROWS) {
      const int64_t run_end = run + COV_RUN_ROWS < end ? run + COV_RUN_ROWS : end;
      for (int64_t k = 0; k < d; k++) {
        const double *col = x + k * n, s = scale[k], r = inverse[k], ref = col[first] / s;
        double sum = 0;
        if (r > 0) {
          for (int64_t i = run; i < run_end; i++)
            if (w[i] > 0) sum += w[i] * (col[i] * r - ref);
        } else {
          for (int64_t i = run; i < run_end; i++)
            if (w[i] > 0) sum += w[i] * (col[i] / s - ref);
        }
        part[b * d + k] += sum;
      }
    }
  }
  for (int64_t b = 0; b < n_blocks; b++)
    for (int64_t k = 0; k < d; k++) mean[k] += part[b * d + k];
  /* sum_i w_i (u_i - mean)(u_i - mean)', upper triangle, block by block */
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t begin = b * rows, end = begin + rows < n ? begin + rows : n;
    double *out = part + b * d * d;
    for (int64_t j = 0; j < d * d; j++) out[j] = 0;
    for (int64_t run = begin; run < end; run += COV_RUN_ROWS) {
      const int64_t run_end = run + COV_RUN_ROWS < end ? run + COV_RUN_ROWS : end;
      for (int64_t k = 0; k < d; k++) {
        const double *ck = x + k * n, sk = scale[k], rk = ck[first] / sk, mk = mean[k];
        for (int64_t l = k; l < d; l++) {
          const double *cl = x + l * n, sl = scale[l], rl = cl[first] / sl, ml = mean[l];
          const double ik = inverse[k], il = inverse[l];
          double sum = 0;
          if (ik > 0 && il > 0) {
            for (int64_t i = run; i < run_end; i++)
              if (w[i] > 0) sum += w[i] * ((ck[i] * ik - rk - mk) * (cl[i] * il - rl - ml));
          } else {
            for (int64_t i = run; i < run_end; i++)
              if (w[i] > 0) sum += w[i] * ((ck[i] / sk - rk - mk) * (cl[i] / sl - rl - ml));
          }
          out[k + l * d] += sum;
        }
      }
    }
  }
  for (int64_t k = 0; k < d; k++) {
    for (int64_t l = k; l < d; l++) {
      double sum = 0;
      for (int64_t b = 0; b < n_blocks; b++) sum += part[b * d * d + k + l * d];
      S[k + l * d] = S[l + k * d] = sum * scale[k] * scale[l];
    }
  }
  free(scale);
  free(inverse);
  free(mean);
  free(part);
  return 0;
}

int64_t kde_weighted_spread(const double *x, int64_t n, int64_t d, const double *w,
                            int64_t *first, int *constant)
{
  int64_t positive = 0;
  *first = -1;
  for (int64_t i = 0; i < n; i++) {
    if (!(w[i] > 0)) continue;
    if (*first < 0) *first = i;
    positive++;
  }
  for (int64_t k = 0; k < d; k++) {
    const double *col = x + k * n;
    constant[k] = *first >= 0;
    /* data with spread differ within a few rows: the loop ends there */
    for (int64_t i = *first + 1; constant[k] && i < n; i++)
      if (w[i] > 0 && col[i] != col[*first]) constant[k] = 0;
  }
  return positive;
}
