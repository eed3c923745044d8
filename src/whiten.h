/* z = (x - center) T for an n x d column-major x and a d x d transform. */
#ifndef KDEGPU_WHITEN_H
#define KDEGPU_WHITEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void kde_whiten(const double *x, int64_t n, int64_t d, const double *center,
                const double *transform, int threads, double *out);

#ifdef __cplusplus
}
#endif

#endif
