/*
 * tuning_hooks.h: what the benchmark harness (tools/gpu-tests/harness/harness.cu) may
 * set in the CUDA backend and read back from it, so that no harness hook
 * lives in production code: a model made with a tuning, and an evaluation
 * that reports its counters and kernel time. The functions of kde_cuda.h
 * are these with the defaults (NULL). Internal to the package: not part of
 * its C interface, and R never calls them.
 */
#ifndef KDEGPU_CUDA_TUNING_HOOKS_H
#define KDEGPU_CUDA_TUNING_HOOKS_H

#include <stdint.h>

#include "kde_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a model is built; NULL, or all zero, is the default. */
typedef struct {
  int no_mma; /* 1: the FMA kernels, even where a tensor-core kernel serves */
  /* The Gaussian's form (model.cu, expanded_rounding): 0 as the
   * rounding estimate against max_rounding says, 1 the expanded form (the density's at d >= 3,
   * with the tensor cores where they serve, and the gradient's), 2 the
   * difference form (the FMA kernels) */
  int form;
  int no_anchor; /* 1: coordinates as they are, never relative to the units'
                    anchors (model.cuh's anchored), to measure what anchors cost */
} kde_cuda_tuning;

/* What one evaluation did (all devices together). */
typedef struct {
  double kernel_ms;   /* event time of each step's kernels, summed */
  int64_t steps;      /* steps (a query batch against a training shard) */
  int64_t batches;    /* query batches finished */
  int64_t launches;   /* main kernel launches */
  int max_splits;     /* most splits of the training range in one launch */
  int split_training; /* 1: the devices split the training set; 0: the queries */
  /* Pairs evaluated (units visited x kUnit points, per query) and of all
   * n_query x n_points: below 1 when pruning skipped units. */
  double pairs_evaluated, pairs_total;
  double order_ms;    /* host time ordering the queries (a pruned evaluation) */
  double plan_ms;     /* host time planning the batches, summed over the devices */
  int device_plan;    /* 1: the plan made on the device; 0: on the host, or none */
} kde_cuda_eval_stats;

/* kde_cuda_model_create() with a tuning (NULL: the default). */
kde_cuda_model *kde_cuda_model_create_tuned(const kde_training_set *train,
                                            int precision, const int *devices,
                                            int n_devices, double memory_budget,
                                            double max_rounding,
                                            const kde_cuda_tuning *tuning,
                                            kde_status *status);

/* kde_cuda_log_density() that fills `stats` (NULL: none, and no kernel
 * timing). */
void kde_cuda_log_density_stats(kde_cuda_model *model, const kde_query_set *query,
                                kde_interrupt_probe interrupted, double *out,
                                kde_cuda_eval_stats *stats, kde_status *status);

/* The plan that a pruned evaluation of `query` makes on the device
 * (src/cuda/order.cu, plan.cu), over all its queries at once, for the
 * harness to check against prune.c: the queries' order (order[i]: the
 * caller's row of the i-th ordered query; the identity leaving one out),
 * the ordered whitened queries (sorted: n_query x dim, column-major) and the
 * units that each block of 128 ordered queries visits (offsets[0..n_blocks],
 * n_blocks = ceil(n_query / 128), and *visit, malloc'ed: the caller frees
 * it). ms[0]: the ordering, ms[1]: the planning, wall time with the device
 * synchronised. Returns 0, or -1 with the status set (also for a model
 * that does not prune). */
int kde_cuda_device_plan(kde_cuda_model *model, const kde_query_set *query, int64_t *order,
                         double *sorted, int64_t *offsets, int32_t **visit, double *ms,
                         kde_status *status);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_CUDA_TUNING_HOOKS_H */
