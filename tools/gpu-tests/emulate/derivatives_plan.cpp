// Checks the plan of derivative sums that prune.c makes (with the bounds of
// prune.h that the device plan applies): (1) its lists against a reference
// of the decision written out here, (2) that pruned derivative sums (the
// real kernels on that plan) stay within tolerance * s0 of the full sums.
#include "derivatives_kernels.cuh"
#include "prune.h"
#include "spatial.h"
#include "host_plan.h"
#include <thread>
#include <vector>
#include <random>
#include <algorithm>
#include <numeric>
#include <cstdio>
using namespace kdegpu;
#include "launch.h"

static double ref_full(int kernel, int64_t n, int64_t d, const double *z, const double *lw, const double *q,
                       int64_t j0, int64_t j1, double *s0, double *k1, double *first, double *second)
{
  double scale = -INFINITY, sum0 = 0, sum1 = 0; std::vector<double> v(d);
  std::fill(first, first + d, 0.0); std::fill(second, second + d * d, 0.0);
  for (int64_t j = j0; j < j1; j++) {
    double t = 0;
    for (int64_t c = 0; c < d; c++) { v[c] = z[j + c * n] - q[c]; t += v[c] * v[c]; }
    const double lt = lw[j] + kde_log_profile(kernel, t);
    if (!(lt > -INFINITY)) continue;
    if (lt > scale) { const double f = exp(scale - lt); sum0 *= f; sum1 *= f;
      for (int64_t c = 0; c < d; c++) first[c] *= f; for (int64_t c = 0; c < d * d; c++) second[c] *= f; scale = lt; }
    const double term = exp(lt - scale); sum0 += term;
    const double a1 = term * kde_profile_ratio1(kernel, t);
    if (t == 0) { if (std::isfinite(a1)) sum1 += a1; continue; }
    sum1 += a1; for (int64_t c = 0; c < d; c++) first[c] += a1 * v[c];
    const double a2 = term * kde_profile_ratio2(kernel, t);
    for (int64_t e = 0; e < d; e++) for (int64_t c = 0; c < d; c++) second[c + e * d] += a2 * v[c] * v[e];
  }
  *s0 = sum0; *k1 = sum1; return scale;
}

