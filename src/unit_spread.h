/*
 * unit_spread.h: where each training point lies in the CUDA backend's
 * layout of units (unit_spread.c). A spatially ordered training set comes
 * in runs of `unit` points (the k-d order's leaves); where a run spans a
 * gap in the data (points of two clusters, or a cluster's far tail) its box
 * is wide, and an anchored model (src/cuda/model.cuh) stores its points
 * relative to the box's centre with an error of the precision's epsilon
 * times the box's width: 3e-5 of a density in single precision on clusters
 * 800 bandwidths apart. Such runs are split at their widest gaps into runs
 * of their own, each padded to a whole unit with null points (weight 0),
 * so that every unit is at most `width` wide.
 */
#ifndef KDEGPU_UNIT_SPREAD_H
#define KDEGPU_UNIT_SPREAD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t n_positions; /* a multiple of the unit; 0: no run needed a split */
  int64_t *point_at;   /* n_positions: the point at each position, -1 if null */
  int64_t *position_of; /* n: where point i lies */
  double width;        /* the widest a split unit may be (bandwidths) */
} kde_unit_spread;

/* The layout of the n points of z (n x d, column-major, in bandwidth
 * units: whitened), runs of `unit` consecutive points: every run wider
 * than `width` along some coordinate split, recursively at its widest
 * gap, until each part is at most `width` wide, and each part given a
 * unit of its own; `width` doubled while that would take more than
 * (1 + max_growth) times the units of the plain layout, and 64 more, at
 * most three times. 0 with
 * spread->n_positions = 0 where no run needs a split (the plain layout
 * serves), 0 with the layout, or -1 out of memory. */
int kde_unit_spread_make(const double *z, int64_t n, int64_t d, int64_t unit, double width,
                         double max_growth, int threads, kde_unit_spread *spread);

void kde_unit_spread_free(kde_unit_spread *spread);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_UNIT_SPREAD_H */
