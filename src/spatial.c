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
 * size so that leaves are whole tiles, unless the points fall in two
 * groups with a wide empty stretch between them along that coordinate
 * (clusters: cities on a map): then at that stretch (gap_split_rank). The selection is Floyd and
 * Rivest's (two pivots from a sample bracket the median; duplicate
 * coordinates, common in real data, end it at once) with samples from a
 * fixed-seed generator, so the order is the same on every run and for
 * every thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spatial.h"
#include "threads.h"

/* Ranges at least this long are sorted as tasks of their own. */
#define TASK_MIN_ROWS ((int64_t) 1 << 15)
/* Ranges at least this long are partitioned by several tasks at once (the
 * top levels of the tree, where fewer ranges than threads exist: with 16
 * threads the first four levels were a serial half of the sort), in
 * PARTITION_CHUNKS chunks. The partition's result does not depend on the
 * chunks or the threads. */
#define PARALLEL_MIN_ROWS ((int64_t) 1 << 17)
#define PARTITION_CHUNKS 64
/* Selection's sample of keys (at most SELECT_SAMPLE), for ranges of at
 * least SELECT_SAMPLE_MIN_ROWS rows. */
#define SELECT_SAMPLE 4096
#define SELECT_SAMPLE_MIN_ROWS 512

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

/* Whether key v goes before the boundary of a two-way partition: below
 * the pivot (below = 1), or not above it (below = 0: a NaN, which compares
 * false, joins the pivot's rows as in the serial partition, so that a range
 * of NaNs ends the selection instead of looping). */
static inline int goes_left(double v, double pivot, int below)
{
  return below ? v < pivot : !(v > pivot);
}

/* Rows [lo, hi) with goes_left first, the others after; returns the
 * boundary. Made in parallel: with the boundary b from the count, the
 * i-th row before b that must move right (in position order) swaps with
 * the i-th row from b on that must move left, so the result is the same
 * for any chunks and threads. Each chunk of the left side finds where its
 * partners start before any row moves, then swaps only its own. */
static int64_t partition_parallel(const kd_rows *r, const double *key, int64_t lo, int64_t hi,
                                  double pivot, int below)
{
  const int64_t len = hi - lo, chunk = (len + PARTITION_CHUNKS - 1) / PARTITION_CHUNKS;
  int64_t count[PARTITION_CHUNKS], left_moves[PARTITION_CHUNKS + 1],
      right_moves[PARTITION_CHUNKS + 1], start[PARTITION_CHUNKS];
#pragma omp taskloop grainsize(1) shared(count)
  for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
    const int64_t a = lo + c * chunk, e = a + chunk < hi ? a + chunk : hi;
    int64_t left = 0;
    for (int64_t i = a; i < e; i++) left += goes_left(key[i], pivot, below);
    count[c] = left;
  }
  int64_t b = lo;
  for (int64_t c = 0; c < PARTITION_CHUNKS; c++) b += count[c];
  /* the rows that must move, per chunk of each side (by position) */
  const int64_t left_len = b - lo, right_len = hi - b;
  const int64_t lchunk = (left_len + PARTITION_CHUNKS - 1) / PARTITION_CHUNKS;
  const int64_t rchunk = (right_len + PARTITION_CHUNKS - 1) / PARTITION_CHUNKS;
  if (lchunk == 0 || rchunk == 0) return b; /* one side is empty: nothing moves */
#pragma omp taskloop grainsize(1) shared(left_moves, right_moves)
  for (int64_t c = 0; c < 2 * PARTITION_CHUNKS; c++) {
    const int right = c >= PARTITION_CHUNKS;
    const int64_t j = right ? c - PARTITION_CHUNKS : c;
    const int64_t base = right ? b : lo, size = right ? rchunk : lchunk, end = right ? hi : b;
    const int64_t a = base + j * size < end ? base + j * size : end;
    const int64_t e = a + size < end ? a + size : end;
    int64_t moves = 0;
    for (int64_t i = a; i < e; i++) moves += goes_left(key[i], pivot, below) == right;
    (right ? right_moves : left_moves)[j + 1] = moves;
  }
  left_moves[0] = right_moves[0] = 0;
  for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
    left_moves[c + 1] += left_moves[c];
    right_moves[c + 1] += right_moves[c];
  }
  /* where each left chunk's first partner lies (before any row moves) */
