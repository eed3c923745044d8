// The plans' emulator programs' shared fit (plan_refine.cpp,
// plan_grouped.cpp): points on normal, clustered or widely spread data in
// a k-d order, their units' boxes and weights, prune.c's plan of them, and
// exact kernel sums to check plans against. Include after launch.h.
#pragma once
#include <cmath>
#include <random>
#include <vector>

struct fit {
  int64_t n, d, n_units;
  std::vector<double> z, log_w, inv;  // points in k-d order (column-major), log weights, 1/lambda^2
  std::vector<double> lo, hi, lw, rest, inv_lo, inv_hi, centroid, spread2;
  kde_prune_plan plan;
};

static void make_fit(int kernel, int64_t d, int shape, bool adaptive, double tol, int loo,
                     int64_t n, std::mt19937_64 &rng, fit &f)
{
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(-1, 1);
  std::vector<double> centres(20 * d);
  for (auto &c : centres) c = 200 * U(rng);
  f.n = n;
  f.d = d;
  f.n_units = n / kUnit;
  f.z.resize(n * d);
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < d; c++)
      f.z[j + c * n] = shape == 0   ? 5 * N(rng)
                       : shape == 1 ? centres[(j % 20) * d + c] + N(rng)
                                    : 2000 * U(rng);
  std::vector<int64_t> order(n);
  kde_kd_sort(f.z.data(), n, d, kUnit, 128, 1, order.data());
  std::vector<double> w(n);
  f.inv.assign(n, 1.0);
  for (int64_t j = 0; j < n; j++) {
    w[j] = (1.0 + 0.5 * (order[j] % 7 == 0)) / (1.2 * n);
    if (adaptive) f.inv[j] = 0.5 + 1.5 * (double) (order[j] % 11) / 10.0;
  }
  f.log_w.resize(n);
  for (int64_t j = 0; j < n; j++) f.log_w[j] = log(w[j]);
  f.lo.resize(f.n_units * d);
  f.hi.resize(f.n_units * d);
  f.lw.resize(f.n_units);
  f.rest.resize(f.n_units);
  kde_tile_boxes(f.z.data(), n, d, kUnit, 1, f.lo.data(), f.hi.data());
  kde_tile_log_weights(w.data(), n, kUnit, 1, f.lw.data(), f.rest.data());
  f.plan = kde_prune_plan{};
  f.plan.kernel = kernel;
  f.plan.dim = d;
  f.plan.n_tiles = f.n_units;
  f.plan.lo = f.lo.data();
  f.plan.hi = f.hi.data();
  f.plan.log_weight = f.lw.data();
  f.plan.log_weight_rest = f.rest.data();
  if (adaptive) {
    f.inv_lo.resize(f.n_units);
    f.inv_hi.resize(f.n_units);
    kde_tile_boxes(f.inv.data(), n, 1, kUnit, 1, f.inv_lo.data(), f.inv_hi.data());
    f.plan.inv_scale2_lo = f.inv_lo.data();
    f.plan.inv_scale2_hi = f.inv_hi.data();
  } else { // the per-query refinement's Jensen bound (prune.h)
    f.centroid.resize(f.n_units * d);
    f.spread2.resize(f.n_units);
    kde_tile_centroids(f.z.data(), w.data(), n, d, kUnit, 1, f.centroid.data(), f.spread2.data());
    f.plan.centroid = f.centroid.data();
    f.plan.spread2 = f.spread2.data();
  }
  f.plan.tolerance = tol;
  f.plan.leave_one_out = loo;
  f.plan.derivative = KDE_PRUNE_DENSITY;
}

// log of query i's kernel sum over the points of `units` (all when NULL),
// without point `self` (leaving one out; -1: none)
static double exact_log_sum(const fit &f, const std::vector<double> &q, int64_t m, int64_t i,
                            const int32_t *units, int64_t n_units, int64_t self)
{
  kde_lse s = kde_lse_empty();
  const int64_t count = units != NULL ? n_units : f.n_units;
  for (int64_t u = 0; u < count; u++) {
    const int64_t unit = units != NULL ? units[u] : u;
    for (int64_t j = unit * kUnit; j < (unit + 1) * kUnit; j++) {
      if (j == self) continue;
      double s2 = 0;
      for (int64_t c = 0; c < f.d; c++) {
        const double v = q[i + c * m] - f.z[j + c * f.n];
        s2 += v * v;
      }
      s = kde_lse_add(s, f.log_w[j] + kde_log_profile(f.plan.kernel, s2 * f.inv[j]));
    }
  }
  return kde_lse_log(s);
}

