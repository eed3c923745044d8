// Checks the device plan's per-query refinement (src/cuda/plan_refine_kernels.cuh,
// the real kernels run on the host): on normal, clustered and widely spread
// data, d = 1..4, the Gaussian, exponential and Epanechnikov kernels, two
// tolerances, leaving one out, an adaptive fit and the derivative sums'
// plans, each block's box plan (prune.c) is refined by both of plan_refine()'s
// paths (a few query blocks' two kernels, many blocks' one; on lists of up
// to 320 units too, which the one kernel reads in several chunks; and many
// blocks' one kernel with the longer lists sent to the two kernels), and then
//   - the one kernel's mask rows (one per group of 32 queries) and counts
//     are the two kernels', bit for bit;
//   - every refined list (the OR of a block's groups) lies in its box
//     list, each block's count is its mask rows', and the group rows are
//     those of the groups that keep each unit;
//   - every query's sum over the units its group keeps is within relative
//     tolerance of its full sum and never above it (compact kernels: equal),
//     against exact sums in double written here; for the derivative plans,
//     each of the sums behind a gradient and a Hessian (derivatives.h) within
//     tolerance times the kernel sum of its full value.
// It prints the pairs kept by the box plans and by the refined ones.
#include "prune.h"
#include "spatial.h"
#include <kdegpu/kernels.h>
#include "cuda_runtime.h"
#include "warp.h"
#undef __shared__
#define __shared__ static /* one block at a time: a block's shared memory */
#include "plan_refine_kernels.cuh"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
using namespace kdegpu;
#include "launch.h"
std::vector<std::unique_ptr<emulated_warp>> g_warps;

#include "plan_fit.h"

// Query i's derivative sums (derivatives.h: s0, k1sum, first[d], second[d x
// d]) over the points of `units` (all when NULL), into out relative to
// exp(returned log scale).
static double exact_derivative_sums(const fit &f, const std::vector<double> &q, int64_t m,
                                    int64_t i, const int32_t *units, int64_t n_units,
                                    std::vector<double> &out)
{
  const int64_t d = f.d;
  const int kernel = f.plan.kernel;
  out.assign(2 + d + d * d, 0.0);
  double scale = -INFINITY;
  std::vector<double> v(d);
  const int64_t count = units != NULL ? n_units : f.n_units;
  for (int64_t u = 0; u < count; u++) {
    const int64_t unit = units != NULL ? units[u] : u;
    for (int64_t j = unit * kUnit; j < (unit + 1) * kUnit; j++) {
      double t = 0;
      for (int64_t c = 0; c < d; c++) {
        v[c] = f.z[j + c * f.n] - q[i + c * m];
        t += v[c] * v[c];
      }
      const double lt = f.log_w[j] + kde_log_profile(kernel, t);
      if (!(lt > -INFINITY)) continue;
      if (lt > scale) {
        const double r = exp(scale - lt);
        for (auto &o : out) o *= r;
        scale = lt;
      }
      const double term = exp(lt - scale), a1 = term * kde_profile_ratio1(kernel, t);
      out[0] += term;
      if (t == 0) {
        if (std::isfinite(a1)) out[1] += a1;
        continue;
      }
      out[1] += a1;
      const double a2 = term * kde_profile_ratio2(kernel, t);
      for (int64_t c = 0; c < d; c++) {
        out[2 + c] += a1 * v[c];
        for (int64_t e = 0; e < d; e++) out[2 + d + c + e * d] += a2 * v[c] * v[e];
      }
    }
  }
  return scale;
}

