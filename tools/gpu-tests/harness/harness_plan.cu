/*
 * tools/gpu-tests/harness/harness_plan.cu: the pruning plan made on the device (issue
 * 15: src/cuda/order.cu, plan.cu) against prune.c's host plan, and timings.
 *
 *   harness plancheck  the device plan of each case against prune.c's on the
 *                      same ordered queries (the same lists, or differences
 *                      within rounding), the order, and the pruned results
 *                      against a double-precision reference: Gaussian single
 *                      and double, Epanechnikov, exponential; d = 1, 2, 3;
 *                      normal and clustered data; leave-one-out; whitening
 *   harness planbench  host vs device ordering and planning, and full vs
 *                      pruned evaluation, at n = m = 1e6 and 1e7
 *   harness plan       both (about 2.5 minutes on an H100; PLAN_BIG=0: no
 *                      1e7, about 40 s)
 *   harness planbig    1e7 clustered, and double precision pruned only
 *   harness planquick  two small checks (for compute-sanitizer)
 *
 * KDEGPU_DEVICE_PLAN=0 makes the evaluations use the host path (the A/B);
 * the plan checks and the planning timings use both paths either way.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "cuda/tuning_hooks.h"
#include "prune.h"
#include "spatial.h"

#include "harness_data.h"

namespace {

using namespace harness_data;

/* The queries as the caller gives them: whitened (z), or raw = z / 0.5 +
 * 1.5 with center 1.5 and transform 0.5 I, which the device whitens back. */
struct queries {
  std::vector<double> raw, center, transform;
  kde_query_set set;
};

void make_queries(const std::vector<double> &z, int64_t m, int64_t d, bool whiten, int loo,
                  double tolerance, queries &q)
{
  q.set = kde_query_set{};
  q.set.n_query = m;
  q.set.leave_one_out = loo;
  q.set.tolerance = tolerance;
  if (!whiten) {
    q.set.query = z.data();
    return;
  }
  q.raw.resize(z.size());
  for (size_t i = 0; i < z.size(); i++) q.raw[i] = z[i] / 0.5 + 1.5;
  q.center.assign(d, 1.5);
  q.transform.assign(d * d, 0.0);
  for (int64_t k = 0; k < d; k++) q.transform[k + k * d] = 0.5;
  q.set.query = q.raw.data();
  q.set.center = q.center.data();
  q.set.transform = q.transform.data();
}

/* prune.c's plan of the ordered queries (what the host path computes). */
struct host_plan {
  std::vector<double> lo, hi, lw, lr;
  kde_prune_plan plan;
};

void make_host_plan(const training &t, int kernel, double tolerance, int loo, host_plan &h)
{
  const int64_t n_units = (t.n + kUnit - 1) / kUnit;
  h.lo.resize(n_units * t.d);
  h.hi.resize(n_units * t.d);
  h.lw.resize(n_units);
  h.lr.resize(n_units);
  kde_tile_boxes(t.x.data(), t.n, t.d, kUnit, 0, h.lo.data(), h.hi.data());
  kde_tile_log_weights(t.w.data(), t.n, kUnit, 1, h.lw.data(), h.lr.data());
  h.plan.kernel = kernel;
  h.plan.dim = t.d;
  h.plan.n_tiles = n_units;
  h.plan.lo = h.lo.data();
  h.plan.hi = h.hi.data();
  h.plan.log_weight = h.lw.data();
  h.plan.log_weight_rest = h.lr.data();
  h.plan.inv_scale2_lo = h.plan.inv_scale2_hi = NULL;
  h.plan.centroid = h.plan.spread2 = NULL;
  h.plan.log_lower_factor = 0.0;
  h.plan.tolerance = tolerance;
  h.plan.leave_one_out = loo;
  h.plan.derivative = KDE_PRUNE_DENSITY;
}

/* The host's lists for the ordered queries; returns the planning ms. */
double plan_on_host(const host_plan &h, const std::vector<double> &sorted, int64_t m,
                    std::vector<int64_t> &offsets, std::vector<int32_t> &visit)
{
  const int64_t blocks = (m + kBlock - 1) / kBlock;
  const double t0 = now_ms();
  offsets.assign(blocks + 1, 0);
  kde_plan_query_blocks(&h.plan, sorted.data(), m, 0, m, kBlock, 0, offsets.data(), NULL);
  visit.assign(std::max<int64_t>(offsets[blocks], 1), 0);
  kde_plan_query_blocks(&h.plan, sorted.data(), m, 0, m, kBlock, 0, offsets.data(),
                        visit.data());
  return now_ms() - t0;
}

