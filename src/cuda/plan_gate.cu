/*
 * plan_gate.cu: whether a pruned evaluation's plan can pay for itself
 * (plan.cuh: host_prune_plan, plan_worth_making, plan_can_pay,
 * one_block_plan_can_pay), asked by evaluate.cu's log_density_run before it
 * orders the queries and plans their blocks: the pairs against tuning.cuh's
 * thresholds, the groups' estimate of a query's share (once per fit and
 * tolerance), and prune.c's kde_plan_may_pay on the blocks' boxes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <cmath>

#include "kde_cuda_common.h"
#include "model.cuh"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include "tuning.cuh"
#include "whiten.h"

namespace kdegpu {

/* Not where the units' groups prove that each query block (of the m
 * ordered, whitened queries z, on the host) would visit at least the share
 * of the units at which a plan is dropped (prune.h's kde_plan_may_pay),
 * and, where they are planned query by query (plan_query_applies), so
 * would each of kPayTestQueries queries spread over them: then the plan
 * would be all cost (for one query block against 1e7 points, 8% of the
 * whole sum on an H200). */
constexpr int64_t kPayTestQueries = 32;
int plan_can_pay(const kde_cuda_model *model, const kde_prune_plan *plan, const double *z,
                 int on_device, int64_t m)
{
  const int64_t d = model->dim;
  double box[2 * kPlanMaxDim];
  if (on_device || model->unit_groups.n_groups == 0 || d > kPlanMaxDim) return 1;
  for (int64_t begin = 0; begin < m; begin += kBlockQueries) {
    const int64_t end = begin + kBlockQueries < m ? begin + kBlockQueries : m;
    kde_rows_box(z, m, d, begin, end, box, box + d);
    if (kde_plan_may_pay(plan, &model->unit_groups, box, box + d, kPlanDropShare)) return 1;
  }
  /* asked of all m rows, where plan_batch_device asks of each batch's:
   * either way only the speed differs */
  const int64_t tested = m < kPayTestQueries ? m : kPayTestQueries;
  if (m < 2 || !plan_query_applies(m, model->device_groups.group_tiles)) return 0;
  for (int64_t j = 0; j < tested; j++) {
    const int64_t row = j * m / tested;
    for (int64_t k = 0; k < d; k++) box[k] = z[k * m + row];
    if (kde_plan_may_pay(plan, &model->unit_groups, box, box, kPlanDropShare)) return 1;
  }
  return 0;
}

/* The decision's inputs on the host (prune.h), from the model's units:
 * for the groups' estimate and for plans made on the host. */
kde_prune_plan host_prune_plan(const kde_cuda_model *model, double tolerance, int leave_one_out)
{
  kde_prune_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.kernel = model->kernel;
  plan.dim = model->dim;
  plan.n_tiles = model->n_points / kUnit;
  plan.lo = model->unit_lo;
  plan.hi = model->unit_hi;
  plan.log_weight = model->unit_log_weight;
  plan.log_weight_rest = model->unit_log_rest;
  plan.centroid = model->unit_centroid; /* NULL where adaptive */
  plan.spread2 = model->unit_spread2;
  plan.inv_scale2_lo = model->unit_scale_lo; /* NULL unless adaptive */
  plan.inv_scale2_hi = model->unit_scale_hi;
  plan.log_lower_factor = model->log_lower_factor; /* mixed data's, else 0 */
  plan.tolerance = tolerance;
  plan.leave_one_out = leave_one_out;
  plan.derivative = KDE_PRUNE_DENSITY;
  return plan;
}

/* The groups' estimate of the share a query at the data keeps
 * (prune.h's kde_prune_groups_local_share), made once per fit and
 * tolerance. */
static double local_share(kde_cuda_model *model, double tolerance)
{
  if (!model->local_share_made || model->local_share_tolerance != tolerance) {
    const kde_prune_plan plan = host_prune_plan(model, tolerance, 0);
    model->local_share = kde_prune_groups_local_share(&plan, &model->unit_groups);
    model->local_share_tolerance = tolerance;
    model->local_share_made = 1;
  }
  return model->local_share;
}

/* From kPlanMinPairsOneBlock pairs for one query block, kPlanMinPairs for more
 * (tuning.cuh, by precision; m rounded up to whole blocks), from
 * kPlanLocalMinPairsOneBlock and kPlanLocalMinPairs where the fit's groups
 * estimate that a query keeps at most kPlanLocalShare of the units, or from
 * KDEGPU_PLAN_MIN_PAIRS's number. plan_can_pay then asks whether the
 * ordered queries' blocks can skip enough. */
int plan_worth_making(kde_cuda_model *model, const kde_query_set *query)
{
  const int p = model->precision == KDE_PRECISION_SINGLE ? 0 : 1;
  const int64_t m = query->n_query;
  const int one_block = m <= kBlockQueries;
  const double rows = (double) (ceil_div(m, kBlockQueries) * kBlockQueries);
  const double pairs = rows * (double) model->n_train;
  const double forced = kde_env_number("KDEGPU_PLAN_MIN_PAIRS", NAN, 0, INFINITY);
  if (!std::isnan(forced)) return pairs >= forced;
  if (pairs >= (one_block ? kPlanMinPairsOneBlock[p] : kPlanMinPairs[p])) return 1;
  if (pairs < (one_block ? kPlanLocalMinPairsOneBlock[p] : kPlanLocalMinPairs[p])) return 0;
  const double share = local_share(model, query->tolerance);
  if (kde_trace_file() != NULL) {
    fprintf(kde_trace_file(), "plan_gate pairs=%.3g local_share=%.4f\n", pairs, share);
    fflush(kde_trace_file());
  }
  return share <= kPlanLocalShare;
}

/* Whether a plan can pay for one query block (at most kBlockQueries
 * queries, ordered on the host): decided from the whitened queries before
 * they are ordered, so that where no plan can pay they go as given,
 * without the ordering and the putting back (4-5% of the full sum of 100
 * queries against 1e7 points, one H200). The block's box is the same in
 * any order; the queries that plan_can_pay tests one by one (every
 * m / kPayTestQueries-th) are taken in the order of their coordinates, so
 * that the decision does not depend on the caller's order of the rows. */
int one_block_plan_can_pay(const kde_cuda_model *model, const kde_query_set *query)
{
  const int64_t m = query->n_query, d = model->dim;
  double whitened[kBlockQueries * kPlanMaxDim], sorted[kBlockQueries * kPlanMaxDim];
  int64_t rows[kBlockQueries];
  if (model->unit_groups.n_groups == 0 || d > kPlanMaxDim) return 1;
  const double *z = query->query;
  if (query->transform != NULL) {
    kde_whiten(query->query, m, d, query->center, query->transform, 1, whitened);
    z = whitened;
  }
  if (m > kPayTestQueries) {
    for (int64_t i = 0; i < m; i++) rows[i] = i;
    std::sort(rows, rows + m, [&](int64_t a, int64_t b) {
      for (int64_t k = 0; k < d; k++)
        if (z[k * m + a] != z[k * m + b]) return z[k * m + a] < z[k * m + b];
      return false;
    });
    for (int64_t k = 0; k < d; k++)
      for (int64_t i = 0; i < m; i++) sorted[k * m + i] = z[k * m + rows[i]];
    z = sorted;
  }
  kde_prune_plan plan = host_prune_plan(model, query->tolerance, 0);
  plan.centroid = plan.spread2 = NULL; /* as log_density_run's */
  return plan_can_pay(model, &plan, z, 0, m);
}

} // namespace kdegpu