#pragma omp taskloop grainsize(1) shared(left_moves, right_moves, start)
  for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
    const int64_t rank = left_moves[c];
    int64_t j = 0;
    while (j + 1 < PARTITION_CHUNKS && right_moves[j + 1] <= rank) j++;
    int64_t i = b + j * rchunk < hi ? b + j * rchunk : hi, skip = rank - right_moves[j];
    while (i < hi && !(goes_left(key[i], pivot, below) && skip-- == 0)) i++;
    start[c] = i;
  }
#pragma omp taskloop grainsize(1) shared(start)
  for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
    const int64_t a = lo + c * lchunk < b ? lo + c * lchunk : b;
    const int64_t e = a + lchunk < b ? a + lchunk : b;
    int64_t partner = start[c];
    for (int64_t i = a; i < e; i++) {
      if (goes_left(key[i], pivot, below)) continue;
      while (!goes_left(key[partner], pivot, below)) partner++;
      swap_rows(r, i, partner++);
    }
  }
  return b;
}

/* Rows [lo, hi) with goes_left first, the others after (Hoare's two-ended
 * scan: a swap per misplaced pair, where the three-way partition swapped
 * every row below or above the pivot); returns the boundary. */
static int64_t partition_serial(const kd_rows *r, const double *key, int64_t lo, int64_t hi,
                                double pivot, int below)
{
  int64_t i = lo, j = hi - 1;
  for (;;) {
    while (i <= j && goes_left(key[i], pivot, below)) i++;
    while (i <= j && !goes_left(key[j], pivot, below)) j--;
    if (i >= j) return i;
    swap_rows(r, i++, j--);
  }
}

static int64_t partition(const kd_rows *r, const double *key, int64_t lo, int64_t hi,
                         double pivot, int below)
{
  return hi - lo >= PARALLEL_MIN_ROWS ? partition_parallel(r, key, lo, hi, pivot, below)
                                      : partition_serial(r, key, lo, hi, pivot, below);
}

