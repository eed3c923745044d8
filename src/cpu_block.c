/*
 * The CPU backend's inner loop (kde_cpu.c drives it): the queries of one
 * block against the training tiles listed for it, each query's terms kept
 * as an online log-sum-exp state, float64 throughout. Memory: per thread,
 * one chunk of squared distances and the block's coordinates
 * (kde_cpu_block_scratch); the n x m kernel matrix is never formed.
 */
/* The vector loops below select between values (compact support, zero
 * weights, underflow); GCC vectorises such selects only when it may assume
 * that floating-point operations do not trap and that sqrt need not set
 * errno. Neither changes a computed value. Set here rather than in
 * Makevars so the build flags stay portable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_block.h"
#include "vector_math.h"
#include <kdegpu/kernels.h>

/* A chunk of training points read in one pass should fit in L1 with its
 * distances: chunk * (dim + 2) doubles of about 32 KiB, at least 64 points
 * so the vector loops stay long. */
#define CHUNK_BYTES (32 * 1024)
#define CHUNK_MIN 64
#define CHUNK_MAX 1024

/* Squared distances from one query to a tile of training points. */
static ALWAYS_INLINE void tile_squared_distances(const double *train,
                                                 int64_t n_train, int64_t dim,
                                                 int64_t tile_begin,
                                                 int64_t tile_len,
                                                 const double *query_point,
                                                 double *s2)
{
  const double *x0 = train + tile_begin;
  const double q0 = query_point[0];
#pragma omp simd
  for (int64_t j = 0; j < tile_len; j++) {
    double diff = x0[j] - q0;
    s2[j] = diff * diff;
  }
  for (int64_t k = 1; k < dim; k++) {
    const double *xk = train + k * n_train + tile_begin;
    const double qk = query_point[k];
#pragma omp simd
    for (int64_t j = 0; j < tile_len; j++) {
      double diff = xk[j] - qk;
      s2[j] += diff * diff;
    }
  }
}

/* The same in the offset mode for a query that is its own anchor: each
 * difference from the coordinates' and the residuals' differences. */
static ALWAYS_INLINE void tile_squared_distances_residual(const double *train,
                                                          const float *residual,
                                                          int64_t n_train, int64_t dim,
                                                          int64_t tile_begin,
                                                          int64_t tile_len,
                                                          const double *query_point,
                                                          const double *query_residual,
                                                          double *s2)
{
  for (int64_t j = 0; j < tile_len; j++) s2[j] = 0.0;
  for (int64_t k = 0; k < dim; k++) {
    const double *xk = train + k * n_train + tile_begin;
    const float *lost = residual + k * n_train + tile_begin;
    const double qk = query_point[k], qk_lost = query_residual[k];
#pragma omp simd
    for (int64_t j = 0; j < tile_len; j++) {
      double diff = (xk[j] - qk) + ((double) lost[j] - qk_lost);
      s2[j] += diff * diff;
    }
  }
}

/* Mixed data: the log weights of a chunk of training points times each
 * pair's discrete factors with one query (kde_training_set): p_k = 0 on a
 * match, mismatch[k] + per_level[k] * |c_q - c_x| otherwise. */
static ALWAYS_INLINE void discrete_log_weights(const kde_training_set *t,
                                               int64_t chunk_begin, int64_t chunk_len,
                                               const double *query_codes,
                                               double *log_weight)
{
  const int64_t n = t->n_train, k_n = t->n_discrete;
  memcpy(log_weight, t->log_weight + chunk_begin, (size_t) chunk_len * sizeof(double));
  for (int64_t k = 0; k < k_n; k++) {
    const double *codes = t->codes + k * n + chunk_begin;
    const double qk = query_codes[k];
    const double mismatch = t->discrete_penalty[k];
    const double per_level = t->discrete_penalty[k_n + k];
#pragma omp simd
    for (int64_t j = 0; j < chunk_len; j++) {
      const double distance = fabs(codes[j] - qk);
      /* a select, not a product: per_level * 0 is NaN at -inf */
      log_weight[j] += distance == 0 ? 0.0 : mismatch + per_level * distance;
    }
  }
}

/* One query against one tile, as a log-sum-exp state. `self` is the tile
 * position of the query's own training point under leave-one-out, -1
 * otherwise; that term is dropped exactly, not subtracted afterwards. */
