// Host emulation (run.sh density) of the density kernel for d <= 4
// (src/cuda/kernel_small.cuh, kde_small_kernel) on an anchored
// single-precision Gaussian fit, d = 1 to 3, with and without tight tiles
// (at d = 2 and 3, the expanded form relative to each tile's anchor where a
// warp's quarter lies close to it and its queries near enough; d = 1
// must not take it): the real kernel on the host, a model laid out
// as pack.cu lays it out (points relative to their run of kAnchorPoints'
// box centre, the
// anchors as float hi + lo, queries as hi and lo rows), queries in a k-d
// order in blocks of 128. Checked against a double sum over the exact
// coordinates: both forms within single's rounding, the tight form within
// 1.5x the difference form's error (+2e-7), leaving one out too, and the
// tight path taken (its bits differ) where the data are dense; and with a
// plan listing every unit for some of the block's groups of 32 queries
// (visit_groups: masked_tile), each query's sum against the double sum
// over the units listed for its group. The data are a cube whose units reach the tight radius, the worst case for the
// expanded form's rounding. DENSITY_R2 (a radius^2 to try instead of
// kTightRadius2), DENSITY_D (1, 2 or 3 only) and DENSITY_SEED (other data)
// are for measuring.
#include "cuda_runtime.h"
#include "warp.h"
#include "kernel_small.cuh"
#include "launch.h"
#include <cstdio>
#include <random>
#include <vector>
using namespace kdegpu;

namespace kdegpu { alignas(16) float4 smem_f4[64 * 1024 / 16]; }
std::vector<std::unique_ptr<emulated_warp>> g_warps;

struct problem {
  int d;
  int64_t n, m;
  std::vector<double> x, lw, q; // storage coordinates (log2 k = -s2 / 2), column-major
  bool loo;                     // queries are the points, each leaving itself out
};

// log2 of sum_j w_j 2^(-|q - x_j|^2 / 2) in double, the point itself left
// out, over the units whose `unit_ok` is set (NULL: all)
static double reference(const problem &p, int64_t i, const std::vector<char> *unit_ok = nullptr)
{
  double most = -INFINITY;
  std::vector<double> v(p.n, -INFINITY);
  for (int64_t j = 0; j < p.n; j++) {
    if (unit_ok != nullptr && !(*unit_ok)[j / kUnit]) continue;
    double s2 = 0;
    for (int k = 0; k < p.d; k++) {
      const double diff = p.q[k * p.m + i] - p.x[k * p.n + j];
      s2 += diff * diff;
    }
    v[j] = p.loo && j == i ? -INFINITY : p.lw[j] * kLog2e - s2 / 2;
    most = std::max(most, v[j]);
  }
  double s = 0;
  for (int64_t j = 0; j < p.n; j++) s += exp2(v[j] - most);
  return most + log2(s);
}

