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
 * kde_whiten_row_exact (d <= KDE_WHITEN_EXACT_MAX_DIM), rounded to float
 * as kde_fit_residual's are. */
void kde_whiten_residual(const double *x, int64_t n, int64_t d, const double *center,
                         const double *transform, int threads, const double *z,
                         double *residual);

/* What the whitened points z (n x d, column-major) lost to rounding: for
 * the raw rows raw[order[i]] (raw: n_raw x d; order 0-based) whitened by
 * center and transform, the exact whitening minus z, as floats, into
 * residual (n x d). 1 when z is that whitening (to 2^-40 of its terms'
 * magnitudes) and every residual is a finite float; else 0 (the data were
 * not these points), also for d > KDE_WHITEN_EXACT_MAX_DIM or an order out
 * of range. The offset modes' (arg_fit_residual in api_glue.c). */
int kde_fit_residual(const double *z, int64_t n, int64_t d, const double *raw, int64_t n_raw,
                     const int64_t *order, const double *center, const double *transform,
                     int threads, float *residual);

#ifdef __cplusplus
}
#endif

#endif
