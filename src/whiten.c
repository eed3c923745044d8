/*
 * Whitening of points, z = (x - center) T, for every evaluation's queries:
 * in C with OpenMP because R's reference BLAS does this n x d by d x d
 * product on one core at about 1 GFLOP/s, which at d = 64 took longer than
 * the GPU evaluation it prepared.
 */
/* kde_whiten_row_exact's error-free transformations must not be contracted
 * into FMAs across statements (GCC's default for GNU C where the target
 * has them). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "whiten.h"
#include "threads.h"

/* Rows per task: a block of every column stays in cache while it is read. */
#define WHITEN_ROWS 2048

void kde_whiten(const double *x, int64_t n, int64_t d, const double *center,
                const double *transform, int threads, double *out)
{
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) (d * d));
  const int64_t n_blocks = (n + WHITEN_ROWS - 1) / WHITEN_ROWS;
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t block = 0; block < n_blocks; block++) {
    const int64_t begin = block * WHITEN_ROWS;
    const int64_t end = begin + WHITEN_ROWS < n ? begin + WHITEN_ROWS : n;
    for (int64_t c = 0; c < d; c++) {
      double *out_c = out + c * n;
      for (int64_t i = begin; i < end; i++) out_c[i] = 0.0;
      for (int64_t k = 0; k < d; k++) {
        const double t = transform[k + c * d];
        if (t == 0.0) continue; /* the transform is triangular */
        const double *x_k = x + k * n;
        const double center_k = center[k];
#pragma omp simd
        for (int64_t i = begin; i < end; i++) out_c[i] += (x_k[i] - center_k) * t;
      }
    }
  }
}

/* s + e == a + b and p + e == a * b exactly (Knuth's two-sum, the FMA's
 * two-product). */
static inline void two_sum(double a, double b, double *s, double *e)
{
  *s = a + b;
  const double v = *s - a;
  *e = (a - (*s - v)) + (b - v);
}
static inline void two_product(double a, double b, double *p, double *e)
{
  *p = a * b;
  *e = fma(a, b, -*p);
}

void kde_whiten_row_exact(const double *x, int64_t ldx, int64_t row, int64_t d,
                          const double *center, const double *transform, double *hi,
                          double *lo, double *size)
{
  for (int64_t c = 0; c < d; c++) hi[c] = lo[c] = 0.0;
  if (size != NULL) for (int64_t c = 0; c < d; c++) size[c] = 0.0;
  for (int64_t k = 0; k < d; k++) {
    double xk, xk_lo;
    two_sum(x[row + k * ldx], -center[k], &xk, &xk_lo);
    for (int64_t c = 0; c < d; c++) {
      const double t = transform[k + c * d];
      if (t == 0.0) continue;
      double p, p_lo, sum, sum_lo;
      two_product(xk, t, &p, &p_lo);
      two_sum(hi[c], p, &sum, &sum_lo);
      hi[c] = sum;
      lo[c] += sum_lo + fma(xk_lo, t, p_lo);
      if (size != NULL) size[c] += fabs(p);
    }
  }
  for (int64_t c = 0; c < d; c++) {
    double sum, sum_lo;
    two_sum(hi[c], lo[c], &sum, &sum_lo);
    hi[c] = sum;
    lo[c] = sum_lo;
  }
}

void kde_whiten_residual(const double *x, int64_t n, int64_t d, const double *center,
                         const double *transform, int threads, const double *z,
                         double *residual)
{
  const int n_threads = kde_thread_count_for(threads, 8.0 * (double) n * (double) (d * d));
#pragma omp parallel num_threads(n_threads)
  {
    double hi[KDE_WHITEN_EXACT_MAX_DIM], lo[KDE_WHITEN_EXACT_MAX_DIM];
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      kde_whiten_row_exact(x, n, i, d, center, transform, hi, lo, NULL);
      for (int64_t c = 0; c < d; c++) {
        const double lost = (hi[c] - z[i + c * n]) + lo[c];
        /* rounded as a fit's own residuals are (kde_fit_residual), so that a
         * query on a training point lands on it; a float that would
         * overflow (a query far beyond any fit that has residuals) stays */
        residual[i + c * n] = fabs(lost) < 0x1p127 ? (double) (float) lost : lost;
      }
    }
  }
}

/* A z that differs from the raw points' whitening by more than this,
 * relative to the sum of the whitening's terms' magnitudes, is not their
 * whitening. */
#define WHITEN_SAME_POINTS 0x1p-40

int kde_fit_residual(const double *z, int64_t n, int64_t d, const double *raw, int64_t n_raw,
                     const int64_t *order, const double *center, const double *transform,
                     int threads, float *residual)
{
  if (d > KDE_WHITEN_EXACT_MAX_DIM) return 0;
  for (int64_t i = 0; i < n; i++)
    if (order[i] < 0 || order[i] >= n_raw) return 0;
  int same = 1;
  const int n_threads = kde_thread_count_for(threads, 8.0 * (double) n * (double) (d * d));
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(&& : same)
  for (int64_t i = 0; i < n; i++) {
    double hi[KDE_WHITEN_EXACT_MAX_DIM], lo[KDE_WHITEN_EXACT_MAX_DIM],
        size[KDE_WHITEN_EXACT_MAX_DIM];
    kde_whiten_row_exact(raw, n_raw, order[i], d, center, transform, hi, lo, size);
    for (int64_t k = 0; k < d; k++) {
      const double lost = (hi[k] - z[i + k * n]) + lo[k];
      residual[i + k * n] = (float) lost;
      same = same && fabs(lost) <= WHITEN_SAME_POINTS * size[k] + 0x1p-1000 &&
             isfinite(residual[i + k * n]);
    }
  }
  return same;
}