/* The same with prune.c's grouped decision (kde_tiles_to_visit_grouped),
 * which the device takes for a density's batches of many blocks
 * (src/cuda/plan_grouped_kernels.cuh): the lists of either proof are
 * valid, and the device's must be one of them up to rounding. */
void plan_on_host_grouped(const host_plan &h, const std::vector<double> &sorted, int64_t m,
                          std::vector<int64_t> &offsets, std::vector<int32_t> &visit)
{
  const int64_t blocks = (m + kBlock - 1) / kBlock, d = h.plan.dim, n = h.plan.n_tiles;
  kde_prune_groups g;
  offsets.clear(); /* none: out of memory */
  visit.clear();
  if (kde_prune_groups_make(d, n, h.lo.data(), h.hi.data(), h.lw.data(), h.lr.data(), &g) != 0)
    return;
  offsets.assign(blocks + 1, 0);
  std::vector<double> lo(d), hi(d), scratch(2 * n + 2 * g.n_groups);
  std::vector<int64_t> tiles(n);
  for (int64_t b = 0; b < blocks; b++) {
    kde_rows_box(sorted.data(), m, d, b * kBlock, std::min(m, (b + 1) * kBlock), lo.data(),
                 hi.data());
    const int64_t c =
        kde_tiles_to_visit_grouped(&h.plan, &g, lo.data(), hi.data(), scratch.data(), tiles.data());
    for (int64_t k = 0; k < c; k++) visit.push_back((int32_t) tiles[k]);
    offsets[b + 1] = offsets[b] + c;
  }
  kde_prune_groups_free(&g);
}

/* Units in one ascending list and not the other, and the other way. */
static void list_difference(const int32_t *a, int64_t na, const int32_t *b, int64_t nb,
                            int64_t &extra, int64_t &missing)
{
  int64_t i = 0, j = 0;
  extra = missing = 0;
  while (i < na || j < nb) {
    if (j >= nb || (i < na && a[i] < b[j])) { extra++; i++; }
    else if (i >= na || b[j] < a[i]) { missing++; j++; }
    else { i++; j++; }
  }
}

int failures = 0;

