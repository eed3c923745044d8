/*
 * The CPU backend's offset mode (kde_backend.h's kde_cpu_tiles): per point
 * the rounding its whitened coordinates lost, so that data far from their
 * centre keep double's digits (cpu_block.c forms each block's pairs
 * relative to one of its queries).
 */
#include <math.h>
#include <stdlib.h>

#include "kde_backend.h"
#include "threads.h"
#include "whiten.h"

/* The residual must be what train lost to rounding: a train that differs
 * from the raw points' whitening by more than this, relative to the sum of
 * the whitening's terms' magnitudes, is not their whitening. */
#define OFFSET_SAME_POINTS 0x1p-40
/* The skipping's boxes are the rounded points' and the queries' rounded
 * coordinates, the pairs the exact ones: each tile's box is widened by its
 * points' largest residual and by this much of its largest coordinate, for
 * the residuals of the queries near it (at most a few ulps of theirs), so
 * that a compact kernel's support test never skips a tile whose exact
 * pairs reach into the support. */
#define OFFSET_QUERY_SLACK 0x1p-48

int kde_cpu_offsets_make(const kde_training_set *train, const double *raw, int64_t n_raw,
                         const int64_t *order, const double *center,
                         const double *transform, int threads, kde_cpu_tiles *tiles)
{
  const int64_t n = train->n_train, d = train->dim, tile = train->tile_size;
  if (raw == NULL || order == NULL || center == NULL || transform == NULL || tile < 1 ||
      d > KDE_WHITEN_EXACT_MAX_DIM || tiles->n_tiles != (n + tile - 1) / tile)
    return 0;
  double extent = 0.0;
  for (int64_t i = 0; i < tiles->n_tiles * d; i++) {
    extent = fabs(tiles->lo[i]) > extent ? fabs(tiles->lo[i]) : extent;
    extent = fabs(tiles->hi[i]) > extent ? fabs(tiles->hi[i]) : extent;
  }
  if (!(extent >= KDE_OFFSET_MIN_EXTENT)) return 0;
  for (int64_t i = 0; i < n; i++)
    if (order[i] < 0 || order[i] >= n_raw) return 0;

  float *residual = (float *) malloc((size_t) (n * d) * sizeof(float));
  if (residual == NULL) return -1;
  int same = 1;
  const int n_threads = kde_thread_count_for(threads, 8.0 * (double) n * (double) (d * d));
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(&& : same)
  for (int64_t i = 0; i < n; i++) {
    double hi[KDE_WHITEN_EXACT_MAX_DIM], lo[KDE_WHITEN_EXACT_MAX_DIM],
        size[KDE_WHITEN_EXACT_MAX_DIM];
    kde_whiten_row_exact(raw, n_raw, order[i], d, center, transform, hi, lo, size);
    for (int64_t k = 0; k < d; k++) {
      const double z = train->train[i + k * n], lost = (hi[k] - z) + lo[k];
      residual[i + k * n] = (float) lost;
      same = same && fabs(lost) <= OFFSET_SAME_POINTS * size[k] + 0x1p-1000 &&
             isfinite(residual[i + k * n]);
    }
  }
  if (!same) {
    free(residual);
    return 0;
  }
  /* the boxes widened (OFFSET_QUERY_SLACK) */
  for (int64_t t = 0; t < tiles->n_tiles; t++) {
    const int64_t first = t * tile, last = first + tile < n ? first + tile : n;
    for (int64_t k = 0; k < d; k++) {
      double *lo = tiles->lo + t * d + k, *hi = tiles->hi + t * d + k;
      double pad = OFFSET_QUERY_SLACK * (fabs(*lo) > fabs(*hi) ? fabs(*lo) : fabs(*hi));
      float most = 0.0f;
      for (int64_t j = first; j < last; j++)
        most = fabsf(residual[j + k * n]) > most ? fabsf(residual[j + k * n]) : most;
      pad += 2.0 * (double) most;
      *lo -= pad;
      *hi += pad;
    }
  }
  /* and the groups of tiles, which plans bound first, of the wider boxes */
  kde_prune_groups_free(&tiles->groups);
  if (kde_prune_groups_make(d, tiles->n_tiles, tiles->lo, tiles->hi, tiles->log_weight,
                            tiles->log_rest, &tiles->groups) != 0) {
    free(residual);
    return -1;
  }
  tiles->residual = residual;
  return 1;
}