// The kernel's log2 sums for every query, tight tiles within radius2 (0: none);
// with groups (query block b, unit u: groups[b * units + u]), a plan
// listing every unit with those groups
template <int D>
static std::vector<double> emulate(const problem &p, float radius2,
                                   const std::vector<uint8_t> *groups = nullptr)
{
  const int64_t n_points = (p.n + kUnit - 1) / kUnit * kUnit, units = n_points / kUnit;
  constexpr int ROWS = D + 1;
  // anchors: the centre of each run of kAnchorPoints' box (runs past the
  // points: 0), as float hi + lo; with ANCHOR_POINTS = kUnit, one per unit
  // (the layout before runs of 64, to measure)
  const int64_t run = getenv("ANCHOR_POINTS") ? atoll(getenv("ANCHOR_POINTS")) : kAnchorPoints;
  const int64_t runs = n_points / run;
  std::vector<float> anchor(n_points / kAnchorPoints * 2 * D);
  std::vector<double> centre(runs * D);
  for (int64_t r = 0; r < runs; r++)
    for (int k = 0; k < D; k++) {
      double lo = INFINITY, hi = -INFINITY;
      for (int64_t j = r * run; j < std::min(p.n, (r + 1) * run); j++) {
        lo = std::min(lo, p.x[k * p.n + j]);
        hi = std::max(hi, p.x[k * p.n + j]);
      }
      const double mid = lo <= hi ? (lo + hi) / 2 : 0.0;
      const float mid_hi = (float) mid, mid_lo = (float) (mid - (double) mid_hi);
      centre[r * D + k] = (double) mid_hi + (double) mid_lo;
      for (int64_t c = r * run / kAnchorPoints; c < (r + 1) * run / kAnchorPoints; c++) {
        anchor[c * 2 * D + k] = mid_hi;
        anchor[c * 2 * D + D + k] = mid_lo;
      }
    }
  // tiles of 32 points: D coordinate rows relative to the anchor, then
  // aux = log2 w (-inf for null points, which sit on the anchor)
  std::vector<float> train(n_points / kTileWidth * ROWS * kTileWidth);
  for (int64_t j = 0; j < n_points; j++) {
    float *at = &train[(j / kTileWidth) * ROWS * kTileWidth + j % kTileWidth];
    for (int k = 0; k < D; k++)
      at[k * kTileWidth] = j < p.n ? (float) (p.x[k * p.n + j] - centre[(j / run) * D + k]) : 0.0f;
    at[D * kTileWidth] = j < p.n ? (float) (p.lw[j] * kLog2e) : -INFINITY;
  }
  // queries: hi rows, then lo rows
  const int64_t ldq = (p.m + kBlockQueries - 1) / kBlockQueries * kBlockQueries;
  std::vector<float> query(ldq * 2 * D, 0.0f);
  for (int64_t i = 0; i < p.m; i++)
    for (int k = 0; k < D; k++) {
      const double v = p.q[k * p.m + i];
      query[k * ldq + i] = (float) v;
      query[(D + k) * ldq + i] = (float) (v - (double) (float) v);
    }
  std::vector<float> part_max(ldq), part_sum(ldq);
  kde_args<float> a{};
  a.train = train.data();
  a.n_points = n_points;
  a.split_points = n_points;
  a.query = query.data();
  a.ldq = ldq;
  a.n_query = p.m;
  a.part_max = part_max.data();
  a.part_sum = part_sum.data();
  a.dim = D;
  a.leave_one_out = p.loo;
  a.tile_elems = ROWS * kTileWidth;
  a.anchor = anchor.data();
  a.tight_radius2 = radius2;
  a.code_row = 2 * D;
  std::vector<int32_t> visit;
  std::vector<int64_t> offset;
  if (groups != nullptr) {
    for (int64_t b = 0; b < ldq / kBlockQueries; b++) {
      offset.push_back((int64_t) visit.size());
      for (int64_t u = 0; u < units; u++) visit.push_back((int32_t) u);
    }
    offset.push_back((int64_t) visit.size());
    a.visit = visit.data();
    a.visit_offset = offset.data();
    a.visit_groups = groups->data();
  }
  constexpr int A = D >= 3 ? kFitPlain : kFitFixed; // the difference form's instances
  launch_warps(dim3((unsigned) (ldq / kBlockQueries)), kThreads,
               [&] { kde_small_kernel<KDE_GAUSSIAN, float, D, A>(a); });
  std::vector<double> out(p.m);
  for (int64_t i = 0; i < p.m; i++) out[i] = (double) part_max[i] + log2((double) part_sum[i]);
  return out;
}

// n points (column-major) in a k-d order of runs of `leaf`, each in one of
// runs of `sub_leaf` (0: none), as the fit's order (kde_kd_sort)
static std::vector<double> kd_ordered(const std::vector<double> &x, int64_t n, int d, int64_t leaf,
                                      int64_t sub_leaf = 0)
{
  std::vector<int64_t> idx(n);
  for (int64_t j = 0; j < n; j++) idx[j] = j;
  kd(x, n, d, idx, 0, n, leaf);
  for (int64_t lo = 0; sub_leaf > 0 && lo < n; lo += leaf)
    kd(x, n, d, idx, lo, std::min(n, lo + leaf), sub_leaf);
  std::vector<double> out(n * d);
  for (int64_t j = 0; j < n; j++)
    for (int k = 0; k < d; k++) out[k * n + j] = x[k * n + idx[j]];
  return out;
}

