// Host emulation (run.sh) of src/cuda/derivatives_kernels.cuh against a double
// reference of derivatives.h's contract.
#include "derivatives_kernels.cuh"
#include <thread>
#include <vector>
#include <random>
#include <algorithm>
#include <cstdio>
#include <cstring>
using namespace kdegpu;
#include "launch.h"
using kdegpu::deriv_smem;

template <typename T> void launch(deriv_kernel_fn<T> fn, dim3 grid, const deriv_args<T> &a)
{
  launch_block(grid, kThreads, [&] { fn(a); });
}

// reference: derivatives.c's sums_at over the units in `units`
static double ref_sums(int kernel, int64_t n, int64_t d, const double *z, const double *lw,
                       const double *q, const std::vector<int> &units, double *s0, double *k1,
                       double *first, double *second)
{
  double scale = -INFINITY, sum0 = 0, sum1 = 0;
  std::vector<double> v(d);
  for (int64_t c = 0; c < d; c++) first[c] = 0;
  for (int64_t c = 0; c < d * d; c++) second[c] = 0;
  for (int u : units)
    for (int64_t j = u * 256; j < std::min<int64_t>(n, u * 256 + 256); j++) {
      double t = 0;
      for (int64_t c = 0; c < d; c++) { v[c] = z[j + c * n] - q[c]; t += v[c] * v[c]; }
      const double lt = lw[j] + kde_log_profile(kernel, t);
      if (!(lt > -INFINITY)) continue;
      if (lt > scale) {
        const double f = exp(scale - lt);
        sum0 *= f; sum1 *= f;
        for (int64_t c = 0; c < d; c++) first[c] *= f;
        for (int64_t c = 0; c < d * d; c++) second[c] *= f;
        scale = lt;
      }
      const double term = exp(lt - scale);
      sum0 += term;
      const double a1 = term * kde_profile_ratio1(kernel, t);
      if (t == 0) { if (std::isfinite(a1)) sum1 += a1; continue; }
      sum1 += a1;
      for (int64_t c = 0; c < d; c++) first[c] += a1 * v[c];
      const double a2 = term * kde_profile_ratio2(kernel, t);
      for (int64_t e = 0; e < d; e++)
        for (int64_t c = 0; c < d; c++) second[c + e * d] += a2 * v[c] * v[e];
    }
  *s0 = sum0;
  *k1 = sum1;
  return scale;
}

