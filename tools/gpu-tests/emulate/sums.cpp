// Host emulation (run.sh sums IN OUT) of kde_cuda_derivative_sums for one
// problem written by test_blocks.R: derivatives.cu's steps on the host with
// the real device code (derivatives_kernels.cuh) and the real plan (prune.c's
// bounds, which the device plan applies): the model's storage (pack_train: centred on the training mean,
// times the coordinate scale, aux as the layout has it), the queries in a
// k-d order (order_evaluation_queries' host path), each block's plan when
// the fit prunes, the training range in shards and splits, the merge in
// double, the results back in the caller's order.
//
// IN (native doubles): kernel, d, n, m, single, second, storage_expanded,
// prune, tolerance, splits, shard_units, then z (n x d), log_weight (n),
// query (m x d), column-major. OUT: log_scale, s0, k1sum (m each), first
// (m x d), second (m x d x d, or nothing).
#include "derivatives_kernels.cuh"
#include "prune.h"
#include "spatial.h"
#include "host_plan.h"
#include <thread>
#include <vector>
#include <algorithm>
#include <numeric>
#include <cstdio>
#include <cstring>
using namespace kdegpu;
#include "launch.h"

template <typename T>
static void run(int kernel, int64_t d, int64_t n, int64_t m, bool second, int storage_expanded, bool prune,
                double tol, int64_t splits_wanted, int64_t shard_units, const std::vector<double> &z,
                const std::vector<double> &lw, const std::vector<double> &query, FILE *out)
{
  const int64_t n_points = (n + kUnit - 1) / kUnit * kUnit, n_units = n_points / kUnit;
  const bool lse = kernel_sums_logs(kernel);
  const double scale = kde_log2_coordinate_scale(kernel);
  std::vector<double> center(d, 0.0);
  for (int64_t k = 0; k < d; k++) { double s = 0; for (int64_t j = 0; j < n; j++) s += z[k * n + j]; center[k] = s / (double) n; }
  // pack_train: the storage coordinate's hi part (layout.cuh's
  // storage_coordinate), as the kernel forms the query's, so that a query
  // on a training point lands on it (the cusps' t = 0)
  std::vector<T> train(n_points / kTileWidth * (d + 1) * kTileWidth);
  for (int64_t k = 0; k < d; k++)
    for (int64_t j = 0; j < n_points; j++) {
      double hi = 0.0, lo = 0.0;
      if (j < n) storage_coordinate(z[k * n + j], 0.0, center[k], scale, hi, lo);
      train[(j / 32) * (d + 1) * 32 + k * 32 + j % 32] = j < n ? (T) hi : (T) 0;
    }
  for (int64_t j = 0; j < n_points; j++) {
    T *tile = &train[(j / 32) * (d + 1) * 32 + j % 32];
    double aux;
    if (j >= n) aux = lse ? -INFINITY : 0.0;
    else if (!lse) aux = exp(lw[j]);
    else {
      aux = lw[j] * kLog2e;
      if (storage_expanded) {
        double norm2 = 0;
        for (int64_t k = 0; k < d; k++) { const double v = (double) tile[k * 32]; norm2 += v * v; }
        aux -= 0.5 * norm2;
      }
    }
    tile[d * 32] = (T) aux;
  }
  // the queries' order (pruning only, as derivatives.cu)
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  if (prune) kd(query, m, (int) d, order, 0, m, kBlockQueries);
  std::vector<double> q(m * d);
  for (int64_t i = 0; i < m; i++) for (int64_t k = 0; k < d; k++) q[k * m + i] = query[k * m + order[i]];
  const int64_t blocks = (m + kThreads - 1) / kThreads, ldq = blocks * kThreads;
  // the plan
  std::vector<int32_t> visit; std::vector<int64_t> offset;
  bool visiting = false;
  if (prune) {
    std::vector<double> lo(n_units * d), hi(n_units * d), ulw(n_units), rest(n_units);
    for (int64_t u = 0; u < n_units; u++) {
      const int64_t j1 = std::min<int64_t>(n, (u + 1) * kUnit);
      double tot = 0, top = 0;
      for (int64_t j = u * kUnit; j < j1; j++) { tot += exp(lw[j]); top = std::max(top, exp(lw[j])); }
      ulw[u] = tot > 0 ? log(tot) : -INFINITY;
      rest[u] = tot - top > 0 ? log(tot - top) : -INFINITY;
      for (int64_t k = 0; k < d; k++) {
        double a = INFINITY, b = -INFINITY;
        for (int64_t j = u * kUnit; j < j1; j++) { a = std::min(a, z[k * n + j]); b = std::max(b, z[k * n + j]); }
        lo[u * d + k] = a; hi[u * d + k] = b;
      }
    }
    kde_prune_plan p;
    memset(&p, 0, sizeof p);
    p.kernel = kernel; p.dim = d; p.n_tiles = n_units; p.lo = lo.data(); p.hi = hi.data();
    p.log_weight = ulw.data(); p.log_weight_rest = rest.data(); p.tolerance = kde_kernel_is_compact(kernel) ? 0.0 : tol;
    p.derivative = second ? KDE_PRUNE_HESSIAN : KDE_PRUNE_GRADIENT;
    host_plan(p, q, m, kThreads, offset, visit);
    visiting = (double) offset.back() < 0.9 * (double) blocks * (double) n_units;
  }
  const int fields = deriv_fields((int) d, second);
  size_t smem = 0;
  auto fn = select_deriv_kernel<T>(kernel, (int) d, second, false, &smem);
  if (fn == nullptr || smem > sizeof deriv_smem) { fprintf(stderr, "no kernel / smem %zu\n", smem); exit(2); }
  if (shard_units < 1 || shard_units > n_units) shard_units = n_units;
  std::vector<double> acc((size_t) fields * ldq);
  std::vector<T> part;
  for (int64_t sf = 0; sf < n_units; sf += shard_units) {
    const int64_t units = std::min(shard_units, n_units - sf);
    int64_t s = std::max<int64_t>(1, std::min(splits_wanted, units));
    s = (units + (units + s - 1) / s - 1) / ((units + s - 1) / s); // deriv_splits' whole units, none empty
    part.assign((size_t) s * fields * ldq, (T) 0);
    deriv_args<T> a{};
    a.train = train.data() + sf * kUnit * (d + 1);
    a.n_points = units * kUnit;
    a.split_points = (units + s - 1) / s * kUnit;
    a.train_base = sf * kUnit;
    a.query = q.data(); a.ldz = m; a.n_query = m; a.center = center.data(); a.dim = (int) d;
    a.expanded = storage_expanded; a.part = part.data(); a.ldq = ldq; a.fields = fields;
    a.visit = visiting ? visit.data() : nullptr; a.visit_offset = visiting ? offset.data() : nullptr;
    launch_block(dim3((unsigned) blocks, (unsigned) s), kThreads, [&] { fn(a); });
    blockDim = {256, 1, 1};
    for (int64_t i = 0; i < m; i++) {
      blockIdx = {(unsigned) (i / 256), 0, 0};
      threadIdx = {(unsigned) (i % 256), 0, 0};
      kde_deriv_merge_kernel<T>(part.data(), (int) s, fields, ldq, m, acc.data(), ldq, sf == 0);
    }
  }
  // deriv_scatter
  std::vector<double> o_ls(m), o_s0(m), o_k1(m), o_first(m * d), o_second(second ? m * d * d : 0);
  for (int64_t i = 0; i < m; i++) {
    const int64_t dst = order[i];
    const double top = acc[kFieldMax * ldq + i];
    o_ls[dst] = top > -INFINITY ? top * kLn2 : -INFINITY;
    o_s0[dst] = acc[kFieldS0 * ldq + i];
    o_k1[dst] = acc[kFieldK1 * ldq + i];
    for (int64_t c = 0; c < d; c++) o_first[dst + c * m] = acc[(kFieldFirst + c) * ldq + i];
    if (second)
      for (int64_t b = 0; b < d; b++)
        for (int64_t c = 0; c <= b; c++) {
          const double v = acc[(kFieldFirst + d + b * (b + 1) / 2 + c) * ldq + i];
          o_second[dst + (c + b * d) * m] = v;
          o_second[dst + (b + c * d) * m] = v;
        }
  }
  fwrite(o_ls.data(), sizeof(double), m, out);
  fwrite(o_s0.data(), sizeof(double), m, out);
  fwrite(o_k1.data(), sizeof(double), m, out);
  fwrite(o_first.data(), sizeof(double), m * d, out);
  if (second) fwrite(o_second.data(), sizeof(double), m * d * d, out);
}