static ALWAYS_INLINE kde_lse tile_state(int kernel, const double *s2,
                                        const double *weight,
                                        const double *log_weight,
                                        int64_t tile_len, int64_t self,
                                        double *exponent)
{
  if (kde_kernel_is_compact(kernel)) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < tile_len; j++) {
      double term = weight[j] * kde_profile(kernel, s2[j]);
      sum += (j == self) ? 0.0 : term;
    }
    return kde_lse_make(0.0, sum);
  }
  double tile_max = -INFINITY;
#pragma omp simd reduction(max : tile_max)
  for (int64_t j = 0; j < tile_len; j++) {
    double e = log_weight[j] + kde_log_profile(kernel, s2[j]);
    e = (j == self) ? -INFINITY : e;
    exponent[j] = e;
    tile_max = e > tile_max ? e : tile_max;
  }
  if (tile_max == -INFINITY) return kde_lse_empty();
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < tile_len; j++)
    sum += exp_nonpositive(exponent[j] - tile_max);
  return kde_lse_make(tile_max, sum);
}

/* The offset mode (kde_backend.h's kde_cpu_tiles): a query block wider than
 * this (whitened units) takes each query as its own anchor. */
#define OFFSET_BLOCK_WIDTH 32.0

/* Points [begin, begin + len) relative to `anchor`, their residuals added:
 * each rounded once, relative to its distance from the anchor. */
static ALWAYS_INLINE void relative_points(const kde_training_set *t,
                                          const float *residual, int64_t begin,
                                          int64_t len, const double *anchor,
                                          double *relative)
{
  const int64_t n = t->n_train;
  for (int64_t k = 0; k < t->dim; k++) {
    const double *xk = t->train + k * n + begin;
    const float *lost = residual + k * n + begin;
    double *to = relative + k * len;
    const double a = anchor[k];
#pragma omp simd
    for (int64_t j = 0; j < len; j++) to[j] = (xk[j] - a) + (double) lost[j];
  }
}

/* The queries of one block, at most QUERY_BLOCK of them, against the
 * training tiles listed in `visit` (tile t holds points [t * tile,
 * (t + 1) * tile)). Consecutive listed tiles are one range of points, read
 * in chunks of `chunk` points that stay in L1 with their distances.
 * `query_rows` are the block's rows of the query matrix (leaving one out,
 * also the training point each query is). Writes each query's state to
 * state[]. */