template <typename T>
static double run_case(int kernel, int d, bool second, int expanded, unsigned seed, int splits,
                       int shards, bool prune, bool plain)
{
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  const int64_t n = 1300, m = 260, n_points = (n + 255) / 256 * 256, n_units = n_points / 256;
  const double spread = kde_kernel_is_compact(kernel) ? 0.6 : 2.0;
  std::vector<double> z(n * d), lw(n), w(n), q(m * d), center(d, 0.0);
  for (auto &x : z) x = spread * N(rng) + 3;
  for (int64_t j = 0; j < n; j++) { w[j] = j % 17 == 5 ? 0 : U(rng); }
  double tot = 0; for (double x : w) tot += x;
  for (int64_t j = 0; j < n; j++) { w[j] /= tot; lw[j] = w[j] > 0 ? log(w[j]) : -INFINITY; }
  for (int64_t i = 0; i < m; i++) {
    const int64_t src = (i * 7) % n;
    for (int c = 0; c < d; c++) {
      double v = z[src + c * n];
      if (i % 5 != 0) v += 0.3 * spread * N(rng);  // every 5th exactly a training point
      if (i == m - 1) v += 40 * spread;             // far out
      q[i + c * m] = v;
    }
  }
  for (int c = 0; c < d; c++) { double s = 0; for (int64_t j = 0; j < n; j++) s += z[j + c * n]; center[c] = s / n; }
  const double scale = kde_log2_coordinate_scale(kernel);
  const bool lse = !kde_kernel_is_compact(kernel);
  // plain storage tiles (pack_train)
  std::vector<T> train(n_points / 32 * (d + 1) * 32);
  // as the model stores them: relative to the anchor of each run of
  // kAnchorPoints (the centre of its box, hi + lo in T; runs past the
  // points: 0) in the difference form at d <= 4 (model.cu, pack.cu)
  const bool anchored = !expanded && d <= 4;
  const int64_t n_runs = n_points / kAnchorPoints;
  std::vector<T> anchors(anchored ? n_runs * 2 * d : 0);
  for (int64_t r = 0; anchored && r < n_runs; r++)
    for (int k = 0; k < d; k++) {
      double lo = INFINITY, hi = -INFINITY;
      for (int64_t j = r * kAnchorPoints; j < std::min<int64_t>(n, (r + 1) * kAnchorPoints); j++) {
        lo = std::min(lo, (z[j + k * n] - center[k]) * scale);
        hi = std::max(hi, (z[j + k * n] - center[k]) * scale);
      }
      const double mid = lo <= hi ? 0.5 * lo + 0.5 * hi : 0.0;
      anchors[r * 2 * d + k] = (T) mid;
      anchors[r * 2 * d + d + k] = (T) (mid - (double) anchors[r * 2 * d + k]);
    }
  for (int k = 0; k < d; k++)
    for (int64_t j = 0; j < n_points; j++) {
      // as pack.cu's pack_train: the storage coordinate to twice double's
      // precision (layout.cuh's storage_coordinate), less the run's anchor
      // (relative_to_anchor), rounded to T once, as the kernel forms q and
      // q - anchor; (z - c) * scale - av rounded otherwise, and a query on a
      // training point missed it by an ulp (t ~ 1e-32: the exponential's
      // k1 / k = -1 / (2 s) then ~1e15)
      const double av = anchored ? anchor_value(&anchors[j / kAnchorPoints * 2 * d], d, k) : 0.0;
      double hi = 0.0, lo = 0.0;
      if (j < n) storage_coordinate(z[j + k * n], 0.0, center[k], scale, hi, lo);
      train[(j / 32) * (d + 1) * 32 + k * 32 + j % 32] =
          j < n ? (T) (anchored ? relative_to_anchor(hi, lo, av) : hi) : (T) 0;
    }
  for (int64_t j = 0; j < n_points; j++) {
    T *tile = &train[(j / 32) * (d + 1) * 32 + j % 32];
    double aux;
    if (j >= n) aux = lse ? -INFINITY : 0.0;
    else if (!lse) aux = w[j];
    else {
      aux = lw[j] * kLog2e;
      if (expanded) { double n2 = 0; for (int k = 0; k < d; k++) n2 += (double) tile[k * 32] * (double) tile[k * 32]; aux -= 0.5 * n2; }
    }
    tile[d * 32] = (T) aux;
  }
  // visit lists: per query block a random subset of the units
  const int64_t blocks = (m + 127) / 128, ldq = blocks * 128;
  std::vector<int32_t> visit; std::vector<int64_t> offset(1, 0);
  std::vector<std::vector<int>> units_of(blocks);
  for (int64_t b = 0; b < blocks; b++) {
    for (int u = 0; u < n_units; u++) if (!prune || U(rng) < 0.6) { visit.push_back(u); units_of[b].push_back(u); }
    offset.push_back((int64_t) visit.size());
  }
  size_t smem = 0;
  auto fn = select_deriv_kernel<T>(kernel, d, second, plain, &smem);
  if (fn == nullptr || smem > sizeof deriv_smem) { printf("no kernel / smem %zu\n", smem); return 1e300; }
  const int fields = deriv_fields(d, second);
  std::vector<T> part((size_t) splits * fields * ldq);
  std::vector<double> acc((size_t) fields * ldq);
  const int64_t shard_units = (n_units + shards - 1) / shards;
  for (int64_t sf = 0; sf < n_units; sf += shard_units) {
    const int64_t units = std::min(shard_units, n_units - sf);
    const int64_t sp = std::min<int64_t>(splits, units);
    const int64_t actual = (units + (units + sp - 1) / sp - 1) / ((units + sp - 1) / sp);
    deriv_args<T> a{};
    a.train = train.data() + sf * 256 * (d + 1);
    a.n_points = units * 256;
    a.split_points = (units + actual - 1) / actual * 256;
    a.train_base = sf * 256;
    a.query = q.data(); a.ldz = m; a.n_query = m;
    a.center = center.data(); a.dim = d; a.expanded = expanded;
    a.anchor = anchored ? anchors.data() : nullptr;
    a.part = part.data(); a.ldq = ldq; a.fields = fields;
    a.visit = prune ? visit.data() : nullptr; a.visit_offset = prune ? offset.data() : nullptr;
    launch<T>(fn, dim3((unsigned) blocks, (unsigned) actual), a);
    blockDim = {256, 1, 1};
    for (int64_t i = 0; i < m; i++) {
      blockIdx = {(unsigned) (i / 256), 0, 0};
      threadIdx = {(unsigned) (i % 256), 0, 0};
      kde_deriv_merge_kernel<T>(part.data(), (int) actual, fields, ldq, m, acc.data(), ldq, sf == 0);
    }
  }
  // compare
  double worst = 0;
  std::vector<double> f(d), s2(d * d);
  for (int64_t i = 0; i < m; i++) {
    std::vector<double> qi(d); for (int c = 0; c < d; c++) qi[c] = q[i + c * m];
    double s0, k1;
    const double M = ref_sums(kernel, n, d, z.data(), lw.data(), qi.data(), units_of[i / 128], &s0, &k1, f.data(), s2.data());
    const double Mg = acc[i] > -INFINITY ? acc[i] * kLn2 : -INFINITY;
    if (!(s0 > 0)) {
      if (acc[ldq + i] != 0 || Mg != -INFINITY) { printf("  query %ld: expected empty, got M %g s0 %g\n", (long) i, Mg, acc[ldq + i]); worst = 1e300; }
      continue;
    }
    const double r = exp(Mg - M);
    std::vector<double> e = {s0, k1}, g = {acc[ldq + i] * r, acc[2 * ldq + i] * r};
    for (int c = 0; c < d; c++) { e.push_back(f[c]); g.push_back(acc[(3 + c) * ldq + i] * r); }
    if (second)
      for (int b = 0; b < d; b++) for (int c = 0; c <= b; c++) { e.push_back(s2[c + b * d]); g.push_back(acc[(3 + d + b * (b + 1) / 2 + c) * ldq + i] * r); }
    double big = 0, err = 0; for (double x : e) big = std::max(big, fabs(x));
    for (size_t k = 0; k < e.size(); k++) err = std::max(err, fabs(e[k] - g[k]));
    err /= big;
    if (sizeof(T) == 4 && i == m - 1) continue; /* far out: float's level has no digits to spare */
    if (!(err <= (sizeof(T) == 4 ? 1e-4 : 1e-11))) printf("  query %ld: err %.2e (s0 %g vs %g, M %g vs %g)\n", (long) i, err, s0, g[0], M, Mg);
    if (!(err <= worst)) worst = std::isnan(err) ? 1e300 : std::max(worst, err);
  }
  return worst;
}