/* One case: the plan compared, the order checked, the results bounded. */
void check_case(int kernel, int precision, int64_t d, bool clustered, int loo, bool whiten,
                bool weighted, int64_t n, int64_t m)
{
  const double tolerance = kde_kernel_is_compact(kernel) ? 0.0
                           : precision == KDE_PRECISION_SINGLE ? 1e-4 : 1e-8;
  kde_status st;
  training t = ordered_training(n, d, kernel, clustered, weighted, 11 + d);
  if (loo) m = n;
  std::vector<double> z = loo ? t.x : points(m, d, kernel, clustered, 23 + d);
  queries q;
  make_queries(z, m, d, whiten, loo, tolerance, q);
  char label[160];
  snprintf(label, sizeof label, "%s %s d=%lld %s%s%s%s n=%lld m=%lld",
           kernel == KDE_GAUSSIAN ? "gaussian" : kernel == KDE_EXPONENTIAL ? "exponential"
                                                                           : "epanechnikov",
           precision == KDE_PRECISION_SINGLE ? "single" : "double", (long long) d,
           clustered ? "clustered" : "normal", loo ? " loo" : "", whiten ? " whiten" : "",
           weighted ? " weighted" : "", (long long) n, (long long) m);
  kde_cuda_model *model = make_model(t, kernel, precision, &st);
  if (model == NULL) {
    printf("FAIL %s: model: %s\n", label, st.message);
    failures++;
    return;
  }
  const int64_t blocks = (m + kBlock - 1) / kBlock, n_units = (n + kUnit - 1) / kUnit;
  std::vector<int64_t> order(m), dev_off(blocks + 1), host_off;
  std::vector<double> sorted((size_t) (m * d));
  std::vector<int32_t> host_visit;
  int32_t *dev_visit = NULL;
  double ms[2] = {0, 0};
  bool ok = true;
  if (kde_cuda_device_plan(model, &q.set, order.data(), sorted.data(), dev_off.data(),
                           &dev_visit, ms, &st) != 0) {
    printf("FAIL %s: device plan: %s\n", label, st.message);
    failures++;
    kde_cuda_model_free(model);
    return;
  }
  /* the order: a permutation (the identity leaving one out), the ordered
   * queries the whitened originals */
  std::vector<char> seen(m, 0);
  int64_t bad_order = 0;
  double worst_z = 0;
  for (int64_t i = 0; i < m; i++) {
    if (order[i] < 0 || order[i] >= m || seen[order[i]] || (loo && order[i] != i)) {
      bad_order++;
      continue;
    }
    seen[order[i]] = 1;
    for (int64_t k = 0; k < d; k++)
      worst_z = std::max(worst_z, fabs(sorted[i + k * m] - z[order[i] + k * m]) /
                                      (1 + fabs(z[order[i] + k * m])));
  }
  if (bad_order > 0 || worst_z > 1e-12) ok = false;

  /* the lists: ascending, in range, and the host's up to rounding */
  host_plan h;
  make_host_plan(t, kernel, tolerance, loo, h);
  plan_on_host(h, sorted, m, host_off, host_visit);
  std::vector<int64_t> grouped_off;
  std::vector<int32_t> grouped_visit;
  plan_on_host_grouped(h, sorted, m, grouped_off, grouped_visit);
  int64_t extra = 0, missing = 0, disorder = 0, blocks_differ = 0;
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t i = dev_off[b], ie = dev_off[b + 1];
    for (int64_t k = i; k < ie; k++)
      if (dev_visit[k] < 0 || dev_visit[k] >= n_units || (k > i && dev_visit[k] <= dev_visit[k - 1]))
        disorder++;
    /* against the plain and the grouped decision: the nearer one */
    int64_t e1, m1, e2 = 0, m2 = 0;
    list_difference(dev_visit + i, ie - i, host_visit.data() + host_off[b],
                    host_off[b + 1] - host_off[b], e1, m1);
    bool grouped = grouped_off.size() == host_off.size();
    if (grouped)
      list_difference(dev_visit + i, ie - i, grouped_visit.data() + grouped_off[b],
                      grouped_off[b + 1] - grouped_off[b], e2, m2);
    if (grouped && e2 + m2 < e1 + m1) {
      e1 = e2;
      m1 = m2;
    }
    extra += e1;
    missing += m1;
    blocks_differ += e1 + m1 > 0;
  }
  const int64_t host_total = host_off[blocks];
  if (disorder > 0 || dev_off[0] != 0 ||
      (double) (extra + missing) > 1e-4 * (double) host_total + 2)
    ok = false;

  /* the results: pruned within the tolerance of a double reference */
  std::vector<double> pruned(m);
  kde_cuda_eval_stats stats;
  kde_cuda_log_density_stats(model, &q.set, NULL, pruned.data(), &stats, &st);
  const double share = stats.pairs_total > 0 ? stats.pairs_evaluated / stats.pairs_total : NAN;
  double worst_low = 0, worst_high = 0;
  int64_t edge = 0;
  const double eps = precision == KDE_PRECISION_SINGLE ? 3e-5 : 1e-10;
  if (st.code != KDE_OK) {
    printf("FAIL %s: evaluation: %s\n", label, st.message);
    ok = false;
  } else {
    for (int64_t i = 0; i < m; i += std::max<int64_t>(1, m / 97)) {
      const double ref = reference(t, kernel, z.data(), m, i, loo ? i : -1);
      if (!std::isfinite(ref) || !std::isfinite(pruned[i])) {
        /* a compact kernel's only pairs at the edge of its support: single
         * precision may round them out */
        if (std::isfinite(ref) != std::isfinite(pruned[i])) {
          edge++;
          if (precision == KDE_PRECISION_DOUBLE) ok = false;
        }
        continue;
      }
      /* log f_full - log f_pruned in [0, -log(1 - tolerance)], up to rounding */
      const double scale = std::max(1.0, fabs(ref));
      worst_low = std::max(worst_low, (ref - pruned[i] + log1p(-tolerance)) / scale);
      worst_high = std::max(worst_high, (pruned[i] - ref) / scale);
    }
    if (worst_low > eps || worst_high > eps) ok = false;
  }
  printf("%s %s: blocks %lld, visits host %lld device %lld (extra %lld, missing %lld, in %lld"
         " blocks), order %lld bad / %.1e, share %.4f, beyond bound %.1e / above %.1e%s,"
         " device order %.1f ms plan %.1f ms\n",
         ok ? "ok  " : "FAIL", label, (long long) blocks, (long long) host_total,
         (long long) dev_off[blocks], (long long) extra, (long long) missing,
         (long long) blocks_differ, (long long) bad_order, worst_z, share, worst_low, worst_high,
         edge > 0 ? " (support edge)" : "", ms[0], ms[1]);
  failures += !ok;
  free(dev_visit);
  kde_cuda_model_free(model);
}

