/*
 * Spatial order and bounding boxes (spatial.c): what lets an evaluation
 * skip, with a proven bound, the training tiles that cannot change a
 * query's result (see kde_cpu.c and kde_backend.h's tolerance).
 */
#ifndef KDEGPU_SPATIAL_H
#define KDEGPU_SPATIAL_H

#include <stddef.h>
#include <stdint.h>

#include <kdegpu/kernels.h> /* KDE_HD: the box distances serve the device plan too */

#ifdef __cplusplus
extern "C" {
#endif

/* A k-d order of the n rows of the column-major n x d matrix z, made in
 * place: split at the median of the widest coordinate, recursively, with
 * every split at a multiple of `leaf` rows, so that each run of `leaf`
 * consecutive rows (the last may be shorter) is a spatially compact cell;
 * with sub_leaf > 0, each such cell is ordered the same way into runs of
 * sub_leaf rows. z ends sorted, and order[i] is the original row of its
 * row i (a permutation of 0..n-1). Deterministic: the same for any thread
 * count. To order rows that must stay put, sort a copy. */
void kde_kd_sort(double *z, int64_t n, int64_t d, int64_t leaf, int64_t sub_leaf,
                 int threads, int64_t *order);

/* The bounding box of each run of `tile` consecutive rows of x (n x d,
 * column-major): lo and hi hold n_tiles x d values, tile-major
 * (lo[t * d + k]), n_tiles = ceil(n / tile). */
void kde_tile_boxes(const double *x, int64_t n, int64_t d, int64_t tile,
                    int threads, double *lo, double *hi);

/* The boxes of kde_tile_boxes widened for the offset mode (kde_backend.h's
 * kde_cpu_tiles, the CUDA model's residuals): the boxes hold the rounded
 * points, the pairs the exact ones, so each widens by twice its points'
 * largest residual (n x d floats, column-major) and by 2^-48 of its
 * largest coordinate, for the residuals of the queries near it (a few ulps
 * of theirs); a compact kernel's support test then never skips a tile whose
 * exact pairs reach into the support. */
void kde_tile_boxes_widen(const float *residual, int64_t n, int64_t d, int64_t tile,
                          int threads, double *lo, double *hi);

/* Writes a zero into each 4 KB page of p's `bytes`, the pages in
 * contiguous shares of the threads: a buffer about to be overwritten whole
 * (a fresh result vector, a copy's destination) is faulted in without
 * contention, where random writes or a driver's copy fault it in from
 * every thread at once or from one. */
void kde_first_touch(void *p, size_t bytes, int threads);

/* memcpy(dst, src, bytes) in contiguous shares of up to `threads` threads
 * (at most 8: a copy between host buffers is bound by memory bandwidth,
 * which one thread does not reach). */
void kde_copy_bytes(void *dst, const void *src, size_t bytes, int threads);

/* dst[order[i]] = src[i] for i < n: results computed in a spatial order
 * put back in the caller's (random writes: in parallel, they take 1/10 of
 * the time at 1e7 rows; a fresh dst that they fill whole is best touched
 * first, kde_first_touch). */
void kde_scatter_rows(const double *src, const int64_t *order, int64_t n,
                      int threads, double *dst);

/* dst[i] = src[order[i]] for i < n: a column put in a spatial order (random
 * reads, in parallel: the host's ordering of 2.5e8 queries gathered their
 * lo parts on one thread). */
void kde_gather_rows(const double *src, const int64_t *order, int64_t n, int threads,
                     double *dst);

/* The bounding box of rows [begin, end) of x (n x d, column-major):
 * lo[k], hi[k] for each coordinate k. */
static inline void kde_rows_box(const double *x, int64_t n, int64_t d,
                                int64_t begin, int64_t end, double *lo,
                                double *hi)
{
  for (int64_t k = 0; k < d; k++) {
    const double *col = x + k * n;
    double l = col[begin], h = l;
    for (int64_t i = begin + 1; i < end; i++) {
      l = col[i] < l ? col[i] : l;
      h = col[i] > h ? col[i] : h;
    }
    lo[k] = l;
    hi[k] = h;
  }
}

/* The smallest and the largest squared distance between a point of box a
 * and a point of box b (d coordinates each). Host and device (the GPU's
 * plan, src/cuda/plan.cu, makes prune.c's decision with it). */
KDE_HD void kde_box_distances(const double *a_lo, const double *a_hi,
                                     const double *b_lo, const double *b_hi,
                                     int64_t d, double *min2, double *max2)
{
  double near = 0.0, far = 0.0;
  for (int64_t k = 0; k < d; k++) {
    double below = b_lo[k] - a_hi[k]; /* b entirely above a: positive */
    double above = a_lo[k] - b_hi[k]; /* b entirely below a: positive */
    double gap = below > above ? below : above;
    if (gap > 0) near += gap * gap;
    double span1 = b_hi[k] - a_lo[k], span2 = a_hi[k] - b_lo[k];
    double span = span1 > span2 ? span1 : span2;
    far += span * span;
  }
  *min2 = near;
  *max2 = far;
}

#ifdef __cplusplus
}
#endif

#endif
