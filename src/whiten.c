/*
 * Whitening of points, z = (x - center) T, for every evaluation's queries:
 * in C with OpenMP because R's reference BLAS does this n x d by d x d
 * product on one core at about 1 GFLOP/s, which at d = 64 took longer than
 * the GPU evaluation it prepared.
 */
#include <stdint.h>

#include "whiten.h"
#include "threads.h"

/* Rows per task: a block of every column stays in cache while it is read. */
#define WHITEN_ROWS 2048

void kde_whiten(const double *x, int64_t n, int64_t d, const double *center,
                const double *transform, int threads, double *out)
{
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) (d * d));
  const int64_t n_blocks = (n + WHITEN_ROWS - 1) / WHITEN_ROWS;
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t block = 0; block < n_blocks; block++) {
    const int64_t begin = block * WHITEN_ROWS;
    const int64_t end = begin + WHITEN_ROWS < n ? begin + WHITEN_ROWS : n;
    for (int64_t c = 0; c < d; c++) {
      double *out_c = out + c * n;
      for (int64_t i = begin; i < end; i++) out_c[i] = 0.0;
      for (int64_t k = 0; k < d; k++) {
        const double t = transform[k + c * d];
        if (t == 0.0) continue; /* the transform is triangular */
        const double *x_k = x + k * n;
        const double center_k = center[k];
#pragma omp simd
        for (int64_t i = begin; i < end; i++) out_c[i] += (x_k[i] - center_k) * t;
      }
    }
  }
}
