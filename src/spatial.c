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

/* The rows [off, off + len) of the column-major n x d matrix z (leading
 * dimension n), kept in step with their original row numbers idx: the
 * selection moves whole rows, so that every pass reads its coordinates in
 * order (the rows' numbers alone made every access a gather: 8.5 s for a
 * fit of 1e7 points on 2 cores, 3.5x the row-moving version). */
typedef struct {
  double *z;
  int64_t n, d;
  int64_t *idx;
} kd_rows;

static inline void swap_rows(const kd_rows *r, int64_t a, int64_t b)
{
  if (a == b) return;
  int64_t t = r->idx[a];
  r->idx[a] = r->idx[b];
  r->idx[b] = t;
  for (int64_t k = 0; k < r->d; k++) {
    double *col = r->z + k * r->n;
    double v = col[a];
    col[a] = col[b];
    col[b] = v;
  }
}

/* Rearranges the rows [off, off + len) so that the row at off + k has the
 * k-th smallest coordinate `axis`, smaller or equal ones before it, larger
 * or equal after. */
static void select_kth(const kd_rows *r, int64_t off, int64_t len, int64_t k, int64_t axis,
                       uint64_t seed)
{
  const double *key = r->z + axis * r->n;
  int64_t lo = off, hi = off + len; /* the k-th lies in [lo, hi) */
  uint64_t state = seed;
  k += off;
  while (hi - lo > 1) {
    double pivot = key[lo + (int64_t) (next_random(&state) % (uint64_t) (hi - lo))];
    /* three-way partition of [lo, hi): < pivot, == pivot, > pivot */
    int64_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      double v = key[i];
      if (v < pivot) {
        swap_rows(r, lt, i);
        lt++; i++;
      } else if (v > pivot) {
        gt--;
        swap_rows(r, gt, i);
      } else {
        i++;
      }
    }
    if (k < lt) hi = lt;
    else if (k >= gt) lo = gt;
    else return; /* position k holds the pivot value */
  }
}

/* The coordinate with the widest spread over the rows [off, off + len). */
static int64_t widest_axis(const kd_rows *r, int64_t off, int64_t len)
{
  int64_t best = 0;
  double best_span = -1.0;
  for (int64_t k = 0; k < r->d; k++) {
    const double *col = r->z + k * r->n + off;
    double lo = col[0], hi = lo;
    for (int64_t i = 1; i < len; i++) {
      double v = col[i];
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

/* Orders the rows [off, off + len) into leaves of `leaf` rows; each leaf
 * then into sub-leaves of `sub_leaf` rows (0: none), so that runs of `leaf`
 * rows and runs of `sub_leaf` rows are both compact. */
static void kd_split(const kd_rows *r, int64_t leaf, int64_t sub_leaf, int64_t off,
                     int64_t len, uint64_t seed)
{
  while (len > leaf) {
    int64_t axis = widest_axis(r, off, len);
    int64_t leaves = (len + leaf - 1) / leaf;
    int64_t mid = (leaves / 2) * leaf;
    select_kth(r, off, len, mid, axis, seed);
    /* the left part is a whole number of leaves; sort the larger part in
     * this task, the other as a task of its own when it is large */
    uint64_t left_seed = seed * 2 + 1, right_seed = seed * 2 + 2;
    if (mid >= TASK_MIN_ROWS) {
#pragma omp task firstprivate(off, mid, left_seed)
      kd_split(r, leaf, sub_leaf, off, mid, left_seed);
    } else {
      kd_split(r, leaf, sub_leaf, off, mid, left_seed);
    }
    off += mid;
    len -= mid;
    seed = right_seed;
  }
  if (sub_leaf > 0 && sub_leaf < leaf && len > sub_leaf)
    kd_split(r, sub_leaf, 0, off, len, seed);
}

void kde_kd_sort(double *z, int64_t n, int64_t d, int64_t leaf, int64_t sub_leaf,
                 int threads, int64_t *order)
{
  const kd_rows rows = {z, n, d, order};
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (leaf < 1) return;
  /* each level of the tree reads every row once */
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d * log2((double) n + 1));
#pragma omp parallel num_threads(n_threads)
  {
#pragma omp single
    kd_split(&rows, leaf, sub_leaf, 0, n, 1);
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