// n points uniform in a cube of `side` (storage units), a few of them
// weighted or of weight 0; m queries near points (a quarter of them moved
// `far` away), or the points themselves (loo); all in a k-d order
static problem make(int d, int64_t n, int64_t m, double side, double far, bool loo,
                    unsigned seed)
{
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.0, side);
  problem p;
  p.d = d;
  p.n = n;
  p.m = loo ? n : m;
  p.loo = loo;
  std::vector<double> x(n * d);
  for (auto &v : x) v = uniform(rng);
  p.x = kd_ordered(x, n, d, kUnit, kAnchorPoints);
  p.lw.assign(n, -log((double) n));
  for (int64_t j = 0; j < n; j += 97) p.lw[j] += j % 3 == 0 ? -INFINITY : 0.7 * normal(rng);
  if (loo) {
    p.q = p.x;
    return p;
  }
  std::vector<double> q(m * d);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int64_t i = 0; i < m; i++) {
    const int64_t j = pick(rng);
    for (int k = 0; k < d; k++)
      q[k * m + i] = p.x[k * n + j] + (i % 4 == 3 ? far / sqrt((double) d) : 0.5 * normal(rng));
  }
  p.q = kd_ordered(q, m, d, kBlockQueries);
  return p;
}

template <int D> static int check(const problem &p, const char *label)
{
  std::vector<double> ref(p.m);
  for (int64_t i = 0; i < p.m; i++) ref[i] = reference(p, i);
  const char *r2 = getenv("DENSITY_R2");
  const float radius2 = r2 != nullptr ? (float) atof(r2) : (float) kTightRadius2;
  const std::vector<double> tight = emulate<D>(p, radius2), plain = emulate<D>(p, 0.0f);
  double worst_tight = 0, worst_plain = 0;
  int64_t differ = 0, far = 0, differ_far = 0;
  for (int64_t i = 0; i < p.m; i++) {
    // relative error of the density, from log2
    worst_tight = std::max(worst_tight, fabs(expm1((tight[i] - ref[i]) * kLn2)));
    worst_plain = std::max(worst_plain, fabs(expm1((plain[i] - ref[i]) * kLn2)));
    differ += tight[i] != plain[i];
    // queries over 40 units from every point (their nearest quarter,
    // wide or not tight, sets their density)
    far += ref[i] < -800;
    differ_far += ref[i] < -800 && tight[i] != plain[i];
  }
  // single's rounding of the exponent: eps times the farthest query's
  // exponent, and the sums' (Kahan) rounding
  double most = 0;
  for (int64_t i = 0; i < p.m; i++) most = std::max(most, fabs(ref[i]));
  const double bound = 2e-6 + 8 * 0x1p-24 * most;
  // d = 2 and 3 take the path where the data are dense; d = 1 never does
  const bool ok = worst_tight <= bound && worst_plain <= bound &&
                  worst_tight <= 1.5 * worst_plain + 2e-7 &&
                  (D >= 2 ? differ > 0 : differ == 0);
  printf("%s d=%d %s: difference form %.2e, tight tiles %.2e (bound %.2e), %lld of %lld differ"
         " (%lld of %lld far ones)\n",
         ok ? "ok  " : "FAIL", D, label, worst_plain, worst_tight, bound, (long long) differ,
         (long long) p.m, (long long) differ_far, (long long) far);
  return ok ? 0 : 1;
}