int main(int argc, char **argv)
{
  const char *names[] = {"gaussian", "epanechnikov", "rectangular", "triangular", "biweight", "cosine", "optcosine", "exponential"};
  int dims[] = {1, 2, 3, 5, 16, 20, 40};
  const int only = argc > 1 ? atoi(argv[1]) : -1;
  /* "double": only the double sums count (the compact kernels' float sums
   * near their cusps exceed 1e-4: README.md) */
  const bool double_only = argc > 2 && strcmp(argv[2], "double") == 0;
  int failures = 0;
  for (int kernel = 0; kernel < 8; kernel++) {
    if (kernel == KDE_RECTANGULAR || (only >= 0 && kernel != only)) continue;
    for (int d : dims)
      for (int second = 0; second < 2; second++)
        for (int expanded = 0; expanded <= (kernel == KDE_GAUSSIAN); expanded++)
        for (int plain = 0; plain <= (kernel == KDE_GAUSSIAN && !second); plain++) {
          const unsigned seed = 1000 + kernel * 100 + d * 3 + second;
          const double ef = run_case<float>(kernel, d, second, expanded, seed, 3, 2, true, plain);
          const double ed = run_case<double>(kernel, d, second, expanded, seed, 2, 1, d <= 4, plain);
          printf("%-12s d=%-2d %s%s%s float %.2e double %.2e%s\n", names[kernel], d, second ? "hess" : "grad",
                 expanded ? " (expanded storage)" : "", plain ? " (difference form)" : "", ef, ed,
                 ((ef > 1e-4 && !double_only) || ed > 1e-10) ? "   <-- FAIL" : "");
          failures += (ef > 1e-4 && !double_only) || ed > 1e-10;
          fflush(stdout);
        }
  }
  return failures > 0;
}
