// Host emulation (run.sh mean_shift) of one mean-shift step near the modes
// of bench/derivatives.R's three 2-D clusters, on the GPU's derivative sums:
// the real plan (prune.c, whose bounds the device plan applies) and the real kernel
// (derivatives_kernels.cuh) at several tolerances, both precisions, against
// the step from exact double sums. kde_modes() stops a point when its step
// (data units) is below `tol`, 1e-3 x the smallest IQR (ks::kms's default):
// what matters is the step's error next to that tolerance.
//
// Data: 256 x 400 points, centres (-3, 0), (0, 3), (3, 0), sd 1, Scott's H
// of 1e6 such points (H = cov x 1e6^(-1/3), the bandwidth of the benchmark's
// n), whitened by H = R'R (z = x R^-1, so a step dz is dz R in the data).
// Queries: 128 per cluster, 0.02 to 0.15 from its centre (where ascents end)
// and 128 between the clusters (where steps are large).
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
#include <cstring>
using namespace kdegpu;
#include "launch.h"

constexpr int D = 2;

// the exact whitened step first / k1sum (Gaussian: k1 = -k / 2) in long double
static void exact_step(int64_t n, const std::vector<double> &z, const double *q, double *step)
{
  long double top = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    long double t = 0;
    for (int c = 0; c < D; c++) { const long double v = z[j + c * n] - q[c]; t += v * v; }
    top = std::max(top, -t / 2);
  }
  long double s0 = 0, f[D] = {0, 0};
  for (int64_t j = 0; j < n; j++) {
    long double t = 0, v[D];
    for (int c = 0; c < D; c++) { v[c] = z[j + c * n] - q[c]; t += v[c] * v[c]; }
    const long double k = expl(-t / 2 - top);
    s0 += k;
    for (int c = 0; c < D; c++) f[c] += -0.5L * k * v[c];
  }
  for (int c = 0; c < D; c++) step[c] = (double) (f[c] / (-0.5L * s0));
}

template <typename T>
static void gpu_steps(int64_t n, int64_t n_units, const std::vector<double> &z, const std::vector<double> &lw,
                      const std::vector<double> &lo, const std::vector<double> &hi, const std::vector<double> &ulw,
                      const std::vector<double> &q, int64_t m, double tol, std::vector<double> &step,
                      double *visited)
{
  const int kernel = KDE_GAUSSIAN;
  const int64_t blocks = m / 128;
  kde_prune_plan p;
  memset(&p, 0, sizeof p);
  p.kernel = kernel; p.dim = D; p.n_tiles = n_units; p.lo = lo.data(); p.hi = hi.data();
  p.log_weight = ulw.data(); p.log_weight_rest = ulw.data(); p.tolerance = tol; p.leave_one_out = 0;
  p.derivative = KDE_PRUNE_GRADIENT;
  std::vector<int32_t> visit; std::vector<int64_t> offset;
  host_plan(p, q, m, 128, offset, visit);
  *visited = (double) offset.back() / (double) (blocks * n_units);
  // the model: plain storage tiles centred on the training mean, times the scale
  std::vector<double> center(D, 0.0);
  for (int c = 0; c < D; c++) { for (int64_t j = 0; j < n; j++) center[c] += z[j + c * n]; center[c] /= n; }
  const double scale = kde_log2_coordinate_scale(kernel);
  std::vector<T> train(n / 32 * (D + 1) * 32);
  for (int64_t j = 0; j < n; j++) {
    T *tile = &train[(j / 32) * (D + 1) * 32 + j % 32];
    for (int c = 0; c < D; c++) tile[c * 32] = (T) ((z[j + c * n] - center[c]) * scale);
    tile[D * 32] = (T) (lw[j] * kLog2e);
  }
  size_t smem; auto fn = select_deriv_kernel<T>(kernel, D, false, false, &smem);
  const int fields = deriv_fields(D, false), splits = 3;
  std::vector<T> part((size_t) splits * fields * m);
  std::vector<double> acc((size_t) fields * m);
  deriv_args<T> a{};
  a.train = train.data(); a.n_points = n; a.split_points = (n_units + splits - 1) / splits * 256; a.train_base = 0;
  a.query = q.data(); a.ldz = m; a.n_query = m; a.center = center.data(); a.dim = D; a.expanded = 0;
  a.part = part.data(); a.ldq = m; a.fields = fields; a.visit = visit.data(); a.visit_offset = offset.data();
  launch_block(dim3((unsigned) blocks, splits), kThreads, [&] { fn(a); });
  blockDim = {256, 1, 1};
  for (int64_t i = 0; i < m; i++) {
    blockIdx = {(unsigned) (i / 256), 0, 0};
    threadIdx = {(unsigned) (i % 256), 0, 0};
    kde_deriv_merge_kernel<T>(part.data(), splits, fields, m, m, acc.data(), m, 1);
  }
  step.assign(m * D, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int c = 0; c < D; c++) step[i + c * m] = acc[(kFieldFirst + c) * m + i] / acc[kFieldK1 * m + i];
}

