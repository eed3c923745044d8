/*
 * Spatial order and bounding boxes. A k-d order puts nearby points next to
 * each other, so that a run of consecutive points (a tile of training
 * points, a block of queries) fills a small box; the distance between two
 * boxes then bounds the kernel value of every pair they hold, which is
 * what lets an evaluation skip whole tiles with a proof.
 *
 * The split is the median of the widest coordinate (the classic k-d rule;
 * for the 1-5 dimensional data this is for it gives boxes whose widest
 * side shrinks by half every d levels), placed at a multiple of the leaf
 * size so that leaves are whole tiles. The selection is a three-way
 * quickselect (duplicate coordinates, common in real data, cost nothing
 * extra) with pivots from a fixed-seed generator, so the order is the same
 * on every run and for every thread count.
 */
#include "spatial.h"
#include "threads.h"

/* Ranges at least this long are sorted as tasks of their own. */
#define TASK_MIN_ROWS ((int64_t) 1 << 15)

static inline uint64_t next_random(uint64_t *state)
{
  /* splitmix64 */
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Rearranges idx[0..len) so that the row at position k has the k-th
 * smallest key (key[idx[.]]), smaller or equal keys before it, larger or
 * equal after. */
static void select_kth(int64_t *idx, int64_t len, int64_t k, const double *key,
                       uint64_t seed)
{
  int64_t lo = 0, hi = len; /* the k-th lies in [lo, hi) */
  uint64_t state = seed;
  while (hi - lo > 1) {
    double pivot = key[idx[lo + (int64_t) (next_random(&state) % (uint64_t) (hi - lo))]];
    /* three-way partition of [lo, hi): < pivot, == pivot, > pivot */
    int64_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      double v = key[idx[i]];
      if (v < pivot) {
        int64_t t = idx[lt]; idx[lt] = idx[i]; idx[i] = t;
        lt++; i++;
      } else if (v > pivot) {
        gt--;
        int64_t t = idx[gt]; idx[gt] = idx[i]; idx[i] = t;
      } else {
        i++;
      }
    }
    if (k < lt) hi = lt;
    else if (k >= gt) lo = gt;
    else return; /* position k holds the pivot value */
  }
}

/* The coordinate with the widest spread over rows idx[0..len). */
static int64_t widest_axis(const double *x, int64_t n, int64_t d,
                           const int64_t *idx, int64_t len)
{
  int64_t best = 0;
  double best_span = -1.0;
  for (int64_t k = 0; k < d; k++) {
    const double *col = x + k * n;
    double lo = col[idx[0]], hi = lo;
    for (int64_t i = 1; i < len; i++) {
      double v = col[idx[i]];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (hi - lo > best_span) {
      best_span = hi - lo;
      best = k;
    }
  }
  return best;
}

/* Orders idx[0..len) into leaves of `leaf` rows; each leaf then into
 * sub-leaves of `sub_leaf` rows (0: none), so that runs of `leaf` rows and
 * runs of `sub_leaf` rows are both compact. */
static void kd_split(const double *x, int64_t n, int64_t d, int64_t leaf,
                     int64_t sub_leaf, int64_t *idx, int64_t len, uint64_t seed)
{
  while (len > leaf) {
    int64_t axis = widest_axis(x, n, d, idx, len);
    int64_t leaves = (len + leaf - 1) / leaf;
    int64_t mid = (leaves / 2) * leaf;
    select_kth(idx, len, mid, x + axis * n, seed);
    /* the left part is a whole number of leaves; sort the larger part in
     * this task, the other as a task of its own when it is large */
    int64_t *right = idx + mid;
    int64_t right_len = len - mid;
    uint64_t left_seed = seed * 2 + 1, right_seed = seed * 2 + 2;
    if (mid >= TASK_MIN_ROWS) {
#pragma omp task firstprivate(idx, mid, left_seed)
      kd_split(x, n, d, leaf, sub_leaf, idx, mid, left_seed);
    } else {
      kd_split(x, n, d, leaf, sub_leaf, idx, mid, left_seed);
    }
    idx = right;
    len = right_len;
    seed = right_seed;
  }
  if (sub_leaf > 0 && sub_leaf < leaf && len > sub_leaf)
    kd_split(x, n, d, sub_leaf, 0, idx, len, seed);
}

void kde_kd_order(const double *x, int64_t n, int64_t d, int64_t leaf,
                  int64_t sub_leaf, int threads, int64_t *order)
{
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (leaf < 1) return;
  /* each level of the tree reads every row once */
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d * log2((double) n + 1));
#pragma omp parallel num_threads(n_threads)
  {
#pragma omp single
    kd_split(x, n, d, leaf, sub_leaf, order, n, 1);
  }
}

void kde_tile_boxes(const double *x, int64_t n, int64_t d, int64_t tile,
                    int threads, double *lo, double *hi)
{
  const int64_t n_tiles = (n + tile - 1) / tile;
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t t = 0; t < n_tiles; t++) {
    const int64_t begin = t * tile;
    const int64_t end = begin + tile < n ? begin + tile : n;
    kde_rows_box(x, n, d, begin, end, lo + t * d, hi + t * d);
  }
}

void kde_scatter_rows(const double *src, const int64_t *order, int64_t n,
                      int threads, double *dst)
{
  const int n_threads = kde_thread_count_for(threads, (double) n);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) dst[order[i]] = src[i];
}