// Every unit listed with a pseudo-random set of the block's groups (unit
// 0 with all): each query's sum against the double sum over its group's
// units; the kernel's masked_tile where some groups
// are listed, its other paths where all are.
template <int D> static int check_groups(const problem &p, const char *label)
{
  const int64_t units = (p.n + kUnit - 1) / kUnit, blocks = (p.m + 127) / 128;
  std::vector<uint8_t> groups(blocks * units);
  std::mt19937 rng(7);
  int64_t partial = 0;
  for (int64_t k = 0; k < blocks * units; k++) {
    const unsigned need = k % units == 0 ? kAllGroups : 1u + rng() % kAllGroups;
    groups[k] = (uint8_t) need;
    partial += groups[k] != kAllGroups;
  }
  const std::vector<double> got = emulate<D>(p, (float) kTightRadius2, &groups);
  double worst = 0, most = 0;
  std::vector<char> ok_unit(units);
  for (int64_t i = 0; i < p.m; i++) {
    const int64_t b = i / 128, g = (i % 128) / 32;
    for (int64_t u = 0; u < units; u++) ok_unit[u] = groups[b * units + u] >> g & 1u;
    const double ref = reference(p, i, &ok_unit);
    most = std::max(most, fabs(ref));
    worst = std::max(worst, fabs(expm1((got[i] - ref) * kLn2)));
  }
  const double bound = 2e-6 + 8 * 0x1p-24 * most;
  const bool ok = worst <= bound && partial > 0;
  printf("%s d=%d %s, units listed for some groups (%lld of %lld): %.2e (bound %.2e)\n",
         ok ? "ok  " : "FAIL", D, label, (long long) partial, (long long) (blocks * units),
         worst, bound);
  return ok ? 0 : 1;
}

// Queries D to D + 1.28 units from a quarter of points r from its centre,
// |q| r up to reach (63: within kTightLevel; 99: a wide quarter's; D = 70,
// r^2 = 1.9 or 0.78: points spread, D >= 3e4: near-duplicates): the tight
// tile's log2 density finite and within 1e-6 of the reference's (relative,
// as single keeps a log-density there), as the difference form's, and the
// tight path taken where |q|^2 <= 2^30 (its bits differ). (Before the
// tight test bounded |q|^2, the raise's rounding at h ~ 2^31 lost such a
// quarter's whole sum: -inf.)
static int check_far_quarters()
{
  int failed = 0;
  for (double reach : {63.0, 99.0})
    for (double D : {70.0, 3e4, 5e4, 6.5e4}) {
      problem p;
      p.d = 3;
      p.n = 64;
      p.m = 128;
      p.loo = false;
      const double r = reach / (D + 1.28), dir = 1 / sqrt(3.0); /* the farthest query's */
      p.x.assign(p.n * 3, 0);
      for (int64_t j = 0; j < p.n; j++)
        for (int k = 0; k < 3; k++) p.x[k * p.n + j] = 10 + (j % 2 ? r : -r) * dir;
      p.lw.assign(p.n, -log((double) p.n));
      p.q.assign(p.m * 3, 0);
      for (int64_t i = 0; i < p.m; i++)
        for (int k = 0; k < 3; k++) p.q[k * p.m + i] = 10 + (D + 0.01 * i) * dir;
      const std::vector<double> tight = emulate<3>(p, (float) kTightRadius2),
                                plain = emulate<3>(p, 0.0f);
      double worst = 0;
      int64_t differ = 0;
      for (int64_t i = 0; i < p.m; i++) {
        const double ref = reference(p, i);
        const double err = std::isfinite(tight[i]) ? fabs(tight[i] - ref) / fabs(ref) : INFINITY;
        worst = std::max(worst, err);
        differ += tight[i] != plain[i];
      }
      const bool taken = (D + 1.28) * (D + 1.28) <= 0x1p30;
      const bool ok = worst <= 1e-6 && (!taken || differ > 0);
      printf("%s d=3 queries %g units from a quarter of radius %.3g (|q| r %g): log2 density"
             " within %.2e, %s\n",
             ok ? "ok  " : "FAIL", D, r, reach, worst,
             taken ? (differ > 0 ? "tight" : "tight not taken") : "too far for the tight form");
      failed += !ok;
    }
  return failed;
}