int main()
{
  int failures = 0;
  const char *shapes[] = {"normal", "clustered", "spread"};
  const char *kernels[] = {"gaussian", "epanechnikov", "rectangular", "triangular",
                           "biweight", "cosine", "optcosine", "exponential"};
  /* per path: the box plans' pairs, the refined ones per block (the union
   * of its groups' needs) and as the kernel evaluates them per group */
  double kept_box[4] = {0, 0, 0, 0}, kept_refined[4] = {0, 0, 0, 0},
         kept_groups[4] = {0, 0, 0, 0};
  struct variant { bool adaptive; int loo; int derivative; };
  for (int kernel : {KDE_GAUSSIAN, KDE_EXPONENTIAL, KDE_EPANECHNIKOV})
    for (int64_t d = 1; d <= 4; d++)
      for (int shape = 0; shape < 3; shape++)
        for (double tol : {1e-7, 1e-3})
          for (int which = 0; which < 6; which++) {
            /* the plain fit; an adaptive one (Gaussian, d = 2); leaving one
             * out (d = 3); the gradient's and the Hessian's plans (d <= 3);
             * long lists (320 units: the one kernel reads them in 3 chunks,
             * or 5 without the dimension as a constant) */
            const variant v = {which == 1, which == 2 ? 1 : 0,
                               which == 3   ? KDE_PRUNE_GRADIENT
                               : which == 4 ? KDE_PRUNE_HESSIAN
                                            : KDE_PRUNE_DENSITY};
            if (which == 1 && !(kernel == KDE_GAUSSIAN && d == 2 && shape < 2)) continue;
            if (which == 2 && !(d == 3 && tol == 1e-7 && shape < 2)) continue;
            if ((which == 3 || which == 4) &&
                (kde_kernel_is_compact(kernel) || d > 3 || shape == 2))
              continue;
            const bool long_lists = which == 5;
            if (long_lists && !(kernel != KDE_EXPONENTIAL && (d == 2 || d == 3) && shape < 2 &&
                                tol == 1e-7))
              continue;
            std::mt19937_64 rng(31 + 100 * kernel + 10 * d + shape + (v.adaptive ? 7 : 0));
            std::normal_distribution<double> N(0, 1);
            const int64_t n = v.loo ? kUnit * 8 : long_lists ? kUnit * 320 : kUnit * 48;
            fit f;
            make_fit(kernel, d, shape, v.adaptive, tol, v.loo, n, rng, f);
            f.plan.derivative = v.derivative;
            // queries: jittered points, points between them, and far ones
            const int64_t m = v.loo ? n : 128 * 5 - 37;
            std::vector<double> q(m * d);
            std::uniform_int_distribution<int64_t> pick(0, n - 1);
            for (int64_t i = 0; i < m; i++) {
              const int64_t a = pick(rng), b = pick(rng);
              for (int64_t c = 0; c < d; c++)
                q[i + c * m] = v.loo       ? f.z[i + c * n]
                               : i % 5 < 3 ? f.z[a + c * n] + 0.5 * N(rng)
                               : i % 5 == 3 ? 0.5 * (f.z[a + c * n] + f.z[b + c * n])
                                            : 3000 + 500 * N(rng);
            }
            if (!v.loo) {
              std::vector<int64_t> qo(m);
              kde_kd_sort(q.data(), m, d, 128, 1, 1, qo.data());
            }
            const int64_t blocks = (m + 127) / 128, words = (f.n_units + 31) / 32;
            // the box plan (prune.c) and what it skipped per block
            std::vector<int64_t> offset(blocks + 1, 0);
            std::vector<int32_t> visit;
            std::vector<double> skipped(blocks), scratch(2 * f.n_units), lo(d), hi(d);
            std::vector<int64_t> tiles(f.n_units);
            for (int64_t b = 0; b < blocks; b++) {
              const int64_t r0 = b * 128, r1 = std::min(m, r0 + 128);
              kde_rows_box(q.data(), m, d, r0, r1, lo.data(), hi.data());
              const int64_t c = kde_tiles_to_visit(&f.plan, lo.data(), hi.data(), scratch.data(),
                                                   tiles.data());
              std::vector<char> listed(f.n_units, 0);
              for (int64_t k = 0; k < c; k++) {
                visit.push_back((int32_t) tiles[k]);
                listed[tiles[k]] = 1;
              }
              offset[b + 1] = offset[b] + c;
              kde_lse s = kde_lse_empty();
              if (!kde_kernel_is_compact(kernel))
                for (int64_t t = 0; t < f.n_units; t++) {
                  if (listed[t]) continue;
                  double min2, max2;
                  kde_box_distances(lo.data(), hi.data(), f.lo.data() + t * d, f.hi.data() + t * d,
                                    d, &min2, &max2);
                  kde_prune_scale(&f.plan, t, &min2, &max2);
                  s = kde_lse_add(s, kde_prune_log_upper(&f.plan, t, min2, max2));
                }
              skipped[b] = kde_lse_log(s);
            }
            // the refinement, as plan_refine() launches it: a few blocks' two
            // kernels (1, 2 or 4 warps per query; two chunks per block and
            // group), and many blocks' one kernel (path 2: its instance for
            // any dimension, on long lists; path 3: the lists longer than
            // the median, or all where they are alike, to the two kernels
            // with 4 warps per query, as plan_refine() sends a batch's
            // longest lists), whose masks and counts must be the two
            // kernels' to the bit
            std::vector<uint32_t> mask_two;
            std::vector<int64_t> count_two;
            std::vector<int64_t> lengths(blocks);
            for (int64_t b = 0; b < blocks; b++) lengths[b] = offset[b + 1] - offset[b];
            std::nth_element(lengths.begin(), lengths.begin() + blocks / 2, lengths.end());
            const int64_t median = lengths[blocks / 2];
            const int64_t split =
                *std::max_element(lengths.begin(), lengths.end()) > median ? median : -1;
            for (int path = 0; path < 4; path++) {
              if (path == 2 && !long_lists) continue;
              const list_lengths short_ones = {0, path == 3 ? split : INT64_MAX};
              const list_lengths long_ones = {path == 3 ? split + 1 : 0, INT64_MAX};
              std::vector<double> remaining(blocks * 128);
              std::vector<int32_t> first_skipped(blocks * 128);
              // a mask row per group of 32 queries; the counts, a 0, the group rows
              std::vector<uint32_t> mask(blocks * kQueryGroups * words, 0u);
              std::vector<int64_t> count(blocks + 2, 0);
              if (path >= 1) {
                // the dimension as a constant (d <= 4 on the device) or not
                // (path 3: as the library launches it, a constant)
                const bool constant = (tol < 1e-5 && path == 1) || path == 3;
                auto *one = !constant  ? kde_refine_blocks_kernel<0>
                            : d == 1   ? kde_refine_blocks_kernel<1>
                            : d == 2   ? kde_refine_blocks_kernel<2>
                            : d == 3   ? kde_refine_blocks_kernel<3>
                                       : kde_refine_blocks_kernel<4>;
                launch_warps(dim3((unsigned) blocks, kRefineQueryGroups), kRefineBlockThreads, [&] {
                  one(f.plan, q.data(), m, m, visit.data(), offset.data(), skipped.data(), words,
                      mask.data(), short_ones);
                });
              }
              if (path == 0 || path == 3) {
                // 1, 2 or 4 warps per query row, by the dimension (path 3: 4)
                const int w = path == 3 ? 4 : d == 1 || d == 4 ? 1 : d == 2 ? 2 : 4;
                auto *bounds = w == 1   ? kde_refine_bounds_kernel<1>
                               : w == 2 ? kde_refine_bounds_kernel<2>
                                        : kde_refine_bounds_kernel<4>;
                if (!kde_kernel_is_compact(kernel))
                  launch_warps(dim3((unsigned) blocks,
                                    (unsigned) (kBlockQueries * w / kRefineWarps)),
                               kRefineThreads, [&] {
                                 bounds(f.plan, q.data(), m, m, visit.data(), offset.data(),
                                        skipped.data(), remaining.data(), first_skipped.data(),
                                        long_ones);
                               });
                launch_warps(dim3((unsigned) blocks, 2 * kQueryGroups), kPlanThreads, [&] {
                  kde_refine_decide_kernel(f.plan, q.data(), m, m, visit.data(), offset.data(),
                                           remaining.data(), first_skipped.data(), words,
                                           mask.data(), long_ones);
                });
              }
              // two warps per list
              launch_warps(dim3((unsigned) ((2 * blocks + kRefineCountThreads / 32 - 1) /
                                            (kRefineCountThreads / 32))),
                           kRefineCountThreads, [&] {
                             kde_refine_count_kernel(
                                 visit.data(), offset.data(), blocks, 2, m, words, mask.data(),
                                 count.data(), (unsigned long long *) (count.data() + blocks + 1));
                           });
              // the refined lists: within the box lists, counted right; and
              // each group's list, the units the kernel evaluates for it
              int64_t bad_lists = 0, group_rows = 0;
              std::vector<std::vector<int32_t>> refined(blocks), of_group(blocks * kQueryGroups);
              for (int64_t b = 0; b < blocks; b++) {
                std::vector<char> listed(f.n_units, 0);
                for (int64_t k = offset[b]; k < offset[b + 1]; k++) listed[visit[k]] = 1;
                const int64_t rows = std::min<int64_t>(128, m - b * 128);
                for (int64_t t = 0; t < f.n_units; t++) {
                  const unsigned need = unit_groups(mask.data() + b * kQueryGroups * words, words, t);
                  if (need == 0u) continue;
                  refined[b].push_back((int32_t) t);
                  bad_lists += !listed[t];
                  for (int g = 0; g < kQueryGroups; g++)
                    if (need >> g & 1u) {
                      of_group[b * kQueryGroups + g].push_back((int32_t) t);
                      group_rows += group_rows_in(rows, g);
                    }
                }
                bad_lists += count[b] != (int64_t) refined[b].size();
                kept_box[path] += (double) rows * (double) (offset[b + 1] - offset[b]);
                kept_refined[path] += (double) rows * (double) refined[b].size();
              }
              bad_lists += count[blocks + 1] != group_rows;
              kept_groups[path] += (double) group_rows;
              // every query's sum over its group's list
              double worst_low = 0, worst_high = 0;
              for (int64_t i = 0; i < m; i++) {
                const int64_t self = v.loo ? i : -1;
                const auto &list = of_group[i / 32];
                const double full = exact_log_sum(f, q, m, i, NULL, 0, self);
                const double kept = exact_log_sum(f, q, m, i, list.data(), (int64_t) list.size(),
                                                  self);
                if (!std::isfinite(full) && !std::isfinite(kept)) continue;
                // log full - log kept in [0, -log(1 - tol)] (compact: 0), to rounding
                const double allowed = kde_kernel_is_compact(kernel) ? 0.0 : -log1p(-tol);
                worst_low = std::max(worst_low, (full - kept) - allowed);
                worst_high = std::max(worst_high, kept - full);
              }
              // the derivative sums: each within tolerance * s0 of its full value
              double worst_derivative = 0;
              if (v.derivative != KDE_PRUNE_DENSITY) {
                std::vector<double> full, kept;
                for (int64_t i = 0; i < m; i++) {
                  const double mf = exact_derivative_sums(f, q, m, i, NULL, 0, full);
                  const auto &list = of_group[i / 32];
                  const double mk = exact_derivative_sums(f, q, m, i, list.data(),
                                                          (int64_t) list.size(), kept);
                  if (!(full[0] > 0)) continue;
                  const double r = std::isfinite(mk) ? exp(mk - mf) : 0.0;
                  size_t fields = v.derivative == KDE_PRUNE_HESSIAN ? full.size() : 2 + d;
                  for (size_t k = 0; k < fields; k++)
                    worst_derivative = std::max(worst_derivative,
                                                fabs(full[k] - kept[k] * r) / full[0] - tol);
                }
              }
              if (path == 0) {
                mask_two = mask;
                count_two = count;
              }
              const bool same = mask == mask_two && count == count_two;
              const bool ok = bad_lists == 0 && worst_low <= 1e-12 && worst_high <= 1e-12 &&
                              worst_derivative <= 1e-12 && same;
              failures += !ok;
              printf("%s %s %s d=%lld %s tol=%g%s%s: box %lld units, refined %lld, beyond the "
                     "bound %.1e, above %.1e, derivatives beyond %.1e, bad lists %lld%s\n",
                     ok ? "ok  " : "FAIL",
                     path == 0   ? "2 kernels"
                     : path == 1 ? "1 kernel "
                     : path == 2 ? "1 kernel (any d)"
                                 : "long lists to 2",
                     kernels[kernel],
                     (long long) d, shapes[shape], tol,
                     v.adaptive   ? " adaptive"
                     : v.loo      ? " leave-one-out"
                     : long_lists ? " long lists"
                                  : "",
                     v.derivative == KDE_PRUNE_GRADIENT  ? " gradient"
                     : v.derivative == KDE_PRUNE_HESSIAN ? " hessian"
                                                         : "",
                     (long long) offset[blocks], (long long) [&] {
                       int64_t s = 0;
                       for (auto &r : refined) s += (int64_t) r.size();
                       return s;
                     }(),
                     worst_low, worst_high, worst_derivative, (long long) bad_lists,
                     same ? "" : ", NOT the two kernels' mask");
            }
          }
  printf("pairs kept: the refined plans %.3f (two kernels) and %.3f (one kernel) of the box "
         "plans' per block, %.3f and %.3f per group\n",
         kept_refined[0] / kept_box[0], kept_refined[1] / kept_box[1],
         kept_groups[0] / kept_box[0], kept_groups[1] / kept_box[1]);
  printf("plan_refine: %d failures\n", failures);
  return failures > 0 ? 1 : 0;
}