int main()
{
  std::mt19937_64 rng(3);
  std::normal_distribution<double> N(0, 1);
  std::uniform_real_distribution<double> U(0, 1);
  const int64_t n_units = 400, n = 256 * n_units;
  const double centres[3][2] = {{-3, 0}, {0, 3}, {3, 0}};
  std::vector<double> x(n * D);
  for (int64_t j = 0; j < n; j++) {
    const int k = (int) (U(rng) * 3);
    for (int c = 0; c < D; c++) x[j + c * n] = centres[k][c] + N(rng);
  }
  // Scott's H of 1e6 such points, H = R'R, z = x R^-1
  double mean[D] = {0, 0}, cov[D][D] = {{0, 0}, {0, 0}};
  for (int c = 0; c < D; c++) { for (int64_t j = 0; j < n; j++) mean[c] += x[j + c * n]; mean[c] /= n; }
  for (int b = 0; b < D; b++) for (int c = 0; c < D; c++) {
    for (int64_t j = 0; j < n; j++) cov[b][c] += (x[j + b * n] - mean[b]) * (x[j + c * n] - mean[c]);
    cov[b][c] /= n - 1;
  }
  const double f = pow(1e6, -1.0 / 3.0);
  const double h00 = cov[0][0] * f, h01 = cov[0][1] * f, h11 = cov[1][1] * f;
  const double r00 = sqrt(h00), r01 = h01 / r00, r11 = sqrt(h11 - r01 * r01); // R upper
  auto whiten = [&](double a0, double a1, double *o) { o[0] = a0 / r00; o[1] = (a1 - o[0] * r01) / r11; };
  auto unwhiten_step = [&](const double *s, double *o) { o[0] = s[0] * r00; o[1] = s[0] * r01 + s[1] * r11; };
  const double a_inv_norm = sqrt(std::max(h00, h11) + fabs(h01)); // >= ||R||_2 (Gershgorin)
  // kde_modes' tol: 1e-3 x the smallest IQR of the data's columns
  double iqr[D];
  for (int c = 0; c < D; c++) {
    std::vector<double> col(x.begin() + c * n, x.begin() + (c + 1) * n);
    std::sort(col.begin(), col.end());
    iqr[c] = col[(size_t) (0.75 * (n - 1))] - col[(size_t) (0.25 * (n - 1))];
  }
  const double tol_ms = 1e-3 * std::min(iqr[0], iqr[1]);
  printf("H = [%.4f %.2e; . %.4f], kde_modes tol %.2e (data units), ||A^-1|| <= %.3f\n", h00, h01, h11, tol_ms,
         a_inv_norm);
  // training points whitened, in a k-d order, unit boxes and log weights
  std::vector<double> zx(n * D);
  for (int64_t j = 0; j < n; j++) { double o[2]; whiten(x[j], x[j + n], o); zx[j] = o[0]; zx[j + n] = o[1]; }
  std::vector<int64_t> ord(n); std::iota(ord.begin(), ord.end(), 0);
  kd(zx, n, D, ord, 0, n, 256);
  std::vector<double> z(n * D), lw(n, log(1.0 / n));
  for (int64_t j = 0; j < n; j++) for (int c = 0; c < D; c++) z[j + c * n] = zx[ord[j] + c * n];
  std::vector<double> lo(n_units * D), hi(n_units * D), ulw(n_units);
  for (int64_t u = 0; u < n_units; u++) {
    ulw[u] = log(256.0 / n);
    for (int c = 0; c < D; c++) {
      double a = 1e300, b = -1e300;
      for (int64_t j = u * 256; j < u * 256 + 256; j++) { a = std::min(a, z[j + c * n]); b = std::max(b, z[j + c * n]); }
      lo[u * D + c] = a; hi[u * D + c] = b;
    }
  }
  // queries: 128 near each centre (0.02 to 0.15 away), 128 between clusters
  const int64_t m = 512;
  std::vector<double> q(m * D);
  for (int64_t i = 0; i < m; i++) {
    double p0, p1;
    if (i < 384) {
      const int k = (int) (i / 128);
      const double r = 0.02 + 0.13 * U(rng), th = 2 * M_PI * U(rng);
      p0 = centres[k][0] + r * cos(th); p1 = centres[k][1] + r * sin(th);
    } else {
      p0 = -4 + 8 * U(rng); p1 = -1 + 4 * U(rng);
    }
    double o[2]; whiten(p0, p1, o); q[i] = o[0]; q[i + m] = o[1];
  }
  std::vector<double> ref(m * D);
  for (int64_t i = 0; i < m; i++) {
    double qi[D] = {q[i], q[i + m]}, s[D];
    exact_step(n, z, qi, s);
    ref[i] = s[0]; ref[i + m] = s[1];
  }
  const double fix_tol = 1e-3 * tol_ms / (4 * a_inv_norm);
  printf("the fix's tolerance for these sums: 1e-3 tol / (4 ||A^-1||) = %.2e\n", fix_tol);
  printf("%-7s %-9s %8s %12s %12s %12s %12s\n", "prec", "tolerance", "visited", "near: |err|", "|err| / tol",
         "min |step|", "far: rel err");
  for (int prec = 0; prec < 2; prec++)
    for (double tol : {0.0, 1e-14, 1e-7, fix_tol, 1e-4, 1e-2}) {
      std::vector<double> st;
      double visited;
      if (prec == 0) gpu_steps<double>(n, n_units, z, lw, lo, hi, ulw, q, m, tol, st, &visited);
      else gpu_steps<float>(n, n_units, z, lw, lo, hi, ulw, q, m, tol, st, &visited);
      double near = 0, min_step = 1e300, far = 0;
      for (int64_t i = 0; i < m; i++) {
        double e[D] = {st[i] - ref[i], st[i + m] - ref[i + m]}, r[D] = {ref[i], ref[i + m]}, ed[D], rd[D];
        unwhiten_step(e, ed); unwhiten_step(r, rd);
        const double err = hypot(ed[0], ed[1]), size = hypot(rd[0], rd[1]);
        if (i < 384) { near = std::max(near, err); min_step = std::min(min_step, size); }
        else far = std::max(far, err / size);
      }
      printf("%-7s %-9.2e %7.1f%% %12.2e %12.2e %12.2e %12.2e%s\n", prec ? "single" : "double", tol, 100 * visited,
             near, near / tol_ms, min_step, far, near > 1e-2 * tol_ms ? "   <-- comparable to tol" : "");
      fflush(stdout);
    }
}