void plan_checks(bool quick)
{
  printf("\n== device plan vs prune.c (ok: no disorder, extra + missing <= 1e-4 of the host's"
         " visits, results within the tolerance of a double reference) ==\n");
  if (quick) {
    check_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, true, 0, true, true, 3000, 1500);
    check_case(KDE_EPANECHNIKOV, KDE_PRECISION_DOUBLE, 2, false, 1, false, false, 3000, 0);
    return;
  }
  const int64_t n = 60000, m = 40000;
  for (int d = 1; d <= 3; d++)
    for (int clustered = 0; clustered <= 1; clustered++) {
      check_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, d, clustered, 0, d == 2, false, n, m);
      check_case(KDE_GAUSSIAN, KDE_PRECISION_DOUBLE, d, clustered, 0, d == 3, true, n, m);
      check_case(KDE_EPANECHNIKOV, KDE_PRECISION_SINGLE, d, clustered, 0, d == 1, false, n, m);
      check_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, d, clustered, 1, false, true, n, 0);
    }
  check_case(KDE_EPANECHNIKOV, KDE_PRECISION_DOUBLE, 3, true, 1, false, true, n, 0);
  check_case(KDE_EXPONENTIAL, KDE_PRECISION_SINGLE, 2, true, 0, true, false, n, m);
  check_case(KDE_EXPONENTIAL, KDE_PRECISION_DOUBLE, 3, false, 1, false, true, n, 0);
  /* ragged: a last unit of 1 point, a last query block of 1 query */
  check_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, false, 0, false, false, 5 * 256 + 1,
             3 * 128 + 1);
}

