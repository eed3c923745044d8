/* exp() of R's long result vectors on every allowed core. */
#ifndef KDEGPU_EXP_VALUES_H
#define KDEGPU_EXP_VALUES_H

#include <stdint.h>

/* y[i] = exp(x[i]) for i in [0, n), as R's exp() gives it: the C
 * library's exp, an NA or NaN passed through as it is. */
void kde_exp_values(const double *x, double *y, int64_t n, int threads);

#endif
