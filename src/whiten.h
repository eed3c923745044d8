/* z = (x - center) T for an n x d column-major x and a d x d transform. */
#ifndef KDEGPU_WHITEN_H
#define KDEGPU_WHITEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void kde_whiten(const double *x, int64_t n, int64_t d, const double *center,
                const double *transform, int threads, double *out);

/* The same to twice double's precision: hi + lo within about 2^-100 |z|
 * of the exact (x - center) T, for the CPU's offset mode (kde_backend.h's
 * kde_cpu_tiles). Row `row` of x (leading dimension ldx) into hi[0 .. d),
 * lo[0 .. d), and (size not NULL) the sum of its terms' magnitudes, which
 * bounds what kde_whiten's rounding loses (a coordinate that cancels to
 * near 0 keeps the terms' rounding, not its own). d <=
 * KDE_WHITEN_EXACT_MAX_DIM. */
#define KDE_WHITEN_EXACT_MAX_DIM 8
void kde_whiten_row_exact(const double *x, int64_t ldx, int64_t row, int64_t d,
                          const double *center, const double *transform, double *hi,
                          double *lo, double *size);
/* What kde_whiten's z (n x d, column-major, from these x) lost to
 * rounding: residual = the exact whitening - z, each row by
 * kde_whiten_row_exact (d <= KDE_WHITEN_EXACT_MAX_DIM). */
void kde_whiten_residual(const double *x, int64_t n, int64_t d, const double *center,
                         const double *transform, int threads, const double *z,
                         double *residual);

#ifdef __cplusplus
}
#endif

#endif
