// Checks the device's grouped plan (src/cuda/plan_grouped_kernels.cuh, the
// real kernel run on the host): on normal, clustered and widely spread
// data, d = 1..4, the Gaussian, exponential and Epanechnikov kernels (a
// looser tolerance at d = 2, leaving one out at d = 3), each query block's
// list is made from the units' groups (prune.c's kde_prune_groups_make; on
// "large" fits of 10,247 units, groups of 8 to 256 units:
// kde_prune_groups_make_sized, as the device's can be), and then
//   - each block's count is its mask row's;
//   - every query's sum over its block's list is within relative tolerance
//     of its full sum and never above it (compact kernels: equal), against
//     exact sums in double written here;
//   - what the block reports skipped bounds what its list leaves out;
//   - the lists are prune.c's kde_tiles_to_visit_grouped's (the same proof,
//     sums in another order: counted where they differ);
// and the same for each query's own plan (check_per_query, on some cases).
// It prints the units the groups let the plan look at and the pairs kept.
#include "prune.h"
#include "spatial.h"
#include <kdegpu/kernels.h>
#include "cuda_runtime.h"
#include "warp.h"
#undef __shared__
#define __shared__ static /* one block at a time: a block's shared memory */
#include "plan_grouped_kernels.cuh"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
using namespace kdegpu;
#include "launch.h"
std::vector<std::unique_ptr<emulated_warp>> g_warps;

#include "plan_fit.h"

// The per-query plans (kde_plan_query_grouped_kernel, each query's point
// as its box, ORed into its group's row; kde_plan_rows_count_kernel):
//   - each group's row is the union of its queries' lists from prune.c's
//     kde_tiles_to_visit_grouped (the same proof, sums in another order:
//     rows that differ are counted, and more than 0.5% of the units
//     differing, or 2, fail);
//   - each block's count is the OR of its rows', the rows evaluated are
//     the rows' bits times their queries;
//   - every query's sum over its group's row is within relative tolerance
//     of its full sum and never above it.
// The emulator takes a fraction of a second to a minute per CUDA block, so
// it plans `queries` of the queries, spread over them (a sparse batch: 40
// make a group of 32 rows and a short one), with `warps` warps a query
// (plan_query_warps' choices: 8, 16 or 32; the fits in groups of 256
// units take each).
static bool check_per_query(const fit &f, const kde_prune_groups &groups, const plan_groups &pg,
                            const std::vector<double> &all_q, int64_t all_m,
                            const std::vector<double> &all_full, int loo, double tol,
                            int64_t queries, int warps, double *pairs)
{
  const int64_t m = std::min(all_m, queries);
  std::vector<int64_t> which(m);
  std::vector<double> q(m * f.d), full(m);
  for (int64_t j = 0; j < m; j++) {
    which[j] = j * all_m / m;
    full[j] = all_full[which[j]];
    for (int64_t c = 0; c < f.d; c++) q[j + c * m] = all_q[which[j] + c * all_m];
  }
  const int64_t d = f.d, words = (f.n_units + 31) / 32, blocks = (m + 127) / 128;
  const int64_t rows = blocks * kQueryGroups;
  std::vector<uint32_t> mask(rows * words, 0u);
  std::vector<int64_t> count(blocks + 2, 0);
  launch_warps(dim3((unsigned) m, 1), 32 * warps, [&] {
    if (warps == 32)
      kde_plan_query_grouped_kernel<32>(f.plan, pg, q.data(), m, words, mask.data());
    else if (warps == 16)
      kde_plan_query_grouped_kernel<16>(f.plan, pg, q.data(), m, words, mask.data());
    else
      kde_plan_query_grouped_kernel<8>(f.plan, pg, q.data(), m, words, mask.data());
  });
  launch_warps(dim3((unsigned) blocks, 1), kPlanThreads, [&] {
    kde_plan_rows_count_kernel(mask.data(), words, m, count.data(),
                               (unsigned long long *) (count.data() + blocks + 1));
  });
  int64_t bad = 0, differing = 0, evaluated = 0, bits_unlike = 0, host_bits = 0;
  std::vector<std::vector<int32_t>> units(rows);
  std::vector<double> scratch(2 * f.n_units + 2 * groups.n_groups), point(d);
  std::vector<int64_t> tiles(f.n_units);
  for (int64_t r = 0; r < rows; r++) {
    const int64_t first = r * kGroupRows, last = std::min(m, first + kGroupRows);
    std::vector<char> host(f.n_units, 0);
    for (int64_t i = first; i < last; i++) {
      for (int64_t c = 0; c < d; c++) point[c] = q[i + c * m];
      const int64_t n_host = kde_tiles_to_visit_grouped(&f.plan, &groups, point.data(),
                                                        point.data(), scratch.data(),
                                                        tiles.data());
      for (int64_t k = 0; k < n_host; k++) host[tiles[k]] = 1;
    }
    bool same = true;
    for (int64_t t = 0; t < words * 32; t++) {
      const bool bit = mask[r * words + t / 32] >> (t % 32) & 1u;
      if (t >= f.n_units) {
        bad += bit;
        continue;
      }
      if (bit) units[r].push_back((int32_t) t);
      same = same && bit == (host[t] != 0);
      bits_unlike += bit != (host[t] != 0);
      host_bits += host[t] != 0;
    }
    differing += !same;
    evaluated += (int64_t) units[r].size() * std::max<int64_t>(0, last - first);
    pairs[0] += (double) units[r].size() * (double) std::max<int64_t>(0, last - first);
    pairs[1] += (double) f.n_units * (double) std::max<int64_t>(0, last - first);
  }
  for (int64_t b = 0; b < blocks; b++) {
    int64_t c = 0;
    for (int64_t w = 0; w < words; w++) {
      uint32_t any = 0u;
      for (int g = 0; g < kQueryGroups; g++) any |= mask[(b * kQueryGroups + g) * words + w];
      c += __builtin_popcount(any);
    }
    bad += count[b] != c;
  }
  bad += count[blocks + 1] != evaluated;
  double worst_low = 0, worst_high = 0;
#pragma omp parallel for schedule(dynamic, 8) reduction(max : worst_low, worst_high)
  for (int64_t i = 0; i < m; i++) {
    const std::vector<int32_t> &u = units[i / kGroupRows];
    const double kept =
        exact_log_sum(f, q, m, i, u.data(), (int64_t) u.size(), loo ? which[i] : -1);
    if (!std::isfinite(full[i]) && !std::isfinite(kept)) continue;
    const double allowed = kde_kernel_is_compact(f.plan.kernel) ? 0.0 : -log1p(-tol);
    worst_low = std::max(worst_low, (full[i] - kept) - allowed);
    worst_high = std::max(worst_high, kept - full[i]);
  }
  /* the same proof as prune.c's, its sums in another order: a unit whose
   * bound sits at a bucket's edge may differ, a few at most (none seen) */
  const bool ok = bad == 0 && worst_low <= 1e-12 && worst_high <= 1e-12 &&
                  (double) bits_unlike <= std::max(2.0, 0.005 * (double) host_bits);
  printf("%s   per query (%d warps): rows' pairs %.3f of all, beyond the bound %.1e, above "
         "%.1e, bad counts %lld, rows unlike prune.c's %lld of %lld\n",
         ok ? "ok  " : "FAIL", warps, (double) evaluated / ((double) m * (double) f.n_units),
         worst_low, worst_high, (long long) bad, (long long) differing, (long long) rows);
  return ok;
}

