/* The kernel estimate's cumulative distribution function (cdf.c). */
#ifndef KDEGPU_CDF_H
#define KDEGPU_CDF_H

#include <stdint.h>

#include "kde_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * F(x) = sum_j w_j prod_c F_jc(x_c): a product kernel, so the 1-D kernel
 * (any kernel, dim = 1) or the Gaussian with a diagonal H (any dim), with
 * sd bandwidth[c] in coordinate c. A bounded coordinate (lower[c] or
 * upper[c] finite) is folded into [lower, upper]: its density there is
 * sum_g f(s_g x + t_g) over the images g (see R/bounds.R), so
 *   F_jc(x) = sum_g P(x_jc + bandwidth[c] U in g^{-1}[lower, x]),
 * 0 below lower and 1 from upper on. Matrices are column-major.
 */
typedef struct {
  int kernel;                 /* kde_kernel */
  int64_t n_train, dim;
  const double *train;        /* n_train x dim, the data's own coordinates */
  const double *weight;       /* n_train, >= 0, sum 1 */
  const double *bandwidth;    /* dim kernel sds */
  const double *scale;        /* NULL, or n_train factors lambda_j of an
                                 adaptive fit: point j's sds are
                                 lambda_j bandwidth[c] */
  const double *lower, *upper;/* dim bounds, -inf / inf where none */
  const int64_t *image_count; /* dim: images of each coordinate (>= 1) */
  const double *image_sign;   /* sum(image_count): +1 or -1, coordinate by */
  const double *image_shift;  /*   coordinate: g^{-1} x = sign x + shift */
} kde_cdf_problem;

void kde_cpu_cdf(const kde_cdf_problem *problem, const double *query,
                 int64_t n_query, int threads, kde_interrupt_probe interrupted,
                 double *out, kde_status *status);

#ifdef __cplusplus
}
#endif

#endif
