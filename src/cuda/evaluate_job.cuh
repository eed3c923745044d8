/*
 * evaluate_job.cuh: one device's share of an evaluation (kde_device_job)
 * and what the two halves of an evaluation share. A job runs as steps, each
 * one query batch against one training shard: evaluate_step.cu sizes a job
 * (kernel choice, launch shape, batch rows, scratch) and enqueues its steps
 * on its device; evaluate.cu drives each device's job from a host thread of
 * its own (which batch comes next, waiting for the steps, the results back
 * in the caller's order) and merges their states.
 */
#ifndef KDEGPU_CUDA_EVALUATE_JOB_CUH
#define KDEGPU_CUDA_EVALUATE_JOB_CUH

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <chrono>

#include "kde_cuda.h"
#include "model.cuh"
#include "prune.h"
#include "tuning_hooks.h"

namespace kdegpu {

/* What an evaluation that prunes shares with its steps: the decision's
 * inputs (prune.c) and the queries, whitened and in spatial order, in the
 * coordinates of the model's unit boxes. */
typedef struct {
  kde_prune_plan plan;   /* on the host; device: each replica's copy */
  const double *queries; /* n_query x dim, column-major (host plan) */
  int64_t n_query;
  int threads;
  int device;            /* 1: each batch planned on its device (plan.cu) */
  double reserved;       /* device bytes the ordered queries hold there */
  const kde_replica *reserved_on;
} prune_context;

/* One device's share of an evaluation. */
typedef struct {
  kde_replica *rep;
  int64_t q_lo, q_hi;       /* queries of this device (all, when claiming) */
  std::atomic<int64_t> *claim_cursor; /* shared next unclaimed query, or NULL: fixed range */
  int64_t claimed;          /* first row of the batch claimed next, or -1 */
  int in_flight;            /* a step is queued on the device */
  int64_t batches;          /* batches finished (for the trace) */
  std::chrono::steady_clock::time_point finished_at; /* its last step (trace) */
  int64_t u_lo, u_hi;       /* training units of this device */
  int64_t shard_units;      /* units per step */
  int64_t ldq_max;          /* rows of a query batch */
  int split_cap;            /* partial states per row of a batch */
  double *state_max;        /* host, [q_hi - q_lo], this device's states */
  double *state_sum;        /* (when the host merges devices' states) */
  double *out;              /* or host results of q_lo.. (finished here) */
  /* the rows that a collected batch filled (rows of the evaluation, not
   * offsets from q_lo) and that still wait for their places in the
   * caller's order (in_caller_order; 0: none) */
  int64_t put_first, put_rows;
  /* kernel choice */
  void *fn;
  size_t smem;
  int chunk_dims, n_chunks;
  int concurrency;          /* resident blocks over all SMs */
  cudaEvent_t ev_start, ev_stop;
  /* cursor */
  int64_t q_next;           /* first query of the current batch */
  int64_t n_batch;          /* rows in the current batch */
  int64_t ldq;
  int64_t shard;            /* next shard within the current batch */
  int64_t step_units;       /* training units of the step in flight */
  int64_t raw_first;        /* the batch uploaded to rep->raw, if raw_rows */
  int64_t raw_rows;
  int batch_started;        /* this step packed a new batch */
  int batch_done;           /* this step finished the batch */
  /* caps from the other devices (0: none), so that all claim batches of
   * one size against shards of one size (log_density_impl) */
  int64_t limit_shard_units, limit_ldq;
  const prune_context *prune; /* NULL: every query block visits every unit */
  int visiting;             /* the current batch has a plan on the device */
  double batch_pairs;       /* pairs its plan evaluates (when visiting) */
  double batch_list_units;  /* its lists' mean length in the job's units */
  int batch_groups;         /* its lists' groups (rep->visit_groups) apply */
  double pairs;             /* pairs its batches' plans evaluate */
  double put_ms;            /* host time putting rows in the caller's order */
  kde_status status;        /* what went wrong on its host thread */
  kde_cuda_eval_stats counters; /* its share of the evaluation's counters */
  kde_cuda_eval_stats *stats; /* &counters, or NULL (then no kernel timing) */
} kde_device_job;

/* Rows of the batch that starts at query `first`. Claimed batches shrink
 * near the end, each to 1/kClaimTailShare of the rows left (a multiple of
 * kBlockQueries, at least kClaimTailRows), so that the devices finish
 * together: with full batches to the end, four H200s finished up to a
 * batch (30-50 ms) apart at n = m = 1e7. A function of `first` and the
 * job's size alone, so that one GPU and several make the same batches. */
inline int64_t batch_rows(const kde_device_job *job, int64_t first)
{
  const int64_t left = job->q_hi - first;
  int64_t rows = left < job->ldq_max ? left : job->ldq_max;
  if (job->claim_cursor != NULL) {
    int64_t tail = ceil_div(ceil_div(left, kClaimTailShare), kBlockQueries) * kBlockQueries;
    if (tail < kClaimTailRows) tail = kClaimTailRows;
    if (rows > tail) rows = tail;
  }
  return rows;
}

/* Kernel choice, launch shape and batch sizes for one device. Returns 0,
 * or -1 with the status set. */
template <typename T>
int prepare_job(const kde_cuda_model *model, kde_device_job *job, kde_status *status);

/* The device buffers of a job (its device is current). */
template <typename T>
int reserve_scratch(const kde_cuda_model *model, kde_device_job *job, kde_status *status);

/* Starts the upload of raw query rows [first, first + rows) to rep->raw on
 * the upload stream, once the previous batch there has been packed. The
 * source is R's (pageable) memory: the call returns when the copy has left
 * it, while the device may still be running the previous batch; or the
 * queries ordered on the first device (order.cu), a copy within or between
 * devices (cudaMemcpyDefault tells them apart). */
int upload_raw(const kde_cuda_model *model, const kde_query_set *query, kde_device_job *job,
               int64_t first, int64_t rows, kde_status *status);

/* Enqueue one step of `job` (one query batch against one training shard)
 * on its device. Returns 0, or -1 with the status set. */
template <typename T>
int enqueue_step(const kde_cuda_model *model, const kde_query_set *query, kde_device_job *job,
                 kde_status *status);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_EVALUATE_JOB_CUH */