/* Host vs device ordering and planning, full vs pruned evaluation. */
void bench_case(int kernel, int precision, int64_t d, bool clustered, int64_t n, bool host,
                bool full)
{
  const double tolerance = precision == KDE_PRECISION_SINGLE ? 1e-7 : 1e-14; /* R's defaults */
  kde_status st;
  const double t_data = now_ms();
  training t = ordered_training(n, d, kernel, clustered, false, 5 + d);
  std::vector<double> z = points(n, d, kernel, clustered, 7 + d);
  queries q;
  make_queries(z, n, d, false, 0, tolerance, q);
  kde_cuda_model *model = make_model(t, kernel, precision, &st);
  if (model == NULL) {
    printf("FAIL bench model: %s\n", st.message);
    failures++;
    return;
  }
  const double data_ms = now_ms() - t_data;
  char label[128];
  snprintf(label, sizeof label, "%s %s d=%lld %s n=m=%.0e",
           kernel == KDE_GAUSSIAN ? "gaussian" : "epanechnikov",
           precision == KDE_PRECISION_SINGLE ? "single" : "double", (long long) d,
           clustered ? "clustered" : "normal", (double) n);
  const int64_t m = n, blocks = (m + kBlock - 1) / kBlock;
  std::vector<int64_t> order(m), dev_off(blocks + 1), host_off;
  std::vector<double> sorted((size_t) (m * d));
  std::vector<int32_t> host_visit;
  int32_t *dev_visit = NULL;
  double ms[2] = {0, 0}, host_order_ms = NAN, host_plan_ms = NAN;
  for (int rep = 0; rep < 2; rep++) { /* the second: warm */
    free(dev_visit);
    dev_visit = NULL;
    if (kde_cuda_device_plan(model, &q.set, order.data(), sorted.data(), dev_off.data(),
                             &dev_visit, ms, &st) != 0) {
      printf("FAIL bench device plan: %s\n", st.message);
      failures++;
      kde_cuda_model_free(model);
      return;
    }
  }
  if (host) {
    std::vector<int64_t> host_order(m);
    std::vector<double> host_sorted(z.begin(), z.begin() + m * d);
    const double t0 = now_ms();
    kde_kd_sort(host_sorted.data(), m, d, kBlock, 0, 0, host_order.data());
    host_order_ms = now_ms() - t0;
    host_plan h;
    make_host_plan(t, kernel, tolerance, 0, h);
    host_plan_ms = plan_on_host(h, host_sorted, m, host_off, host_visit);
    printf("     host k-d order visits %lld units per block (device Hilbert order: %.1f)\n",
           (long long) (host_off[blocks] / blocks), (double) dev_off[blocks] / blocks);
  }
  printf("plan %s: order host %.0f ms device %.1f ms; plan host %.0f ms device %.1f ms;"
         " visits/block %.1f of %lld units (setup %.0f ms)\n",
         label, host_order_ms, ms[0], host_plan_ms, ms[1], (double) dev_off[blocks] / blocks,
         (long long) ((n + kUnit - 1) / kUnit), data_ms);
  free(dev_visit);

  std::vector<double> out(m), ref(m);
  kde_cuda_eval_stats stats;
  double full_ms = NAN, full_kernel = NAN;
  if (full) {
    q.set.tolerance = 0;
    double t0 = now_ms();
    kde_cuda_log_density_stats(model, &q.set, NULL, ref.data(), &stats, &st);
    full_ms = now_ms() - t0;
    full_kernel = stats.kernel_ms;
    q.set.tolerance = tolerance;
  }
  for (int rep = 0; rep < 2; rep++) { /* the second: warm */
    const double t0 = now_ms();
    kde_cuda_log_density_stats(model, &q.set, NULL, out.data(), &stats, &st);
    const double pruned_ms = now_ms() - t0;
    if (st.code != KDE_OK) {
      printf("FAIL bench evaluation: %s\n", st.message);
      failures++;
      break;
    }
    if (rep == 0) continue;
    double worst = 0;
    if (full)
      for (int64_t i = 0; i < m; i++)
        worst = std::max(worst, fabs(out[i] - ref[i]) / std::max(1.0, fabs(ref[i])));
    printf("eval %s: full %.0f ms (kernels %.0f), pruned %.0f ms (kernels %.0f, ordering"
           " %.1f ms, %s plan), %.2fx; pairs %.4f; batches %lld; max |diff| %.1e\n",
           label, full_ms, full_kernel, pruned_ms, stats.kernel_ms, stats.order_ms,
           stats.device_plan ? "device" : "host/no", full_ms / pruned_ms,
           stats.pairs_evaluated / stats.pairs_total, (long long) stats.batches, worst);
  }
  kde_cuda_model_free(model);
}

void plan_bench()
{
  printf("\n== planning and evaluation timings (KDEGPU_DEVICE_PLAN=%s) ==\n",
         getenv("KDEGPU_DEVICE_PLAN") != NULL ? getenv("KDEGPU_DEVICE_PLAN") : "unset");
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 2, false, 1000000, true, true);
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, false, 1000000, true, true);
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, true, 1000000, true, true);
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_DOUBLE, 3, false, 1000000, true, true);
  bench_case(KDE_EPANECHNIKOV, KDE_PRECISION_SINGLE, 3, false, 1000000, true, true);
  if (getenv("PLAN_BIG") != NULL && strcmp(getenv("PLAN_BIG"), "0") == 0) return;
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, false, 10000000, true, true);
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 2, false, 10000000, false, true);
}

/* More of 1e7 (minutes): clustered, and double precision pruned only (its
 * full sweep takes about 3 minutes on an H100). */
void plan_bench_big()
{
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_SINGLE, 3, true, 10000000, false, true);
  bench_case(KDE_GAUSSIAN, KDE_PRECISION_DOUBLE, 3, false, 10000000, false, false);
}

} // namespace

/* The modes of this file (harness.cu dispatches "plan*" here); returns the
 * number of failures. */
int plan_mode(const std::string &mode)
{
  failures = 0;
  if (mode == "planquick") plan_checks(true);
  if (mode == "plan" || mode == "plancheck") plan_checks(false);
  if (mode == "plan" || mode == "planbench") plan_bench();
  if (mode == "planbig") plan_bench_big();
  return failures;
}
