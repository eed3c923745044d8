/* The scan for NA, NaN and Inf that every matrix from R goes through. */
#ifndef KDEGPU_FINITE_H
#define KDEGPU_FINITE_H

#include <stdint.h>

/* Index (from 0) of the first value of x[0..n) that is not finite, or -1. */
int64_t kde_first_nonfinite(const double *x, int64_t n, int threads);

#endif