int main(int argc, char **argv)
{
  if (argc < 3) { fprintf(stderr, "usage: sums IN OUT\n"); return 2; }
  FILE *in = fopen(argv[1], "rb");
  double h[11];
  if (in == nullptr || fread(h, sizeof(double), 11, in) != 11) { fprintf(stderr, "bad input\n"); return 2; }
  const int kernel = (int) h[0];
  const int64_t d = (int64_t) h[1], n = (int64_t) h[2], m = (int64_t) h[3];
  const bool single = h[4] != 0, second = h[5] != 0, prune = h[7] != 0;
  const int expanded = (int) h[6];
  std::vector<double> z(n * d), lw(n), q(m * d);
  if (fread(z.data(), sizeof(double), n * d, in) != (size_t) (n * d) ||
      fread(lw.data(), sizeof(double), n, in) != (size_t) n ||
      fread(q.data(), sizeof(double), m * d, in) != (size_t) (m * d)) { fprintf(stderr, "short input\n"); return 2; }
  fclose(in);
  FILE *out = fopen(argv[2], "wb");
  if (single) run<float>(kernel, d, n, m, second, expanded, prune, h[8], (int64_t) h[9], (int64_t) h[10], z, lw, q, out);
  else run<double>(kernel, d, n, m, second, expanded, prune, h[8], (int64_t) h[9], (int64_t) h[10], z, lw, q, out);
  fclose(out);
  return 0;
}
