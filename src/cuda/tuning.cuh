/*
 * tuning.cuh: the CUDA backend's tuning constants (block shape, tiles,
 * splits, batch and step sizes, the polynomial share of the exp2s) and the
 * per-precision traits of the kernels, each with why it has its value.
 */
#ifndef KDEGPU_CUDA_TUNING_CUH
#define KDEGPU_CUDA_TUNING_CUH

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "kde_limits.h"

namespace kdegpu {

/* 4 warps: enough to share one tile load, small enough that several blocks
 * fit an SM and hide each other's tile loads and barriers. */
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
/* Queries per thread (register blocking) and per block (32 lanes x 4). Each
 * block's 4 warps take the same 128 queries and a quarter of each tile, so a
 * block serves as few as 128 queries at full width (the few-queries shape). */
constexpr int kQueriesPerThread = 4;
constexpr int kBlockQueries = 32 * kQueriesPerThread;
/* A query block's groups of 32 rows: group g is rows 32 g .. 32 g + 31, slot
 * g of every thread of the small-d kernel (row lane + 32 g). The plan's
 * refinement decides per group (plan_refine_kernels.cuh), so that the
 * kernel evaluates a unit only for the groups that need it: a block of
 * sparse or far queries (between clusters, each needing the units near it)
 * lists the union of its groups' needs, half of which a group needs alone
 * (20 clusters, d = 3, tools/gpu-tests/emulate: 0.136 of the pairs per
 * block, 0.070 per group). */
constexpr int kQueryGroups = kQueriesPerThread;
constexpr int kGroupRows = kBlockQueries / kQueryGroups;
static_assert(kGroupRows == 32, "group g is slot g of every lane of a warp");
constexpr unsigned kAllGroups = (1u << kQueryGroups) - 1u;
/* Storage tile: 32 points stored dimension-major, (d + 1) rows of 32 values,
 * the last row being the per-point constant ("aux"). Four consecutive points
 * of one row are one 16-byte load. */
constexpr int kTileWidth = 32;
/* Unit of padding, splitting and sharding: the training set is padded with
 * null points (weight 0) to a multiple of kUnit, and every split, shard and
 * device range is whole units. Also the small-d shared tile. */
constexpr int kUnit = 256;
constexpr int kSmallPointsPerWarp = kUnit / kWarps;
/* An anchored model (model.cuh) stores each point relative to the anchor of
 * its run of kAnchorPoints, a warp's quarter of the small-d kernel's tile
 * (so each warp forms its queries against its own anchor, at no cost over
 * one anchor per tile). The fit's k-d order makes these runs compact (its
 * sub-leaves, kde_kd_sort): on 1e6 GPS-like points (2-D, 4,000 x 4,000
 * bandwidths) a run of 64 spans half the width of a unit, which halves what
 * single precision keeps of a pair's difference. */
constexpr int kAnchorPoints = kSmallPointsPerWarp;
static_assert(kUnit % kAnchorPoints == 0 && kAnchorPoints % kTileWidth == 0,
              "anchors cover whole storage tiles of one unit");
/* The FMA kernel with the queries in registers (kernel_small.cuh) serves
 * d = 1..kSmallMaxDim; the wide kernel the rest. */
constexpr int kSmallMaxDim = 4;
/* Wide kernel (d >= 5): each thread computes a 4-query x 8-point block. */
constexpr int kWidePoints = 8;
/* A split gets at least this many units, so that its first groups (which set
 * the running max) and the partial write stay a small part of its work. */
constexpr int64_t kMinUnitsPerSplit = 8;
/* The lazy running max (accumulate.cuh): a group whose sum (relative to
 * the max) passes kLazyLimit is summed again against its own maximum plus
 * kLazyHeadroom, which becomes the running max. A term's exponent (value -
 * max, in log2) rounds by eps times itself, and the terms that matter then
 * lie 16 below the max after a raise and at most 32 above it before the
 * next: 2^60 without headroom had kept up to 60 eps of log f. A
 * max is raised once its terms grow by 2^48, not 2^60 (raises are what the
 * limit costs: 2^16 without headroom, as accurate near the data, took 3-7%
 * of a full sum's time). The density kernel on the host, 2-D data at 15
 * points per bandwidth^2 and GPS-like sparse data (tools/gpu-tests/emulate,
 * 4,096 queries): largest errors of float densities 1.5e-6 and 3.1e-6 at
 * 2^60, 1.0e-6 and 1.8e-6 now (2^16 without headroom: 3.0e-7, 1.8e-6). */
constexpr double kLazyLimit = 4294967296.0; /* 2^32 */
constexpr int kLazyHeadroom = 16;
/* The tensor-core kernels' plain float running sums take a run of tiles'
 * sum once per this many points (a power of 2), few enough adds that their
 * drift stays below the expanded form's rounding (accumulate.cuh). */
constexpr int kTcSumPoints = 4096;
/* Tensor-core paths for the single-precision Gaussian: kde_tc_wide_kernel
 * at d >= kTcWideMinDim, kde_tc_small_kernel at d = kTcSmallDim. (At d = 1, 2 the
 * FMA kernel's difference form is 100x more accurate than any expanded
 * form: |q - x|^2 without the cancellation of |q|^2 + |x|^2 - 2 q.x.) */
constexpr int64_t kTcWideMinDim = 16;
constexpr int64_t kTcSmallDim = 3;
/* Wide kernel shared memory cap: leaves room for 2+ blocks per SM. */
constexpr size_t kWideSmemCap = 100 * 1024;
/* The merge of the splits' states: blocks of kMergeThreads, 2^k threads per
 * query for k up to 5 (a warp), or the whole block (k = 8) for a step of
 * more than kMergeThreads splits and few queries. */
constexpr int kMergeThreads = 256;
constexpr int kMergeBlockLanesLog2 = 8;
static_assert(kMergeThreads == 1 << kMergeBlockLanesLog2, "a block per query");
/* A pruned evaluation of at most this many queries is put in spatial order
 * on the host (a k-d order in about 60 us for 1000 queries); larger ones on
 * the device, whose order costs about 0.3 ms in syncs and copies whatever
 * the count (1000 queries against 1e7 points: 6% of the full sum, H200).
 * With 8192 the host's order was slower from m = 1500 on (clustered 2e5
 * points: 0.9-1.2 ms against 0.7-1.0 ms; m = 8000 2.7-3.0 against 1.1-1.2
 * ms; one H200's 16-core host). */
constexpr int64_t kHostOrderMaxQueries = 1024;
/* A pruned evaluation costs a plan: for one query block (at most
 * kBlockQueries queries) its kernels and a sync, about 0.1 ms on an H200;
 * for more, also ordering the queries and refining the plan per query,
 * about 0.3-0.6 ms. The full sum's time grows with the pairs, m x n with m
 * rounded up to a whole block (one block's sum takes about as long for 1
 * query as for 128), so below these pairs it costs less than the plan.
 * bench/plan_threshold.R, d = 3, N(0, I) points and queries, one H200, the
 * time with a plan over the time without (medians of sub-ms calls, which
 * vary by 10-30% between runs; one block: the range of two runs):
 *   one block, m = 1 / 128:  single n = 1e6: 1.03-1.09 / 1.10-1.16,
 *                            2e6: 0.60-1.04 / 1.00-1.13, 5e6: 0.60-0.89 /
 *                            0.94-1.06; double n = 5e5: 1.04-1.14 / 1.04,
 *                            1e6: 0.74-0.80 / 1.00-1.03, 2e6: 0.51-0.52 /
 *                            0.87-1.04;
 *   more blocks, m x n =     single n = 2e5: 1.20 / 1.11 / 0.80 / 0.86,
 *     1e9 / 2e9 / 4e9 / 8e9:        n = 5e5: 1.09 / 0.88 / 0.93 / 0.73,
 *                                   n = 2e6: 1.09 / 0.93 / 0.73 / 0.67;
 *                            double n = 2e5: 0.87 / 0.85 / 0.72 / 0.70,
 *                                   n = 2e6: 0.98 / 0.76 / 0.61 / 0.56;
 *                            double at 5e8: 0.99-1.12.
 * KDEGPU_PLAN_MIN_PAIRS (a number, read per evaluation) overrides all four,
 * so that tests can plan small evaluations. */
constexpr double kPlanMinPairsOneBlock[2] = {/* single */ 3.8e8, /* double */ 1.25e8};
constexpr double kPlanMinPairs[2] = {/* single */ 2e9, /* double */ 1e9};
/* Below those pairs, fits whose groups estimate that a query at the data
 * keeps at most kPlanLocalShare of the units (prune.h's
 * kde_prune_groups_local_share: clusters far apart, a bandwidth small
 * against the data's extent) are planned from these pairs (one block,
 * more blocks; by precision), where their plans paid: bench/plan_threshold.R
 * clustered gps, one H200, planned over full in two runs (estimates
 * 0.086-0.095 and 0.011). N(0, I) fits at Scott's rule gave 0.13-0.67 (d
 * = 1 to 3, n = 2e5 to 2e6, smaller with n), and a plan of 1e9 pairs
 * there took 1.09-1.12x the full sum's time in single (n = 2e6, d = 3,
 * bench/plan_threshold.R more), so the share is set below them:
 *   clustered 2e5 points, d = 2 / 3, m = 1280 / 2560 / 5300 (2.6e8 / 5.1e8 /
 *     1.1e9 pairs): single 1.29-1.47, 1.09-1.11, 0.79 / 1.04-1.29,
 *     1.18-1.20, 0.73-0.85; double 0.64-0.77, 0.45-0.49, 0.32-0.42 /
 *     0.59-0.71, 0.53-0.54, 0.41;
 *   GPS-like 1e6 points, m = 500 / 1000: single 0.71-0.78 / 0.66-0.79,
 *     double 0.33 / 0.27-0.32;
 *   one query: single GPS-like (1.3e8 pairs) 1.03-1.44; double clustered
 *     (2.6e7) 0.97-1.18, GPS-like (1.3e8) 0.70-0.71. */
constexpr double kPlanLocalShare = 0.1;
constexpr double kPlanLocalMinPairsOneBlock[2] = {/* single */ 1.9e8, /* double */ 6.25e7};
constexpr double kPlanLocalMinPairs[2] = {/* single */ 1e9, /* double */ 2.5e8};
/* Below this many queries per device, split the training set, not the
 * queries, across devices. */
constexpr int64_t kMinQueriesPerDevice = 16384;
/* An evaluation hands out its query batches as the devices become free
 * (after pruning the work per query differs with the data's density), in
 * about this many batches (fewer where memory or kMaxWorkPerStep asks for
 * smaller ones) whatever the number of devices: the batches, hence each
 * launch's split of the training range and the order of the sums, are the
 * same on one GPU as on several, and so are the results, to the bit. */
constexpr int64_t kClaimedBatches = 16;
/* The last claimed batches shrink to this share of the rows left, but not
 * below kClaimTailRows (about a wave of query blocks on an H100 or H200:
 * a smaller batch leaves the device part idle; evaluations of fewer rows
 * stay one batch). */
constexpr int64_t kClaimTailShare = 4;
constexpr int64_t kClaimTailRows = 65536;
/* Largest query batch (rows). */
constexpr int64_t kMaxBatchRows = (int64_t) 1 << 22;
/* Work per step (one batch against one shard), in pairs x the cost per pair
 * of pair_cost(): about a second on an H100 whatever the path, so
 * that the interrupt probe and the progress bar run that often. */
constexpr double kMaxWorkPerStep = 2e13;
/* Scratch buffers up to this size stay allocated between evaluations (no
 * allocation, nor the synchronisation of cudaFree, in a short call); larger
 * ones are freed at the end of the evaluation that needed them. */
constexpr size_t kKeepScratchBytes = (size_t) 256 << 20;
/* Discrete columns of a mixed-data fit that the GPU's kernels sum fused
 * into the pairs (kernel_discrete.cu; kde_backend.h): a template argument
 * each, as many kernels. */
constexpr int kMaxDiscrete = KDE_CUDA_DISCRETE_MAX;
/* Threads per block of the query packing kernel. */
constexpr int kPackThreads = 128;

/* Single-precision Gaussian: of the 32 exp2s a thread computes per group,
 * this many run as a polynomial on the FMA pipe (poly_exp2) rather than on
 * the MUFU, which is the busier pipe. The halved difference form at d = 1 /
 * 2 / 3 (one H200, harness ceiling, 1980 MHz): 0: 3.01 / 2.46 / 2.11e12
 * pairs/s, 2: 3.14 / 2.50 / 2.16e12, 4: 3.11 / 2.49 / 2.16e12, 8: 2.81 /
 * 2.31 / 1.96e12 (before the halving, 4 led by 1%; the expanded form at d
 * = 3 on an H100: 2: 2.79e12, 4: 2.83e12). These kernels issue
 * about 7 instructions a pair at d = 1 at three quarters of the issue slots
 * (ncu: 3.8 warps per scheduler, a quarter of cycles with none eligible),
 * so neither pipe's count decides: latency does. With the exps interleaved
 * with the FMAs (d <= 2, kernel_small.cuh): 0: 3.36 / 2.63e12, 1: 3.32 /
 * 2.68e12, 2: 3.41 / 2.71e12, 4: 3.02 / 2.47e12, 6: 2.96 / 2.48e12 at d =
 * 1 / 2 (d = 3: 2.10, 2.10, 2.12, 2.07, 2.02e12; weighted at d = 2, 0 led:
 * 2.61 against 2.50e12). The tight tiles (the expanded form at d = 2 and
 * 3) with 4 or 6: 1-3% slower at n = m = 1e7 through predict() at d = 3;
 * at d = 2 with 4: 3.35 -> 3.25e12 (harness ceiling). In the fused
 * steps at d = 2 (ncu, one H200) a group, 32 pairs a lane, issues 242
 * instructions and keeps the MUFU 30 x 8 = 240 cycles a scheduler: 2 puts
 * the two pipes level, and issue (80% busy, 3.75 warps a scheduler at 128
 * registers) is what the kernel's 3.0e12 pairs/s comes to. The 2 spread
 * evenly over a group instead of last (best in the harness's bare loop):
 * d = 2 3.51 -> 3.45e12, d = 3 2.94 -> 2.84e12 (one H200, harness ceiling). */
constexpr int kPolyExps = 2;
/* A warp's quarter of an anchored difference-form tile whose points all lie
 * within sqrt(kTightRadius2) of the tile's anchor (storage units, where a
 * pair's log2 k is -s2 / 2) takes the expanded form relative to the anchor
 * (tight_tile.cuh): d FMAs, the exp2 and an add a pair, against
 * the difference form's 2 d FMAs, the exp2, an add and the lazy-max check.
 * Its rounding, relative to the anchor, is about eps ((D + r)^2 / 2 +
 * r (D + r) + r^2 / 2) in log2 for a pair D apart, r the quarter's radius.
 * On data whose every unit reaches r (tools/gpu-tests/emulate density: the
 * real kernel on the host, against double sums; d = 3, six data sets
 * each, DENSITY_SEED 1-6), the largest error of a density over the
 * difference form's on the same data: at r^2 = 1, queries 3 units out
 * 1.3-2.2x (4.6e-7 against 2.1e-7 at most), 12 units out 0.7-1.5x,
 * leaving one out 1.0-1.2x; at r^2 = 2.25 0.65-1.3x, 0.9-1.5x and
 * 1.0-1.5x (3.3e-7 against 2.2e-7 at most); 2.9x at 2.25 before the
 * quarters were summed in their own frame (1ee28a7). With the quarter's
 * scale by TwoSum (tight_level; seeds 0-6): d = 3 0.64-1.33x, 0.62-1.11x,
 * 1.02-1.50x; d = 2 0.63-0.80x, 0.51-1.47x, 0.65-0.99x. Full sums (harness
 * ceiling, n = m = 1e6, one H200): at 1, 46% of the quarters are tight
 * (the others too wide) and d = 3 runs 2.59e12 pairs/s, at 2.25 2.76e12
 * (weighted 2.49 -> 2.71e12). model.cu's tight_radius2 (environment
 * KDEGPU_TIGHT_RADIUS2, from 0 to this, to measure; 0: never). */
constexpr double kTightRadius2 = 2.25;
/* ... and only while |q| r <= this for every query of the warp (q relative
 * to the anchor, r the quarter's radius, storage units), so that a tight
 * quarter's terms 2^(aux' + q.x) stay below 2^64 and its sum below 2^70
 * (tight_tile.cuh, tight_sums: no running max); farther queries take the
 * difference form. In tools/gpu-tests/emulate density (cubes whose runs
 * reach r^2 = 1) the tight form's largest error stayed within 1.5 times
 * the difference form's (+2e-7) at d = 3 (2.6e-7 against 2.5e-7 leaving
 * one out). d = 2 (while its tight tiles kept a running max) did so only
 * below 4, and the path cost the full sum 7.5%; summed in the quarter's
 * frame with the scale by TwoSum it stays within at 64 (seven data sets,
 * above) and gains: harness ceiling, one H200, same run, 3.07 -> 3.35e12
 * pairs/s, weighted 2.62 -> 3.32e12, 100 x 1e7 2.21 -> 2.39e12; at d = 1,
 * 64 gave 2.8e-6 against 1.4e-6 for queries 12 units out (8 stayed
 * within) for 2% more pairs/s. So the tight path is d = 2's and 3's
 * (kernel_small.cuh, TIGHT_PATH). */
constexpr double kTightLevel = 64;
/* A wide tight quarter (d = 3): |q| r up to this for the warp's queries,
 * where the quarter's points' log2 weights lie within kTightWideSpread of
 * each other (of the non-null ones), so that its terms lie in 2^(-100 -
 * r^2 / 2 - 20) .. 2^100 (none flushed to 0, the sum below 2^106) and its
 * sum is scaled with its exponent split off (tight_tile.cuh, wide_scaled).
 * Few queries spread over the data (100 x 1e7, d = 3, Scott's spread) have
 * quarters that pass the radius test (93%) but not |q| r <= 64 for every
 * query of the warp: 80% of the pairs took the tight form, 92% with this
 * (k-d ordered N(0, I) data, counted on the host). Harness ceiling, one
 * H200, same run: those 100 x 1e7 2.01 -> 2.08e12 pairs/s, n = 1e7 x 1e6
 * 3.04 -> 3.10e12; n = m = 1e6 2.943 -> 2.927e12 and 100 queries near the
 * centre 2.167 -> 2.156e12 (d = 2's machine code unchanged: there 99% of
 * the pairs were tight already). */
constexpr double kTightWideLevel = 100;
constexpr double kTightWideSpread = 20;
/* The same for the d = 3 tensor-core kernel. Its FP32 pipe has room, but
 * more polynomials did not pay (harness tcacc, H100, 5e4 x 1e6): 0: 3.06e12
 * to 3.11e12, 2: 3.11e12, 4: 3.10e12, 8: 2.76e12, 12: 2.49e12. */
constexpr int kTcPolyExps = 4;

template <typename T> struct real_traits;
/* group: training points per lazy-max check. min_blocks: blocks per SM the
 * register allocation must allow: 4 x 4 warps in float (5 spilled at d = 3
 * and gained 1-2 % at d <= 2; a group of 4 whose next group's values
 * interleave with its exp2s lost 5 %, a group of 8 gained 8-11 % at d <= 2:
 * harness ceiling, one H200, kernel_small.cuh's interleaved_exps); double
 * needs more registers per thread (its exp2 is a 12-term polynomial) and
 * has the ILP to run at 2 x 4 warps (16 independent exp2 chains per warp
 * and group). */
template <> struct real_traits<float> {
  static constexpr int group = 8;
  static constexpr int min_blocks = 4;
  static __device__ __forceinline__ float lowest() { return -FLT_MAX; }
};
template <> struct real_traits<double> {
  static constexpr int group = 4;
  static constexpr int min_blocks = 2;
  static __device__ __forceinline__ double lowest() { return -DBL_MAX; }
};

} // namespace kdegpu

#endif /* KDEGPU_CUDA_TUNING_CUH */
