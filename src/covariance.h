/* The weighted covariance of points (covariance.c). */
#ifndef KDEGPU_COVARIANCE_H
#define KDEGPU_COVARIANCE_H

#include <stdint.h>

/* S (d x d, column-major) = sum_i w_i (x_i - m)(x_i - m)', m = sum_i w_i
 * x_i, for the rows of the column-major n x d matrix x and weights w that
 * sum to 1 (the caller divides by its divisor); points of weight 0 take no
 * part. Returns 0; -1 when no weight is positive; -2 when out of memory;
 * -3 when d < 1. */
int kde_weighted_cov(const double *x, int64_t n, int64_t d, const double *w, int threads,
                     double *S);

#endif /* KDEGPU_COVARIANCE_H */
