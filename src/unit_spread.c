/*
 * unit_spread.c: the CUDA backend's layout of a spatially ordered training
 * set, with its wide runs split (unit_spread.h says why).
 */
#include <stdlib.h>
#include <string.h>

#include "unit_spread.h"
#include "spatial.h"
#include "threads.h"

/* Runs longer than this are left as they are (the backend's unit is 256). */
#define SPREAD_MAX_UNIT 1024
/* Units a layout may add beyond max_growth (small fits of a few runs; 16,384 null points at most) */
#define SPREAD_SPARE_UNITS 64
/* Doublings of the width before giving up on splitting: past 8 times the
 * width asked for, a split buys too little precision for its units. */
#define SPREAD_MAX_DOUBLINGS 3

typedef struct {
  double v;
  int64_t at; /* position in the run */
} keyed;

static int by_value(const void *a, const void *b)
{
  const keyed *x = (const keyed *) a, *y = (const keyed *) b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return (x->at > y->at) - (x->at < y->at);
}

/* The widest extent over coordinates of the points idx[0 .. len), and its
 * coordinate. */
static double widest(const double *z, int64_t n, int64_t d, const int64_t *idx, int64_t len,
                     int64_t *axis)
{
  double best = -1.0;
  *axis = 0;
  for (int64_t k = 0; k < d; k++) {
    const double *col = z + k * n;
    double lo = col[idx[0]], hi = lo;
    for (int64_t p = 1; p < len; p++) {
      const double v = col[idx[p]];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (hi - lo > best) {
      best = hi - lo;
      *axis = k;
    }
  }
  return best;
}

/* Splits the points idx[0 .. len) into parts at most `width` wide, at the
 * widest gap along the widest coordinate, recursively: idx is reordered so
 * that each part is contiguous (in its old order), and the parts' lengths
 * go to parts[]. Returns how many parts. sorted, right: scratch of len
 * entries (free again before each recursive call). */
static int64_t split_run(const double *z, int64_t n, int64_t d, int64_t *idx, int64_t len,
                         double width, int64_t *parts, keyed *sorted, int64_t *right)
{
  int64_t axis;
  if (len <= 1 || !(widest(z, n, d, idx, len, &axis) > width)) {
    parts[0] = len;
    return 1;
  }
  const double *col = z + axis * n;
  for (int64_t p = 0; p < len; p++) {
    sorted[p].v = col[idx[p]];
    sorted[p].at = p;
  }
  qsort(sorted, (size_t) len, sizeof(keyed), by_value);
  int64_t cut = 0;
  double gap = -1.0;
  for (int64_t p = 0; p + 1 < len; p++) {
    if (sorted[p + 1].v - sorted[p].v > gap) {
      gap = sorted[p + 1].v - sorted[p].v;
      cut = p;
    }
  }
  /* below the gap first, each side in its old order */
  const double threshold = sorted[cut].v;
  int64_t n_left = 0, n_right = 0;
  for (int64_t p = 0; p < len; p++) {
    if (col[idx[p]] <= threshold) idx[n_left++] = idx[p];
    else right[n_right++] = idx[p];
  }
  memcpy(idx + n_left, right, (size_t) n_right * sizeof(int64_t));
  const int64_t k = split_run(z, n, d, idx, n_left, width, parts, sorted, right);
  return k + split_run(z, n, d, idx + n_left, n_right, width, parts + k, sorted, right);
}

void kde_unit_spread_free(kde_unit_spread *spread)
{
  free(spread->point_at);
  free(spread->position_of);
  memset(spread, 0, sizeof *spread);
}

int kde_unit_spread_make(const double *z, int64_t n, int64_t d, int64_t unit, double width,
                         double max_growth, int threads, kde_unit_spread *spread)
{
  memset(spread, 0, sizeof *spread);
  if (n < 1 || d < 1 || unit < 1 || unit > SPREAD_MAX_UNIT || !(width > 0)) return 0;
  const int64_t n_runs = (n + unit - 1) / unit;
  const double most_units = (double) n_runs * (1.0 + max_growth) + SPREAD_SPARE_UNITS;
  double *extent = (double *) malloc((size_t) n_runs * sizeof(double));
  double *box_lo = (double *) malloc((size_t) n_runs * d * sizeof(double));
  double *box_hi = (double *) malloc((size_t) n_runs * d * sizeof(double));
  int64_t *order = NULL, *part_len = NULL, *n_parts = NULL, *unit_first = NULL;
  int ok = 0;
  if (extent == NULL || box_lo == NULL || box_hi == NULL) goto cleanup;
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d);
  kde_tile_boxes(z, n, d, unit, threads, box_lo, box_hi);
  for (int64_t r = 0; r < n_runs; r++) {
    extent[r] = 0.0;
    for (int64_t k = 0; k < d; k++) {
      const double span = box_hi[r * d + k] - box_lo[r * d + k];
      extent[r] = span > extent[r] ? span : extent[r];
    }
  }
  for (int doubling = 0; doubling <= SPREAD_MAX_DOUBLINGS; doubling++, width *= 2) {
    /* each wide run takes a unit more at least: no split where that is
     * already too many */
    int64_t wide = 0;
    for (int64_t r = 0; r < n_runs; r++) wide += extent[r] > width;
    if (wide == 0) {
      ok = 1; /* the plain layout serves */
      goto cleanup;
    }
    if ((double) (n_runs + wide) > most_units) continue;
    if (order == NULL) {
      order = (int64_t *) malloc((size_t) n * sizeof(int64_t));
      part_len = (int64_t *) malloc((size_t) n * sizeof(int64_t));
      n_parts = (int64_t *) malloc((size_t) n_runs * sizeof(int64_t));
      unit_first = (int64_t *) malloc((size_t) n_runs * sizeof(int64_t));
      if (order == NULL || part_len == NULL || n_parts == NULL || unit_first == NULL)
        goto cleanup;
    }
    int64_t total = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 64) reduction(+ : total)
    for (int64_t r = 0; r < n_runs; r++) {
      const int64_t first = r * unit, len = first + unit <= n ? unit : n - first;
      if (extent[r] > width) { /* order: the run's points as split_run leaves them */
        for (int64_t p = 0; p < len; p++) order[first + p] = first + p;
        keyed sorted[SPREAD_MAX_UNIT];
        int64_t right[SPREAD_MAX_UNIT];
        n_parts[r] = split_run(z, n, d, order + first, len, width, part_len + first, sorted,
                               right);
      } else {
        n_parts[r] = 1;
        part_len[first] = len;
      }
      total += n_parts[r];
    }
    if ((double) total > most_units) continue;
    /* the layout: each part at the start of a unit of its own, run r's
     * from unit unit_first[r] on; the runs in parallel (every position and
     * every point is written once) */
    spread->n_positions = total * unit;
    spread->width = width;
    spread->point_at = (int64_t *) malloc((size_t) spread->n_positions * sizeof(int64_t));
    spread->position_of = (int64_t *) malloc((size_t) n * sizeof(int64_t));
    if (spread->point_at == NULL || spread->position_of == NULL) goto cleanup;
    for (int64_t r = 0, u = 0; r < n_runs; r++) {
      unit_first[r] = u;
      u += n_parts[r];
    }
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t r = 0; r < n_runs; r++) {
      const int64_t first = r * unit;
      const int split = extent[r] > width;
      int64_t from = first;
      for (int64_t k = 0; k < n_parts[r]; k++) {
        int64_t *at = spread->point_at + (unit_first[r] + k) * unit;
        const int64_t len = part_len[first + k];
        for (int64_t p = 0; p < len; p++) {
          const int64_t i = split ? order[from + p] : from + p;
          at[p] = i;
          spread->position_of[i] = at - spread->point_at + p;
        }
        for (int64_t p = len; p < unit; p++) at[p] = -1;
        from += len;
      }
    }
    ok = 1;
    goto cleanup;
  }
  ok = 1; /* no width within the growth: the plain layout */
cleanup:
  free(extent);
  free(box_lo);
  free(box_hi);
  free(order);
  free(part_len);
  free(n_parts);
  free(unit_first);
  if (!ok) {
    kde_unit_spread_free(spread);
    return -1;
  }
  return 0;
}
