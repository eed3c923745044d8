/*
 * The CPU backend's offset mode (kde_backend.h's kde_cpu_tiles): per point
 * the rounding its whitened coordinates lost, so that data far from their
 * centre keep double's digits (cpu_block.c forms each block's pairs
 * relative to one of its queries).
 */
#include <math.h>
#include <stdlib.h>

#include "kde_backend.h"
#include "whiten.h"

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
  float *residual = (float *) malloc((size_t) (n * d) * sizeof(float));
  if (residual == NULL) return -1;
  if (!kde_whitening_residual(train->train, n, d, raw, n_raw, order, center, transform,
                              threads, residual)) {
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