int main()
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  int failures = 0;
  const char *shapes[] = {"normal", "clustered", "spread"};
  const char *kernels[] = {"gaussian", "epanechnikov", "rectangular", "triangular",
                           "biweight", "cosine", "optcosine", "exponential"};
  double listed_pairs = 0, all_pairs = 0, query_pairs[2] = {0, 0};
  int per_query_checks = 0;
  for (int kernel : {KDE_GAUSSIAN, KDE_EXPONENTIAL, KDE_EPANECHNIKOV})
    for (int64_t d = 1; d <= 4; d++)
      for (int shape = 0; shape < 3; shape++)
        for (double tol : {1e-7, 1e-3})
          for (int variant = 0; variant < 6; variant++) {
            /* leaving one out (variant 1): the Gaussian at d = 3; "large"
             * (2 to 5): at d = 2, 10,247 units in groups of 41 (words
             * inside groups, others across two, the last word partial), 8
             * (1,281 groups: past the host's 256), 256 (whole words, as
             * the device's groups at large n) or 100; a looser tolerance
             * at d = 2 */
            const int loo = variant == 1;
            const int64_t large_tiles[] = {0, 0, 41, 8, 256, 100};
            const int64_t group_tiles = large_tiles[variant];
            const bool large = group_tiles > 0;
            if (tol == 1e-3 && (d != 2 || variant != 0)) continue;
            if (loo && !(d == 3 && kernel == KDE_GAUSSIAN)) continue;
            if (large) {
              const bool gaussian = kernel == KDE_GAUSSIAN;
              const bool picked =
                  variant <= 3 ? (gaussian && shape == 0) ||
                                     (kernel == KDE_EPANECHNIKOV && shape == 1)
                  : variant == 4 ? (gaussian && shape == 2) ||
                                       (kernel == KDE_EXPONENTIAL && shape == 1)
                                 : (gaussian && shape == 1) ||
                                       (kernel == KDE_EPANECHNIKOV && shape == 0);
              if (d != 2 || !picked) continue;
            }
            std::mt19937_64 rng(37 + 100 * kernel + 10 * d + shape);
            std::normal_distribution<double> N(0, 1);
            const int64_t n = large ? kUnit * 10247 : loo ? kUnit * 24 : kUnit * 160;
            fit f;
            make_fit(kernel, d, shape, false, tol, loo, n, rng, f);
            kde_prune_groups groups;
            if (kde_prune_groups_make_sized(
                    d, f.n_units, large ? group_tiles : kde_prune_test_group_tiles(f.n_units),
                    f.lo.data(), f.hi.data(), f.lw.data(), f.rest.data(), &groups) != 0)
              return 2;
            plan_groups pg;
            pg.n_groups = groups.n_groups;
            pg.group_tiles = groups.group_tiles;
            pg.lo = groups.lo;
            pg.hi = groups.hi;
            pg.log_weight_sum = groups.log_weight_sum;
            pg.log_rest_sum = groups.log_rest_sum;
            if (!plan_groups_apply(f.plan, pg)) {
              printf("FAIL %s d=%lld: the groups do not apply\n", kernels[kernel], (long long) d);
              failures++;
              kde_prune_groups_free(&groups);
              continue;
            }
            // queries: jittered points, points between them, and far ones
            const int64_t m = loo ? n : 128 * 3 - 37;
            std::vector<double> q(m * d);
            std::uniform_int_distribution<int64_t> pick(0, n - 1);
            for (int64_t i = 0; i < m; i++) {
              const int64_t a = pick(rng), b = pick(rng);
              for (int64_t c = 0; c < d; c++)
                q[i + c * m] = loo          ? f.z[i + c * n]
                               : i % 5 < 3  ? f.z[a + c * n] + 0.5 * N(rng)
                               : i % 5 == 3 ? 0.5 * (f.z[a + c * n] + f.z[b + c * n])
                                            : 3000 + 500 * N(rng);
            }
            if (!loo) {
              std::vector<int64_t> qo(m);
              kde_kd_sort(q.data(), m, d, 128, 1, 1, qo.data());
            }
            const int64_t blocks = (m + 127) / 128, words = (f.n_units + 31) / 32;
            std::vector<double> box(blocks * 2 * d);
            for (int64_t b = 0; b < blocks; b++)
              kde_rows_box(q.data(), m, d, b * 128, std::min(m, b * 128 + 128),
                           box.data() + b * 2 * d, box.data() + b * 2 * d + d);
            std::vector<uint32_t> mask(blocks * words, 0xdeadbeefu); // every word written
            std::vector<int64_t> count(blocks + 1, -1);
            std::vector<double> skipped(blocks);
            launch_warps(dim3((unsigned) blocks, 1), kPlanThreads, [&] {
              kde_plan_grouped_kernel(f.plan, pg, box.data(), words, mask.data(), count.data(),
                                      skipped.data());
            });
            // every query's full sum (the reference)
            std::vector<double> full(m);
#pragma omp parallel for schedule(dynamic, 8)
            for (int64_t i = 0; i < m; i++)
              full[i] = exact_log_sum(f, q, m, i, NULL, 0, loo ? i : -1);
            // the lists, counted right, against prune.c's grouped plan
            int64_t bad_lists = 0, differing = 0, listed_units = 0;
            std::vector<std::vector<char>> listed(blocks, std::vector<char>(f.n_units, 0));
            std::vector<std::vector<int32_t>> units(blocks);
            std::vector<double> scratch(2 * f.n_units + 2 * groups.n_groups);
            std::vector<int64_t> tiles(f.n_units);
            double worst_skipped = 0;
            for (int64_t b = 0; b < blocks; b++) {
              int64_t c = 0;
              for (int64_t t = 0; t < f.n_units; t++)
                if (mask[b * words + t / 32] >> (t % 32) & 1u) {
                  listed[b][t] = 1;
                  units[b].push_back((int32_t) t);
                  c++;
                }
              for (int64_t t = f.n_units; t < words * 32; t++)
                bad_lists += mask[b * words + t / 32] >> (t % 32) & 1u;
              bad_lists += count[b] != c;
              listed_units += c;
              const int64_t rows = std::min<int64_t>(128, m - b * 128);
              listed_pairs += (double) rows * (double) c;
              all_pairs += (double) rows * (double) f.n_units;
              const int64_t host = kde_tiles_to_visit_grouped(
                  &f.plan, &groups, box.data() + b * 2 * d, box.data() + b * 2 * d + d,
                  scratch.data(), tiles.data());
              bool same = host == c;
              for (int64_t k = 0; k < host && same; k++) same = listed[b][tiles[k]];
              differing += !same;
              // what the block skipped: at least the sum of its left-out
              // units' bounds from the box, but for the terms whose share
              // of the budget underflows a double (exp below e^-745: the
              // budget is at most tol times any of the block's full sums)
              if (!kde_kernel_is_compact(kernel)) {
                double least_full = INFINITY;
                for (int64_t i = b * 128; i < std::min(m, b * 128 + 128); i++)
                  least_full = std::min(least_full, full[i]);
                const double lost = log((double) f.n_units) - 745.0 + log(tol) + least_full;
                kde_lse s = kde_lse_empty();
                for (int64_t t = 0; t < f.n_units; t++) {
                  if (listed[b][t]) continue;
                  double min2, max2;
                  kde_box_distances(box.data() + b * 2 * d, box.data() + b * 2 * d + d,
                                    f.lo.data() + t * d, f.hi.data() + t * d, d, &min2, &max2);
                  s = kde_lse_add(s, kde_prune_log_upper(&f.plan, t, min2, max2));
                }
                // the groups bound their units at once: above their sum
                kde_lse covered = kde_lse_empty();
                covered = kde_lse_add(covered, skipped[b]);
                covered = kde_lse_add(covered, lost);
                if (kde_lse_log(s) > -INFINITY)
                  worst_skipped = std::max(worst_skipped, kde_lse_log(s) - kde_lse_log(covered));
              }
            }
            // every query's sum over its block's list
            double worst_low = 0, worst_high = 0;
#pragma omp parallel for schedule(dynamic, 8) reduction(max : worst_low, worst_high)
            for (int64_t i = 0; i < m; i++) {
              const int64_t b = i / 128, self = loo ? i : -1;
              const double kept =
                  exact_log_sum(f, q, m, i, units[b].data(), (int64_t) units[b].size(), self);
              if (!std::isfinite(full[i]) && !std::isfinite(kept)) continue;
              // log full - log kept in [0, -log(1 - tol)] (compact: 0), to rounding
              const double allowed = kde_kernel_is_compact(kernel) ? 0.0 : -log1p(-tol);
              worst_low = std::max(worst_low, (full[i] - kept) - allowed);
              worst_high = std::max(worst_high, kept - full[i]);
            }
            const bool ok = bad_lists == 0 && worst_low <= 1e-12 && worst_high <= 1e-12 &&
                            worst_skipped <= 1e-9;
            failures += !ok;
            printf("%s %s d=%lld %s tol=%g%s: %lld groups, grouped lists %lld units of %lld, "
                   "beyond the bound %.1e, above %.1e, skipped understated %.1e, bad lists "
                   "%lld, blocks unlike prune.c's %lld of %lld\n",
                   ok ? "ok  " : "FAIL", kernels[kernel], (long long) d, shapes[shape], tol,
                   loo ? " leave-one-out" : large ? " large" : "",
                   (long long) groups.n_groups,
                   (long long) listed_units, (long long) (blocks * f.n_units), worst_low,
                   worst_high, worst_skipped, (long long) bad_lists, (long long) differing,
                   (long long) blocks);
            /* per query (slow in emulation: a CUDA block a query): the
             * clustered shape's cases, leaving one out, and the large
             * fits in groups of 256 units (the device's at large n), a
             * few queries there */
            if (group_tiles == 256) {
              for (int warps : {32, 16, 8})
                failures += !check_per_query(f, groups, pg, q, m, full, loo, tol,
                                             large ? 6 : 40, warps, query_pairs);
            } else if (shape == 1 || loo) {
              const int warps[] = {32, 8, 16};
              failures += !check_per_query(f, groups, pg, q, m, full, loo, tol, large ? 6 : 40,
                                           warps[per_query_checks++ % 3], query_pairs);
            }
            kde_prune_groups_free(&groups);
          }
  printf("pairs kept by the grouped plans: %.3f of all; by the per-query plans' groups of "
         "rows: %.3f\n", listed_pairs / all_pairs, query_pairs[0] / query_pairs[1]);
  printf("plan_grouped: %d failures\n", failures);
  return failures > 0 ? 1 : 0;
}