static int compare_doubles(const void *a, const void *b)
{
  const double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

/* Rearranges the rows [off, off + len) so that the row at off + k has the
 * k-th smallest coordinate `axis`, smaller or equal ones before it, larger
 * or equal after. Floyd and Rivest's selection: two pivots from a sample
 * of the range bracket the k-th value with high probability, so that one
 * partition and a half bring the range down to the few rows between them
 * (a single random pivot took about 3.4 passes and, in the three-way
 * partition, a swap per row). */
static void select_kth(const kd_rows *r, int64_t off, int64_t len, int64_t k, int64_t axis,
                       uint64_t seed)
{
  const double *key = r->z + axis * r->n;
  int64_t lo = off, hi = off + len; /* the k-th lies in [lo, hi) */
  uint64_t state = seed;
  double sample[SELECT_SAMPLE];
  int sampled = 1; /* 0 after a sampled step that moved no bound */
  k += off;
  while (hi - lo > 1) {
    const int64_t m = hi - lo;
    double p1 = key[lo + (int64_t) (next_random(&state) % (uint64_t) m)], p2 = p1;
    if (sampled && m >= SELECT_SAMPLE_MIN_ROWS) {
      /* about m^(2/3) keys: the rows left between the pivots, ~5 m /
       * sqrt(s), and the sample's sort, s log s, then cost about alike */
      const double want = cbrt((double) m * (double) m);
      const int64_t s = want < SELECT_SAMPLE ? (int64_t) want : SELECT_SAMPLE;
      for (int64_t i = 0; i < s; i++)
        sample[i] = key[lo + (int64_t) (next_random(&state) % (uint64_t) m)];
      qsort(sample, (size_t) s, sizeof(double), compare_doubles);
      /* the k-th's rank in the sample, +- 2.5 standard deviations */
      const int64_t t = (int64_t) ((double) (k - lo) / (double) m * (double) s);
      const int64_t gap = (int64_t) (1.25 * sqrt((double) s)) + 1;
      if (sample[t - gap > 0 ? t - gap : 0] <= sample[t + gap < s - 1 ? t + gap : s - 1]) {
        p1 = sample[t - gap > 0 ? t - gap : 0];
        p2 = sample[t + gap < s - 1 ? t + gap : s - 1];
      }
    }
    /* a NaN pivot (NaN keys, which no fit has): their order is arbitrary */
    if (!(p1 <= p2)) return;
    /* below p1 | from p1 to p2 | above p2 */
    const int64_t lt = partition(r, key, lo, hi, p1, 1);
    if (k < lt) {
      hi = lt;
      continue;
    }
    const int64_t gt = partition(r, key, lt, hi, p2, 0);
    if (k >= gt) {
      lo = gt;
      continue;
    }
    if (p1 == p2) return; /* position k holds the pivot value */
    /* few distinct keys can leave every row between the sample's pivots:
     * then a single pivot, which always moves a bound or ends */
    sampled = lt > lo || gt < hi;
    lo = lt;
    hi = gt;
  }
}

/* The smallest and largest of col[0 .. len). */
static void column_range(const double *col, int64_t len, double *lo_out, double *hi_out)
{
  double lo = col[0], hi = lo;
  for (int64_t i = 1; i < len; i++) {
    double v = col[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  *lo_out = lo;
  *hi_out = hi;
}

/* The coordinate with the widest spread over the rows [off, off + len),
 * and that spread's ends. */
static int64_t widest_axis(const kd_rows *r, int64_t off, int64_t len, double *span_lo,
                           double *span_hi)
{
  int64_t best = 0;
  double best_span = -1.0;
  for (int64_t k = 0; k < r->d; k++) {
    const double *col = r->z + k * r->n + off;
    double lo, hi;
    if (len >= PARALLEL_MIN_ROWS) { /* by chunks: min and max are exact in any order */
      const int64_t chunk = (len + PARTITION_CHUNKS - 1) / PARTITION_CHUNKS;
      double part_lo[PARTITION_CHUNKS], part_hi[PARTITION_CHUNKS];
#pragma omp taskloop grainsize(1) shared(part_lo, part_hi)
      for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
        const int64_t a = c * chunk < len ? c * chunk : len;
        const int64_t e = a + chunk < len ? a + chunk : len;
        part_lo[c] = INFINITY;
        part_hi[c] = -INFINITY;
        if (e > a) column_range(col + a, e - a, &part_lo[c], &part_hi[c]);
      }
      lo = part_lo[0];
      hi = part_hi[0];
      for (int64_t c = 1; c < PARTITION_CHUNKS; c++) {
        lo = part_lo[c] < lo ? part_lo[c] : lo;
        hi = part_hi[c] > hi ? part_hi[c] : hi;
      }
    } else {
      column_range(col, len, &lo, &hi);
    }
    if (hi - lo > best_span) {
      best_span = hi - lo;
      best = k;
      *span_lo = lo;
      *span_hi = hi;
    }
  }
  return best;
}

/* Where the rows [off, off + len) fall in two groups along `axis`, with an
 * empty stretch of at least GAP_MIN_BINS / GAP_BINS of their spread
 * [lo, hi] between them (clusters, or data with holes): the rank to split
 * at, the multiple of `leaf` nearest to the count below the widest such
 * stretch, so that the groups keep whole leaves but one (a median split
 * cuts a group, and each cut leaves a leaf that spans the gap, whose box
 * no query near either side can skip). -1 where there is no such stretch,
 * where either side of the stretch holds less than 1/GAP_MIN_SIDE of a
 * leaf, or, with
 * `balanced`, where the split would leave either side less than
 * 1/GAP_MIN_SHARE of the rows: kd_split asks for that below GAP_MAX_DEPTH
 * nested splits, which bounds its recursion and its passes on any data. */
#define GAP_BINS 256
#define GAP_MIN_BINS 16
#define GAP_MIN_SHARE 16
#define GAP_MIN_SIDE 16
#define GAP_MAX_DEPTH 64
static inline int gap_bin(double v, double lo, double scale)
{
  const double t = (v - lo) * scale;
  return t >= GAP_BINS ? GAP_BINS - 1 : t > 0 ? (int) t : 0; /* NaN: 0 */
}

static int64_t gap_split_rank(const kd_rows *r, int64_t off, int64_t len, int64_t axis,
                              double lo, double hi, int64_t leaf, int balanced)
{
  if (len < 2 * leaf || !(hi > lo) || !isfinite(hi - lo)) return -1;
  const double *col = r->z + axis * r->n + off;
  const double scale = GAP_BINS / (hi - lo);
  int64_t bins[GAP_BINS] = {0};
  /* by chunks, summed in a fixed order (serially where there is no room:
   * the same bins) */
  int64_t(*part)[GAP_BINS] = len >= PARALLEL_MIN_ROWS
                                 ? (int64_t(*)[GAP_BINS]) calloc(PARTITION_CHUNKS, sizeof *part)
                                 : NULL;
  if (part != NULL) {
    const int64_t chunk = (len + PARTITION_CHUNKS - 1) / PARTITION_CHUNKS;
#pragma omp taskloop grainsize(1) shared(part)
    for (int64_t c = 0; c < PARTITION_CHUNKS; c++) {
      const int64_t a = c * chunk < len ? c * chunk : len;
      const int64_t e = a + chunk < len ? a + chunk : len;
      for (int64_t i = a; i < e; i++) {
        part[c][gap_bin(col[i], lo, scale)]++;
      }
    }
    for (int64_t c = 0; c < PARTITION_CHUNKS; c++)
      for (int b = 0; b < GAP_BINS; b++) bins[b] += part[c][b];
    free(part);
  } else {
    for (int64_t i = 0; i < len; i++) {
      bins[gap_bin(col[i], lo, scale)]++;
    }
  }
  /* the widest run of empty bins (bins 0 and GAP_BINS - 1 hold lo and hi)
   * with a sixteenth of a leaf or more on either side: a cluster's
   * remnant, peeled off with the leaf it shares, takes its straddle with
   * it (20 clusters: 77 leaves spanning gaps with median splits, 25 with
   * these), while a normal cloud's few outliers beyond an empty stretch
   * leave its order as the median makes it */
  int64_t best_run = 0, best_below = 0, below = 0, run = 0;
  for (int b = 0; b < GAP_BINS; b++) {
    if (bins[b] == 0) {
      run++;
      continue;
    }
    if (run > best_run && below >= leaf / GAP_MIN_SIDE && len - below >= leaf / GAP_MIN_SIDE) {
      best_run = run;
      best_below = below;
    }
    run = 0;
    below += bins[b];
  }
  if (best_run < GAP_MIN_BINS) return -1;
  int64_t k = (best_below + leaf / 2) / leaf * leaf;
  if (k < leaf) k = leaf;
  if (k > (len - 1) / leaf * leaf) k = (len - 1) / leaf * leaf;
  if (balanced && (k < len / GAP_MIN_SHARE || len - k < len / GAP_MIN_SHARE)) return -1;
  return k;
}

/* Orders the rows [off, off + len) into leaves of `leaf` rows; each leaf
 * then into sub-leaves of `sub_leaf` rows (0: none), so that runs of `leaf`
 * rows and runs of `sub_leaf` rows are both compact. */
static void kd_split(const kd_rows *r, int64_t leaf, int64_t sub_leaf, int64_t off,
                     int64_t len, uint64_t seed, int depth)
{
  while (len > leaf) {
    double lo = 0, hi = 0;
    const int64_t axis = widest_axis(r, off, len, &lo, &hi);
    const int64_t leaves = (len + leaf - 1) / leaf;
    const int64_t at_gap =
        gap_split_rank(r, off, len, axis, lo, hi, leaf, depth >= GAP_MAX_DEPTH);
    const int64_t mid = at_gap > 0 ? at_gap : (leaves / 2) * leaf;
    select_kth(r, off, len, mid, axis, seed);
    /* the left part is a whole number of leaves; sort the larger part in
     * this task, the other as a task of its own when it is large */
    uint64_t left_seed = seed * 2 + 1, right_seed = seed * 2 + 2;
    if (mid >= TASK_MIN_ROWS) {
#pragma omp task firstprivate(off, mid, left_seed, depth)
      kd_split(r, leaf, sub_leaf, off, mid, left_seed, depth + 1);
    } else {
      kd_split(r, leaf, sub_leaf, off, mid, left_seed, depth + 1);
    }
    off += mid;
    len -= mid;
    seed = right_seed;
    depth++; /* the right part's splits nest too (peeled one leaf at a time) */
  }
  if (sub_leaf > 0 && sub_leaf < leaf && len > sub_leaf)
    kd_split(r, sub_leaf, 0, off, len, seed, 0);
}

void kde_kd_sort(double *z, int64_t n, int64_t d, int64_t leaf, int64_t sub_leaf,
                 int threads, int64_t *order)
{
  const kd_rows rows = {z, n, d, order};
#pragma omp parallel for num_threads(kde_thread_count_for(threads, (double) n)) schedule(static)
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (leaf < 1) return;
  /* each level of the tree reads every row once */
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d * log2((double) n + 1));
#pragma omp parallel num_threads(n_threads)
  {
#pragma omp single
    kd_split(&rows, leaf, sub_leaf, 0, n, 1, 0);
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

void kde_tile_boxes_widen(const float *residual, int64_t n, int64_t d, int64_t tile,
                          int threads, double *lo, double *hi)
{
  const int64_t n_tiles = (n + tile - 1) / tile;
  const int n_threads = kde_thread_count_for(threads, (double) n * (double) d);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t t = 0; t < n_tiles; t++) {
    const int64_t first = t * tile, last = first + tile < n ? first + tile : n;
    for (int64_t k = 0; k < d; k++) {
      double *box_lo = lo + t * d + k, *box_hi = hi + t * d + k;
      double pad = 0x1p-48 * (fabs(*box_lo) > fabs(*box_hi) ? fabs(*box_lo) : fabs(*box_hi));
      float most = 0.0f;
      for (int64_t j = first; j < last; j++)
        most = fabsf(residual[j + k * n]) > most ? fabsf(residual[j + k * n]) : most;
      pad += 2.0 * (double) most;
      *box_lo -= pad;
      *box_hi += pad;
    }
  }
}

void kde_first_touch(void *p, size_t bytes, int threads)
{
  volatile unsigned char *c = p;
  const int64_t pages = (int64_t) ((bytes + 4095) / 4096);
  const int n_threads = kde_thread_count_for(threads, (double) bytes);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t k = 0; k < pages; k++) c[k * 4096] = 0;
}

void kde_copy_bytes(void *dst, const void *src, size_t bytes, int threads)
{
  /* a thread per MB at most (0.1 ms of copying, well above what waking it costs) */
  enum { kMostThreads = 8, kGrain = 1 << 16, kBytesPerThread = 1 << 20 };
  const int64_t grains = (int64_t) ((bytes + kGrain - 1) / kGrain);
  int n_threads = kde_thread_count(threads);
  if (n_threads > kMostThreads) n_threads = kMostThreads;
  if ((size_t) n_threads > bytes / kBytesPerThread) n_threads = (int) (bytes / kBytesPerThread);
  if (n_threads <= 1) {
    memcpy(dst, src, bytes);
    return;
  }
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int t = 0; t < n_threads; t++) {
    const int64_t first = grains * t / n_threads * kGrain;
    int64_t last = grains * (t + 1) / n_threads * kGrain;
    if (last > (int64_t) bytes) last = (int64_t) bytes;
    if (last > first)
      memcpy((char *) dst + first, (const char *) src + first, (size_t) (last - first));
  }
}

void kde_scatter_rows(const double *src, const int64_t *order, int64_t n,
                      int threads, double *dst)
{
  const int n_threads = kde_thread_count_for(threads, (double) n);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) dst[order[i]] = src[i];
}

void kde_gather_rows(const double *src, const int64_t *order, int64_t n, int threads,
                     double *dst)
{
  const int n_threads = kde_thread_count_for(threads, (double) n);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] = src[order[i]];
}
