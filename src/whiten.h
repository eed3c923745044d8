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
 * near 0 keeps the terms' rounding, not its own); or every row,
 * column-major, for d <= KDE_WHITEN_EXACT_MAX_DIM. */
#define KDE_WHITEN_EXACT_MAX_DIM 8
void kde_whiten_row_exact(const double *x, int64_t ldx, int64_t row, int64_t d,
                          const double *center, const double *transform, double *hi,
                          double *lo, double *size);
void kde_whiten_exact(const double *x, int64_t n, int64_t d, const double *center,
                      const double *transform, int threads, double *hi, double *lo);

#ifdef __cplusplus
}
#endif

#endif