static ALWAYS_INLINE void evaluate_query_block(int kernel,
                                               const kde_training_set *t,
                                               const kde_query_set *qs,
                                               const int64_t *query_rows,
                                               int64_t block_len,
                                               const int64_t *visit,
                                               int64_t n_visit, int64_t tile,
                                               int64_t chunk,
                                               const float *residual,
                                               double *scratch, kde_lse *state)
{
  const int64_t dim = t->dim, n = t->n_train, m = qs->n_query, k_n = t->n_discrete;
  double *s2 = scratch;                       /* chunk */
  double *exponent = scratch + chunk;         /* chunk */
  double *points = scratch + 2 * chunk;       /* QUERY_BLOCK x dim, by row */
  double *mixed_log_weight = points + QUERY_BLOCK * dim; /* chunk (mixed data) */
  double *codes = mixed_log_weight + chunk;   /* QUERY_BLOCK x k_n, by row */
  /* the offset mode's: the block's residuals, a chunk's points relative to
   * the block's first query (where the block is compact; else each query's
   * differences take the residuals' differences), and a query relative to
   * it */
  double *points_lo =                                 /* QUERY_BLOCK x dim, by row */
      points + QUERY_BLOCK * dim + (k_n > 0 ? chunk + QUERY_BLOCK * k_n : 0);
  double *relative = points_lo + QUERY_BLOCK * dim; /* chunk x dim, column-major */
  double *query_relative = relative + chunk * dim;  /* dim */

  for (int64_t b = 0; b < block_len; b++) {
    state[b] = kde_lse_empty();
    for (int64_t k = 0; k < dim; k++)
      points[b * dim + k] = qs->query[query_rows[b] + k * m];
    for (int64_t k = 0; k < k_n; k++)
      codes[b * k_n + k] = qs->codes[query_rows[b] + k * m];
    if (residual != NULL)
      for (int64_t k = 0; k < dim; k++)
        points_lo[b * dim + k] = qs->query_lo != NULL ? qs->query_lo[query_rows[b] + k * m]
                                 : qs->query == t->train ? (double) residual[query_rows[b] + k * n]
                                                         : 0.0;
  }
  int per_query = 0; /* the offset mode's anchor: each query, not the block's first */
  if (residual != NULL)
    for (int64_t b = 1; b < block_len; b++)
      for (int64_t k = 0; k < dim; k++)
        per_query |= !(fabs(points[b * dim + k] - points[k]) <= OFFSET_BLOCK_WIDTH);
  for (int64_t v = 0; v < n_visit;) {
    int64_t last = visit[v];
    const int64_t first = last;
    while (++v < n_visit && visit[v] == last + 1) last++;
    const int64_t range_end = (last + 1) * tile < n ? (last + 1) * tile : n;
    for (int64_t chunk_begin = first * tile; chunk_begin < range_end;
         chunk_begin += chunk) {
      const int64_t chunk_len =
          range_end - chunk_begin < chunk ? range_end - chunk_begin : chunk;
      if (residual != NULL && !per_query)
        relative_points(t, residual, chunk_begin, chunk_len, points, relative);
      for (int64_t b = 0; b < block_len; b++) {
        int64_t self = -1;
        if (qs->leave_one_out) {
          int64_t own = query_rows[b] - chunk_begin;
          if (own >= 0 && own < chunk_len) self = own;
        }
        if (residual != NULL && per_query) {
          tile_squared_distances_residual(t->train, residual, n, dim, chunk_begin,
                                          chunk_len, points + b * dim, points_lo + b * dim,
                                          s2);
        } else if (residual != NULL) {
          for (int64_t k = 0; k < dim; k++)
            query_relative[k] = (points[b * dim + k] - points[k]) + points_lo[b * dim + k];
          tile_squared_distances(relative, chunk_len, dim, 0, chunk_len, query_relative, s2);
        } else {
          tile_squared_distances(t->train, n, dim, chunk_begin, chunk_len,
                                 points + b * dim, s2);
        }
        if (t->inv_scale2 != NULL) { /* adaptive: kernels of radius lambda_j */
          const double *inv = t->inv_scale2 + chunk_begin;
#pragma omp simd
          for (int64_t j = 0; j < chunk_len; j++) s2[j] *= inv[j];
        }
        const double *log_weight = t->log_weight + chunk_begin;
        if (k_n > 0) {
          discrete_log_weights(t, chunk_begin, chunk_len, codes + b * k_n, mixed_log_weight);
          log_weight = mixed_log_weight;
        }
        kde_lse part = tile_state(kernel, s2, t->weight + chunk_begin, log_weight,
                                  chunk_len, self, exponent);
        state[b] = kde_lse_merge(state[b], part);
      }
    }
  }
}

/* The kernel becomes a compile-time constant in each case, so the profile's
 * switch folds away and every loop above vectorises. */
KDE_MULTIVERSION
void kde_cpu_evaluate_block(int kernel, const kde_training_set *t, const kde_query_set *qs,
                            const int64_t *query_rows, int64_t block_len,
                            const int64_t *visit, int64_t n_visit, int64_t tile,
                            int64_t chunk, const float *residual, double *scratch,
                            kde_lse *state)
{
#define KDE_CASE(K)                                                         \
  case K:                                                                   \
    evaluate_query_block(K, t, qs, query_rows, block_len, visit, n_visit,   \
                         tile, chunk, residual, scratch, state);            \
    break;
  switch (kernel) {
    KDE_CASE(KDE_GAUSSIAN)
    KDE_CASE(KDE_EPANECHNIKOV)
    KDE_CASE(KDE_RECTANGULAR)
    KDE_CASE(KDE_TRIANGULAR)
    KDE_CASE(KDE_BIWEIGHT)
    KDE_CASE(KDE_COSINE)
    KDE_CASE(KDE_OPTCOSINE)
    KDE_CASE(KDE_EXPONENTIAL)
  default:
    break;
  }
#undef KDE_CASE
}

/* Training points read per pass: they and their distances stay in L1. */
int64_t kde_cpu_chunk(int64_t dim)
{
  int64_t chunk = CHUNK_BYTES / (int64_t) ((dim + 2) * sizeof(double));
  if (chunk < CHUNK_MIN) chunk = CHUNK_MIN;
  if (chunk > CHUNK_MAX) chunk = CHUNK_MAX;
  return chunk - chunk % 8;
}


int64_t kde_cpu_block_scratch(int64_t dim, int64_t chunk, int64_t n_discrete)
{
  const int64_t mixed = n_discrete > 0 ? chunk + QUERY_BLOCK * n_discrete : 0;
  const int64_t offsets = QUERY_BLOCK * dim + chunk * dim + dim;
  return 2 * chunk + QUERY_BLOCK * dim + mixed + offsets;
}
