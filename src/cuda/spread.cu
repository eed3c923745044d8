/*
 * spread.cu: an anchored model's training set laid out with its wide runs
 * split into units of their own (src/unit_spread.h: which runs, and why),
 * and leave-one-out over that layout, whose positions are not the
 * training points' indices.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host_threads.cuh"
#include "kde_cuda_common.h"
#include "model.cuh"
#include "spread.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* The widest a unit may be, in bandwidths (whitened coordinates): a
 * point's offset from its anchor (its run's, within the unit) keeps
 * float's epsilon times 16 bandwidths at worst, the order of what a pair's
 * own distance costs.
 * Wider runs (gaps between clusters, far tails) are split while that adds
 * at most a quarter of the units and 64 more (unit_spread.c: else wider
 * units). */
constexpr double kSpreadWidth = 32;
constexpr double kSpreadGrowth = 0.25;

void spread_set_free(spread_set *s)
{
  free(s->train);
  free(s->weight);
  free(s->log_weight);
  free(s->inv_scale2);
  free(s->codes);
  free(s->residual);
  memset(s, 0, sizeof *s);
}

/* Row p of `dst` (n_positions rows) from row point_at[p] of `src` (n
 * rows), or for a null position from its unit's first point, column by
 * column; in parallel over positions (ranges of whole units). */
template <typename V>
static void gather_rows(const V *src, int64_t n, int64_t cols, const kde_unit_spread *s,
                        int threads, V *dst)
{
  parallel_ranges(s->n_positions, kUnit, threads, [&](int64_t first, int64_t last) {
    for (int64_t k = 0; k < cols; k++)
      for (int64_t p = first; p < last; p++) {
        const int64_t i = s->point_at[p] >= 0 ? s->point_at[p] : s->point_at[p - p % kUnit];
        dst[k * s->n_positions + p] = src[k * n + i];
      }
  });
}

int spread_training_set(const kde_training_set *train, spread_set *out, kde_status *status)
{
  const int64_t n = train->n_train, d = train->dim;
  memset(out, 0, sizeof *out);
  if (kde_unit_spread_make(train->train, n, d, kUnit, kSpreadWidth, kSpreadGrowth,
                           train->host_threads, &out->layout) != 0) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory laying out the training set");
    return -1;
  }
  const kde_unit_spread *s = &out->layout;
  if (s->n_positions == 0) return 0;
  const int64_t np = s->n_positions;
  KDE_HOST_ALLOC(out->train, np * d, "the laid-out training set");
  KDE_HOST_ALLOC(out->weight, np, "the laid-out weights");
  KDE_HOST_ALLOC(out->log_weight, np, "the laid-out weights");
  gather_rows(train->train, n, d, s, train->host_threads, out->train);
  parallel_ranges(np, kUnit, train->host_threads, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; p++) {
      const int64_t i = s->point_at[p];
      out->weight[p] = i >= 0 ? train->weight[i] : 0.0;
      out->log_weight[p] = i >= 0 ? train->log_weight[i] : -INFINITY;
    }
  });
  if (train->inv_scale2 != NULL) {
    KDE_HOST_ALLOC(out->inv_scale2, np, "the laid-out scales");
    gather_rows(train->inv_scale2, n, 1, s, train->host_threads, out->inv_scale2);
  }
  if (train->n_discrete > 0) {
    KDE_HOST_ALLOC(out->codes, np * train->n_discrete, "the laid-out codes");
    gather_rows(train->codes, n, train->n_discrete, s, train->host_threads, out->codes);
  }
  if (train->residual != NULL) {
    KDE_HOST_ALLOC(out->residual, np * d, "the laid-out residuals");
    gather_rows(train->residual, n, d, s, train->host_threads, out->residual);
  }
  out->set = *train;
  out->set.n_train = np;
  out->set.train = out->train;
  out->set.weight = out->weight;
  out->set.log_weight = out->log_weight;
  out->set.inv_scale2 = out->inv_scale2;
  out->set.codes = out->codes;
  out->set.residual = out->residual;
  return 0;
cleanup:
  kde_unit_spread_free(&out->layout);
  spread_set_free(out);
  return -1;
}

int spread_queries(const kde_cuda_model *model, const kde_query_set *query,
                   spread_queries_t *out, kde_status *status)
{
  const int64_t n = model->n_train, d = model->dim, np = model->n_points,
                c = model->n_discrete;
  memset(out, 0, sizeof *out);
  KDE_HOST_ALLOC(out->query, np * d, "the laid-out leave-one-out queries");
  KDE_HOST_ALLOC(out->out, np, "the laid-out results");
  gather_rows(query->query, n, d, &model->spread, query->host_threads, out->query);
  if (c > 0) {
    KDE_HOST_ALLOC(out->codes, np * c, "the laid-out codes");
    gather_rows(query->codes, n, c, &model->spread, query->host_threads, out->codes);
  }
  if (query->query_lo != NULL) {
    KDE_HOST_ALLOC(out->query_lo, np * d, "the laid-out leave-one-out queries");
    gather_rows(query->query_lo, n, d, &model->spread, query->host_threads, out->query_lo);
  }
  out->set = *query;
  out->set.n_query = np;
  out->set.query = out->query;
  out->set.query_lo = out->query_lo;
  out->set.codes = out->codes;
  return 0;
cleanup:
  spread_queries_free(out);
  return -1;
}

void spread_queries_free(spread_queries_t *q)
{
  free(q->query);
  free(q->query_lo);
  free(q->codes);
  free(q->out);
  memset(q, 0, sizeof *q);
}

} // namespace kdegpu
