/*
 * The CPU backend's offset mode (kde_backend.h's kde_cpu_tiles): per point
 * the rounding its whitened coordinates lost, so that data far from their
 * centre keep double's digits (cpu_block.c forms each block's pairs
 * relative to one of its queries).
 */
#include <stdlib.h>

#include "kde_backend.h"
#include "spatial.h"

int kde_cpu_offsets_make(const kde_training_set *train, float *residual, kde_cpu_tiles *tiles)
{
  const int64_t n = train->n_train, d = train->dim, tile = train->tile_size;
  if (tile < 1 || tiles->n_tiles != (n + tile - 1) / tile) {
    free(residual);
    return 0;
  }
  kde_tile_boxes_widen(residual, n, d, tile, train->host_threads, tiles->lo, tiles->hi);
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