int main()
{
  int failures = 0;
  const char *names[] = {"gaussian", "epanechnikov", "rectangular", "triangular", "biweight", "cosine", "optcosine", "exponential"};
  for (int kernel : {0, 7}) for (int d : {1, 2, 3}) for (int second = 0; second < 2; second++) for (double tol : {1e-2, 1e-7}) {
    std::mt19937_64 rng(7 + kernel * 10 + d + second);
    std::normal_distribution<double> N(0, 1);
    const int64_t n = 256 * 96, m = 128 * 6, n_units = n / 256;
    std::vector<double> x(n * d), lwx(n), qx(m * d);
    const double spread = kernel == 0 ? 5.0 : kernel == 7 ? 10.0 : 3.0;
    for (auto &v : x) v = spread * N(rng);
    for (int64_t j = 0; j < n; j++) lwx[j] = log(1.0 / n) + 0.3 * N(rng);
    for (int64_t i = 0; i < m; i++) for (int c = 0; c < d; c++) qx[i + c * m] = spread * (1.1 * N(rng) + (i % 9 == 0 ? 3 : 0));
    std::vector<int64_t> ord(n), qord(m);
    std::iota(ord.begin(), ord.end(), 0); std::iota(qord.begin(), qord.end(), 0);
    kd(x, n, d, ord, 0, n, 256); kd(qx, m, d, qord, 0, m, 128);
    std::vector<double> z(n * d), lw(n), q(m * d);
    for (int64_t j = 0; j < n; j++) { lw[j] = lwx[ord[j]]; for (int c = 0; c < d; c++) z[j + c * n] = x[ord[j] + c * n]; }
    for (int64_t i = 0; i < m; i++) for (int c = 0; c < d; c++) q[i + c * m] = qx[qord[i] + c * m];
    // unit boxes and log weights (prune.c)
    std::vector<double> lo(n_units * d), hi(n_units * d), ulw(n_units);
    for (int64_t u = 0; u < n_units; u++) {
      double tot = 0; for (int64_t j = u * 256; j < u * 256 + 256; j++) tot += exp(lw[j]);
      ulw[u] = log(tot);
      for (int c = 0; c < d; c++) { double a = 1e300, b = -1e300;
        for (int64_t j = u * 256; j < u * 256 + 256; j++) { a = std::min(a, z[j + c * n]); b = std::max(b, z[j + c * n]); }
        lo[u * d + c] = a; hi[u * d + c] = b; }
    }
    const int64_t blocks = m / 128, words = (n_units + 31) / 32;
    std::vector<double> box(blocks * 2 * d);
    for (int64_t b = 0; b < blocks; b++) kde_rows_box(q.data(), m, d, b * 128, b * 128 + 128, &box[b * 2 * d], &box[b * 2 * d + d]);
    kde_prune_plan p{}; p.kernel = kernel; p.dim = d; p.n_tiles = n_units; p.lo = lo.data(); p.hi = hi.data();
    p.log_weight = ulw.data(); p.log_weight_rest = ulw.data(); p.tolerance = tol; p.leave_one_out = 0;
    p.derivative = second ? KDE_PRUNE_HESSIAN : KDE_PRUNE_GRADIENT;
    std::vector<int64_t> offset; std::vector<int32_t> visit;
    host_plan(p, q, m, 128, offset, visit);
    std::vector<uint32_t> mask(blocks * words);
    for (int64_t b = 0; b < blocks; b++)
      for (int64_t k = offset[b]; k < offset[b + 1]; k++) mask[b * words + visit[k] / 32] |= 1u << (visit[k] % 32);
    // host reference of the decision
    int mismatch = 0; int64_t visited = 0, ref_visited = 0, dens_visited = 0;
    for (int64_t b = 0; b < blocks; b++) {
      const double *ql = &box[b * 2 * d], *qh = ql + d;
      std::vector<double> key(n_units); kde_lse L = kde_lse_empty();
      for (int64_t t = 0; t < n_units; t++) { double a, c; kde_box_distances(ql, qh, &lo[t * d], &hi[t * d], d, &a, &c);
        L = kde_lse_add(L, ulw[t] + kde_log_profile(kernel, c)); }
      const double lb = log(tol) + kde_lse_log(L);
      double bs[KDE_PRUNE_BUCKETS] = {0};
      for (int64_t t = 0; t < n_units; t++) { double a, c; kde_box_distances(ql, qh, &lo[t * d], &hi[t * d], d, &a, &c);
        double f = 1;
        if (kernel == 0) { f = std::max(f, 0.5 * sqrt(c)); if (second) f = std::max(f, 0.25 * c); }
        else { const double s = sqrt(a); f = std::max(f, 0.5 / s); if (second) f = std::max(f, 0.25 + 0.25 / s); }
        key[t] = ulw[t] + kde_log_profile(kernel, a) + log(f) - lb;
        const int k = kde_prune_bucket(key[t]); if (k >= 0) bs[k] += exp(key[t]); }
      const int fs = kde_prune_first_skipped(bs);
      { /* the density's decision (F = 1), for comparison */
        double bd[KDE_PRUNE_BUCKETS] = {0}; std::vector<double> kd0(n_units);
        for (int64_t t = 0; t < n_units; t++) { double a, c; kde_box_distances(ql, qh, &lo[t * d], &hi[t * d], d, &a, &c);
          kd0[t] = ulw[t] + kde_log_profile(kernel, a) - lb; const int k = kde_prune_bucket(kd0[t]); if (k >= 0) bd[k] += exp(kd0[t]); }
        const int f0 = kde_prune_first_skipped(bd);
        for (int64_t t = 0; t < n_units; t++) dens_visited += kde_kernel_is_compact(kernel) ? 0 : kde_prune_bucket(kd0[t]) < f0;
      }
      for (int64_t t = 0; t < n_units; t++) {
        bool v;
        if (kde_kernel_is_compact(kernel)) { double a, c; kde_box_distances(ql, qh, &lo[t * d], &hi[t * d], d, &a, &c); v = a < 1.0 + KDE_PRUNE_SUPPORT_MARGIN; }
        else v = kde_prune_bucket(key[t]) < fs;
        const bool g = (mask[b * words + t / 32] >> (t % 32)) & 1u;
        mismatch += v != g; visited += g; ref_visited += v;
      }
    }
    // pruned sums (the real kernel, double) against the full sums
    std::vector<double> center(d, 0.0); const double scale = kde_log2_coordinate_scale(kernel);
    const bool lse = !kde_kernel_is_compact(kernel);
    std::vector<double> train(n / 32 * (d + 1) * 32);
    for (int64_t j = 0; j < n; j++) { double *tile = &train[(j / 32) * (d + 1) * 32 + j % 32];
      for (int c = 0; c < d; c++) tile[c * 32] = z[j + c * n] * scale;
      tile[d * 32] = lse ? lw[j] * kLog2e : exp(lw[j]); }
    size_t smem; auto fn = select_deriv_kernel<double>(kernel, d, second, false, &smem);
    const int fields = deriv_fields(d, second);
    std::vector<double> part((size_t) fields * m), acc((size_t) fields * m);
    deriv_args<double> a{}; a.train = train.data(); a.n_points = n; a.split_points = n; a.train_base = 0;
    a.query = q.data(); a.ldz = m; a.n_query = m; a.center = center.data(); a.dim = d; a.expanded = 0;
    a.part = part.data(); a.ldq = m; a.fields = fields; a.visit = visit.data(); a.visit_offset = offset.data();
    launch_block(dim3((unsigned) blocks, 1), kThreads, [&] { fn(a); });
    double worst = 0; std::vector<double> f(d), s2(d * d);
    for (int64_t i = 0; i < m; i++) {
      double s0, k1; std::vector<double> qi(d); for (int c = 0; c < d; c++) qi[c] = q[i + c * m];
      const double M = ref_full(kernel, n, d, z.data(), lw.data(), qi.data(), 0, n, &s0, &k1, f.data(), s2.data());
      if (!(s0 > 0)) continue;
      const double r = exp(part[i] * kLn2 - M);
      std::vector<double> e = {s0, k1}, g = {part[m + i] * r, part[2 * m + i] * r};
      for (int c = 0; c < d; c++) { e.push_back(f[c]); g.push_back(part[(3 + c) * m + i] * r); }
      if (second) for (int bb = 0; bb < d; bb++) for (int c = 0; c <= bb; c++) { e.push_back(s2[c + bb * d]); g.push_back(part[(3 + d + bb * (bb + 1) / 2 + c) * m + i] * r); }
      for (size_t k = 0; k < e.size(); k++) worst = std::max(worst, fabs(e[k] - g[k]) / s0);
    }
    printf("%-12s d=%d %s tol=%.0e: visited %5.1f%% (ref %5.1f%%, density %5.1f%%), mask mismatches %d, worst |error| / s0 %.2e%s\n", names[kernel], d,
           second ? "hess" : "grad", tol, 100.0 * visited / (blocks * n_units), 100.0 * ref_visited / (blocks * n_units), 100.0 * dens_visited / (blocks * n_units), mismatch, worst,
           (mismatch || worst > tol * (1 + 1e-9) + 1e-12) ? "   <-- FAIL" : "");
    failures += mismatch || worst > tol * (1 + 1e-9) + 1e-12;
    fflush(stdout);
  }
  return failures > 0;
}
