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

/* Where the points of positive weight w_i lie: returns their number, sets
 * *first to the first one's row (-1: none) and constant[k] to 1 where
 * column k of x (n x d, column-major) takes one value on all of them. */
int64_t kde_weighted_spread(const double *x, int64_t n, int64_t d, const double *w,
                            int64_t *first, int *constant);

#endif /* KDEGPU_COVARIANCE_H */