// A wide quarter whose sum (some 2^101) joins a running max set, with
// its headroom (2^16), by one nearer point in the difference form (its
// quarter's others of weight 2^-100 but radius 2): with
// its share of the density 2^-ratio, 2^level lies below 2^-126, so that
// without its sum's exponent split off (wide_scaled) the quarter's share
// would flush to 0 (check: against the reference and the difference
// form's error).
static int check_wide_scale()
{
  int failed = 0;
  for (double ratio : {6.0, 10.0, 14.0}) {
    problem p;
    p.d = 3;
    p.n = 320;
    p.m = 128;
    p.loo = false;
    const double dir = 1 / sqrt(3.0), perp = 1 / sqrt(2.0), D1 = 66, r = 99 / (D1 + 1.28);
    /* the near point's log2 share: the wide quarter's plus ratio */
    const double near = 5 - (D1 - r) * (D1 - r) / 2 + ratio;
    const double D0 = sqrt(-2 * near);
    p.x.assign(p.n * 3, 0);
    for (int64_t j = 0; j < p.n; j++) {
      double at[3];
      for (int k = 0; k < 3; k++) at[k] = 10;
      if (j < 64) { /* the near point, the first tile's, and 63 of weight
                       2^-100 around it (radius^2 4: the difference form) */
        for (int k = 0; k < 3; k++) at[k] += (D1 - D0) * dir;
        if (j > 0) {
          at[0] += (j % 2 ? 2 : -2) * perp;
          at[1] -= (j % 2 ? 2 : -2) * perp;
        }
      } else if (j < 256) { /* far behind */
        for (int k = 0; k < 3; k++) at[k] -= 1e4 * dir;
      } else { /* the wide quarter, the second tile's: +-r along it */
        for (int k = 0; k < 3; k++) at[k] += (j % 2 ? r : -r) * dir;
      }
      for (int k = 0; k < 3; k++) p.x[k * p.n + j] = at[k];
    }
    p.lw.assign(p.n, -log((double) p.n));
    for (int64_t j = 1; j < 64; j++) p.lw[j] -= 100 * kLn2;
    p.q.assign(p.m * 3, 0);
    for (int64_t i = 0; i < p.m; i++)
      for (int k = 0; k < 3; k++) p.q[k * p.m + i] = 10 + (D1 + 0.01 * i) * dir;
    char label[80];
    snprintf(label, sizeof label, "a wide quarter 2^-%g of the density behind a nearer point",
             ratio);
    failed += check<3>(p, label);
  }
  return failed;
}

int main()
{
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int failed = 0;
  const char *only = getenv("DENSITY_D");
  const unsigned seed = getenv("DENSITY_SEED") ? 1000u * (unsigned) atoi(getenv("DENSITY_SEED")) : 0u;
  for (int d = 1; d <= 3; d++) {
    if (only != nullptr && atoi(only) != d) continue;
    for (int loo = 0; loo <= 1; loo++)
      for (double far : {3.0, 12.0, 45.0}) {
        if (loo && far > 3.0) continue;
        // a cube whose runs of kAnchorPoints reach about a storage unit
        // from their anchors, so that most warps' quarters are tight (the
        // factors were found for runs of 256: the side scales with the
        // d-th root of the points per run)
        const int64_t n = loo ? 3000 : 6000;
        const char *r2 = getenv("DENSITY_R2");
        const double radius = sqrt(r2 != nullptr ? atof(r2) : kTightRadius2);
        const double per_run = pow((double) kUnit / kAnchorPoints, 1.0 / d);
        const double side = radius * per_run *
                            (d == 1 ? 40 * (n / 6000.0)
                             : d == 2 ? 5.3 * sqrt(n / 6000.0) : 2.7 * cbrt(n / 6000.0));
        const problem p = make(d, n, 1024, side, far, loo == 1, 100 * d + (unsigned) far + seed);
        char label[64];
        if (loo) snprintf(label, sizeof label, "leaving one out");
        else snprintf(label, sizeof label, "a quarter of the queries %g units out", far);
        failed += d == 1 ? check<1>(p, label) : d == 2 ? check<2>(p, label) : check<3>(p, label);
        failed += d == 1   ? check_groups<1>(p, label)
                  : d == 2 ? check_groups<2>(p, label)
                           : check_groups<3>(p, label);
      }
  }
  if (only == nullptr || atoi(only) == 3) failed += check_far_quarters() + check_wide_scale();
  printf("%d failed\n", failed);
  return failed > 0;
}
