/*
 * The CPU's standard kernel draws for sample() (R/sample.R), from R's
 * generator: for the Gaussian, normals (as matrix(rnorm(size * d), size));
 * otherwise the direction of d normals times the kernel's radius
 * (kdegpu/radius.h, the law the GPU's sampler shares).
 */
#include <limits.h>
#include <math.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "api_glue.h"

/* R's generator keeps its own state. */
typedef int kde_radius_rng;
#define KDE_RADIUS_FN static inline
static inline double kde_radius_uniform(kde_radius_rng *rng)
{
  (void) rng;
  return unif_rand();
}
static inline double kde_radius_exponential(kde_radius_rng *rng)
{
  (void) rng;
  return exp_rand();
}
#include <kdegpu/radius.h>

/* Draws between interrupt polls. */
#define DRAWS_PER_POLL 65536

/* size x dim standard draws of `kernel` (identity covariance, radius scale
 * 1: R multiplies by the kernel's scale). */
SEXP kdegpu_standard_draws(SEXP kernel, SEXP size, SEXP dim, SEXP progress_delay)
{
  const int k = arg_kernel(kernel);
  const double draws = arg_double_scalar(size, "size");
  const int d = arg_int_scalar(dim, "dim");
  if (!(draws >= 0) || draws > INT_MAX || draws != floor(draws))
    Rf_error("`size` must be a whole number in 0..%d", INT_MAX);
  if (d < 1 || (double) d * draws > (double) R_XLEN_T_MAX)
    Rf_error("`dim` must be positive, with size x dim draws in one R matrix");
  const int64_t n = (int64_t) draws;
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) n, d));
  double *z = REAL(out);
  double *g = (double *) R_alloc((size_t) d, sizeof(double));
  kde_radius_rng rng = 0;
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  GetRNGstate();
  if (k == KDE_GAUSSIAN) {
    for (int64_t at = 0; at < n * d; at++) {
      z[at] = norm_rand();
      if ((at + 1) % DRAWS_PER_POLL == 0 && at + 1 < n * d &&
          poll_between_chunks((double) (at + 1) / (double) (n * d))) {
        kde_status_set(&status, KDE_ERR_INTERRUPTED, "interrupted by the user");
        break;
      }
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      double norm2 = 0;
      for (int c = 0; c < d; c++) {
        g[c] = norm_rand();
        norm2 += g[c] * g[c];
      }
      const double factor = kde_kernel_radius(k, d, norm2, &rng) / sqrt(norm2);
      for (int c = 0; c < d; c++) z[i + c * n] = g[c] * factor;
      if ((i + 1) % DRAWS_PER_POLL == 0 && i + 1 < n &&
          poll_between_chunks((double) (i + 1) / (double) n)) {
        kde_status_set(&status, KDE_ERR_INTERRUPTED, "interrupted by the user");
        break;
      }
    }
  }
  PutRNGstate();
  UNPROTECT(1);
  raise_status(&status);
  return out;
}
