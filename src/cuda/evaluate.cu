/*
 * evaluate.cu: one evaluation: the loop that keeps every device busy (fixed
 * query ranges, or batches claimed as devices free up when pruning makes the
 * work per query uneven), the host merge of their states when they split
 * the training set, a pruned evaluation's queries in spatial order, and the
 * entry points. Each device's kernel choice, launch shape, batch sizes and
 * steps: evaluate_step.cu (the job they share: evaluate_job.cuh); whether a
 * plan can pay: plan_gate.cu.
 */
#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "evaluate_job.cuh"
#include "kernels.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include "spread.cuh"
#include "threads.h"
#include "tuning.cuh"
#include "tuning_hooks.h"

using namespace kdegpu;

/* KDEGPU_DEVICE_PLAN=0: a pruned evaluation orders its queries and plans
 * its batches on the host (kde_kd_sort, kde_plan_query_blocks), and the
 * single-precision Gaussian and exponential do not prune, as before the
 * device plan; for A/B measurements (src/cuda/DESIGN.md). Read once. */
static int device_plan_enabled(void)
{
  static const int enabled = kde_env_switch("KDEGPU_DEVICE_PLAN");
  return enabled;
}

/* The first row of the batch after the current one: the next rows of a
 * fixed range, or the next unclaimed batch of all the queries (q_hi when
 * none is left). The devices' host threads claim at once: the cursor
 * moves by compare-and-swap, so that each batch goes to one device. */
static int64_t claim_next_batch(kde_device_job *job)
{
  int64_t first;
  if (job->claim_cursor == NULL) return job->q_next + job->n_batch;
  if (job->claimed >= 0) {
    first = job->claimed;
    job->claimed = -1;
    return first;
  }
  first = job->claim_cursor->load();
  do {
    if (first >= job->q_hi) return job->q_hi;
  } while (!job->claim_cursor->compare_exchange_weak(first, first + batch_rows(job, first)));
  return first;
}

/* After the step: the next batch's raw rows travel while this one runs. */
static int prefetch_next_batch(const kde_cuda_model *model,
                               const kde_query_set *query, kde_device_job *job,
                               kde_status *status)
{
  int64_t next;
  if (!job->batch_started) return 0;
  next = claim_next_batch(job);
  if (job->claim_cursor != NULL && next < job->q_hi) job->claimed = next;
  if (next >= job->q_hi) return 0;
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  return upload_raw(model, query, job, next, batch_rows(job, next), status);
cleanup:
  return -1;
}

/* Once the step has finished: a finished batch's results, or its states and
 * |q|^2 / 2 for the host to merge, go straight into the host arrays. */
static int collect_batch(kde_device_job *job, double *query_offset,
                         kde_status *status)
{
  const double *acc = (const double *) job->rep->acc.ptr;
  const int64_t at = job->q_next - job->q_lo;
  const size_t bytes = (size_t) job->n_batch * sizeof(double);
  if (!job->batch_done) return 0;
  if (job->out != NULL) {
    KDE_CUDA_TRY(cudaMemcpy(job->out + at, acc + 2 * job->ldq_max, bytes,
                            cudaMemcpyDeviceToHost));
    job->put_first = job->q_next; /* a row of the evaluation, as order's */
    job->put_rows = job->n_batch;
    goto next_batch;
  }
  KDE_CUDA_TRY(cudaMemcpy(job->state_max + at, acc, bytes, cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(job->state_sum + at, acc + job->ldq_max, bytes,
                          cudaMemcpyDeviceToHost));
  /* every device has the same |q|^2 / 2: the first training share's
   * device writes it (the devices' threads run at once) */
  if (job->u_lo == 0)
    KDE_CUDA_TRY(cudaMemcpy(query_offset + job->q_next, acc + 2 * job->ldq_max, bytes,
                            cudaMemcpyDeviceToHost));
next_batch:
  job->q_next = claim_next_batch(job);
  job->batches++;
  job->shard = 0;
  job->batch_done = 0;
  if (job->stats != NULL) job->stats->batches++;
  return 0;
cleanup:
  return -1;
}

/* Where the queries were ordered (order[i]: the caller's row of ordered
 * row i), the results of ordered rows go to the caller's vector, each
 * batch's by its device's host thread as soon as the device has its next
 * step queued, so that this host work hides behind the device's (at
 * n = m = 1e7, d = 3, single, on one H200's host: 120-157 ms in all, of
 * which only the last batch's share is not hidden; done after the last
 * batch, it took 78-144 ms there). Split training scatters once, after the
 * host's merge. The first call touches every page of the caller's vector,
 * each thread a contiguous share, so that the scatters' random writes do
 * not fault them in from every thread at once. */
typedef struct {
  const int64_t *order; /* NULL: the rows are in the caller's order already */
  double *caller_out;
  int threads;          /* for one scatter (the devices' threads scatter at once) */
  std::once_flag touched;
} in_caller_order;

/* CPU threads for the host work of one device's thread (its scatters, a
 * plan made on the host): the devices' threads run at once, so each takes
 * its share of the caller's (`threads`, <= 0: all, kde_thread_count). */
static int threads_per_device(int threads, int n_devices)
{
  const int all = kde_thread_count(threads);
  const int share = (all + n_devices - 1) / n_devices;
  return share > 0 ? share : 1;
}

static void put_rows_in_order(in_caller_order *put, const double *sorted, int64_t first,
                              int64_t rows, int64_t n_query, double *ms)
{
  if (put->order == NULL || rows <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::call_once(put->touched, [&] {
    kde_first_touch(put->caller_out, (size_t) n_query * sizeof(double), put->threads);
  });
  kde_scatter_rows(sorted + first, put->order + first, rows, put->threads, put->caller_out);
  *ms += kde_ms_between(t0, std::chrono::steady_clock::now());
}

/* After a job's step: wait for it, count its pairs and time, and collect a
 * finished batch. */
static int finish_step(kde_device_job *job, double *query_offset,
                       double *done_pairs, kde_status *status)
{
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  KDE_CUDA_TRY(cudaStreamSynchronize(job->rep->stream));
  job->in_flight = 0;
  if (job->stats != NULL) {
    float ms = 0;
    KDE_CUDA_TRY(cudaEventElapsedTime(&ms, job->ev_start, job->ev_stop));
    job->stats->kernel_ms += ms;
    job->stats->steps++;
  }
  *done_pairs += (double) job->n_batch * (double) job->step_units;
  return collect_batch(job, query_offset, status);
cleanup:
  return -1;
}

/* What the devices' host threads share with the thread that started them. */
typedef struct {
  std::atomic<int> stop;    /* an error or an interrupt: no further steps */
  std::mutex mutex;         /* guards running, for `finished` */
  std::condition_variable finished;
  int running;              /* threads not yet done */
} device_threads;

/* One device's host thread: queue a step, put the batch collected before
 * it in the caller's order while the device runs, wait for the step,
 * collect its batch; until the job has no batch left or another thread
 * stops them all. The thread that waits for a device's plan or results
 * holds up no other device (one thread driving four H200s kept them 26%
 * below one's rate at n = m = 1e7). Run on R's thread (the only job),
 * it asks `interrupted` itself after each step (else NULL). */
template <typename T>
static void run_job(const kde_cuda_model *model, const kde_query_set *query,
                    kde_device_job *job, in_caller_order *put, double *query_offset,
                    std::atomic<double> *done_pairs, device_threads *shared,
                    kde_interrupt_probe interrupted, double total_pairs, int *interrupt)
{
  kde_status *status = &job->status;
  double done = 0;
  int failed = 1;
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  for (;;) {
    if (job->q_next < job->q_hi && !shared->stop.load()) {
      if (enqueue_step<T>(model, query, job, status) != 0) goto cleanup;
      if (prefetch_next_batch(model, query, job, status) != 0) goto cleanup;
      job->in_flight = 1;
    }
    put_rows_in_order(put, job->out, job->put_first, job->put_rows, query->n_query,
                      &job->put_ms);
    job->put_rows = 0;
    if (!job->in_flight) break;
    if (finish_step(job, query_offset, &done, status) != 0) goto cleanup;
    job->finished_at = std::chrono::steady_clock::now();
    done_pairs->store(done);
    if (interrupted != NULL && !shared->stop.load() && interrupted(done / total_pairs)) {
      *interrupt = 1;
      shared->stop.store(1);
    }
  }
  failed = 0;
cleanup:
  if (failed) shared->stop.store(1);
  {
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->running--;
  }
  shared->finished.notify_one();
}

/* Runs the jobs, each on a host thread of its own, while this thread (R's)
 * asks `interrupted` every kPollMs whether the user pressed Ctrl-C: then the
 * devices stop after the steps they are running. A single job runs on this
 * thread (no thread to start: a few queries on one GPU take about a
 * millisecond). Returns 0, or -1 with the status set (the first failing
 * device's, or the interrupt). */
template <typename T>
static int run_jobs(const kde_cuda_model *model, const kde_query_set *query,
                    kde_device_job *jobs, int n_dev, in_caller_order *put,
                    double *query_offset, kde_interrupt_probe interrupted,
                    double total_pairs, kde_status *status)
{
  constexpr int kPollMs = 20;
  device_threads shared;
  std::unique_ptr<std::atomic<double>[]> done_pairs(new (std::nothrow) std::atomic<double>[n_dev]);
  std::vector<std::thread> threads;
  int interrupt = 0;
  int with_work = 0, only = -1;
  if (!done_pairs) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for the devices' progress");
    return -1;
  }
  shared.stop.store(0);
  shared.running = 0;
  for (int r = 0; r < n_dev; r++) {
    done_pairs[r].store(0);
    if (jobs[r].q_next < jobs[r].q_hi) {
      with_work++;
      only = r;
    }
  }
  if (with_work == 1) {
    shared.running = 1;
    run_job<T>(model, query, &jobs[only], put, query_offset, &done_pairs[only], &shared,
               interrupted, total_pairs, &interrupt);
  } else {
    try {
      threads.reserve((size_t) with_work);
      for (int r = 0; r < n_dev; r++) {
        if (jobs[r].q_next >= jobs[r].q_hi) continue;
        {
          std::lock_guard<std::mutex> lock(shared.mutex);
          shared.running++;
        }
        try {
          threads.emplace_back(run_job<T>, model, query, &jobs[r], put, query_offset,
                               &done_pairs[r], &shared, (kde_interrupt_probe) NULL, 0.0,
                               (int *) NULL);
        } catch (...) { /* not started: it will not count itself done */
          std::lock_guard<std::mutex> lock(shared.mutex);
          shared.running--;
          throw;
        }
      }
    } catch (...) {
      shared.stop.store(1);
      kde_status_set(status, KDE_ERR_ALLOC, "could not start a host thread for each GPU");
    }
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(shared.mutex);
      if (shared.finished.wait_for(lock, std::chrono::milliseconds(kPollMs),
                                   [&] { return shared.running == 0; }))
        break;
    }
    if (interrupted == NULL || shared.stop.load()) continue;
    double done = 0;
    for (int r = 0; r < n_dev; r++) done += done_pairs[r].load();
    if (interrupted(done / total_pairs)) {
      interrupt = 1;
      shared.stop.store(1);
    }
  }
  for (auto &thread : threads) thread.join();
  if (status->code != KDE_OK) return -1;
  for (int r = 0; r < n_dev; r++)
    if (jobs[r].status.code != KDE_OK) {
      *status = jobs[r].status;
      return -1;
    }
  if (interrupt) {
    kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
    return -1;
  }
  return 0;
}

template <typename T>
static void log_density_impl(kde_cuda_model *model, const kde_query_set *query,
                             const prune_context *prune, in_caller_order *put,
                             kde_interrupt_probe interrupted, double *out,
                             kde_cuda_eval_stats *stats, kde_status *status)
{
  const int64_t nq = query->n_query;
  const int n_dev = model->n_devices;
  const int64_t n_units = model->n_points / kUnit;
  kde_device_job *jobs = NULL;
  double *state_max = NULL, *state_sum = NULL, *query_offset = NULL;
  double total_pairs = 0, evaluated = 0, put_ms = 0;
  std::atomic<int64_t> claim_cursor(0); /* the next query no device has claimed */
  int split_training, claiming, prev = -1, n_states_per_query, failed = 1;

  /* KDEGPU_TRACE times the kernels and the plans too */
  kde_cuda_eval_stats traced;
  if (stats == NULL && kde_trace_file() != NULL) {
    memset(&traced, 0, sizeof traced);
    stats = &traced;
  }
  const auto t_start = std::chrono::steady_clock::now();
  auto t_loop = t_start;
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  /* Few queries for several devices: split the training set instead. */
  split_training = n_dev > 1 && nq < (int64_t) n_dev * kMinQueriesPerDevice;
  claiming = !split_training;
  n_states_per_query = split_training ? n_dev : 1;
  if (stats != NULL) stats->split_training = split_training;

  KDE_HOST_ALLOC(jobs, n_dev, "the device jobs");
  if (split_training) {
    KDE_HOST_ALLOC(state_max, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(state_sum, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(query_offset, nq, "query norms");
  }

  for (int r = 0; r < n_dev; r++) {
    kde_device_job *job = &jobs[r];
    job->rep = &model->rep[r];
    if (split_training) {
      job->q_lo = 0;
      job->q_hi = nq;
      job->u_lo = n_units * r / n_dev;
      job->u_hi = n_units * (r + 1) / n_dev;
      job->state_max = state_max + (size_t) r * nq;
      job->state_sum = state_sum + (size_t) r * nq;
      /* an empty share: nothing to do, states stay empty */
      for (int64_t i = 0; i < nq; i++) {
        job->state_max[i] = -INFINITY;
        job->state_sum[i] = 0;
      }
    } else { /* every device claims batches of all the queries */
      job->q_lo = 0;
      job->q_hi = nq;
      job->u_lo = 0;
      job->u_hi = n_units;
      job->out = out;
      job->claim_cursor = &claim_cursor;
    }
    job->claimed = -1;
    job->q_next = job->q_lo;
    job->prune = prune;
    if (job->q_hi <= job->q_lo || job->u_hi <= job->u_lo) {
      job->q_next = job->q_hi;
      continue;
    }
    total_pairs += claiming ? (double) nq * (double) n_units / n_dev
                            : (double) (job->q_hi - job->q_lo) * (double) (job->u_hi - job->u_lo);
    if (prepare_job<T>(model, job, status) != 0) goto cleanup;
  }
  /* Claimed batches of one size, against training shards of one size,
   * with one split limit on every device (the smallest of each, where
   * memory differs: the first holds the ordered queries), so that the
   * devices' steps are the ones one device would run, summed in the same
   * order. Each is decided with the ones before it fixed: the shards, then
   * the batches (which depend on the shards), then the split limit. */
  if (claiming && n_dev > 1) {
    for (int pass = 0; pass < 2; pass++) {
      int64_t shard_units = INT64_MAX, rows = INT64_MAX;
      for (int r = 0; r < n_dev; r++) {
        if (jobs[r].q_next >= jobs[r].q_hi) continue;
        if (jobs[r].shard_units < shard_units) shard_units = jobs[r].shard_units;
        if (jobs[r].ldq_max < rows) rows = jobs[r].ldq_max;
      }
      for (int r = 0; r < n_dev; r++) {
        kde_device_job *job = &jobs[r];
        if (job->q_next >= job->q_hi) continue;
        job->limit_shard_units = shard_units;
        if (pass == 1) job->limit_ldq = rows;
        if (prepare_job<T>(model, job, status) != 0) goto cleanup;
      }
    }
    int split_cap = INT_MAX;
    for (int r = 0; r < n_dev; r++)
      if (jobs[r].q_next < jobs[r].q_hi && jobs[r].split_cap < split_cap)
        split_cap = jobs[r].split_cap;
    for (int r = 0; r < n_dev; r++) jobs[r].split_cap = split_cap;
  }
  for (int r = 0; r < n_dev; r++) {
    kde_device_job *job = &jobs[r];
    if (job->q_next >= job->q_hi) continue;
    KDE_CUDA_TRY(cudaSetDevice(job->rep->device)); /* reserve_scratch's device */
    if (claiming) job->q_next = claim_next_batch(job); /* after ldq_max is known */
    if (reserve_scratch<T>(model, job, status) != 0) goto cleanup;
    if (sync_whitening(model, query, job->rep, status) != 0) goto cleanup;
    if (stats != NULL) {
      job->stats = &job->counters;
      KDE_CUDA_TRY(cudaEventCreate(&job->ev_start));
      KDE_CUDA_TRY(cudaEventCreate(&job->ev_stop));
    }
  }

  t_loop = std::chrono::steady_clock::now();
  if (run_jobs<T>(model, query, jobs, n_dev, put, query_offset, interrupted, total_pairs,
                  status) != 0)
    goto cleanup;
  for (int r = 0; r < n_dev; r++) {
    evaluated += jobs[r].pairs;
    put_ms += jobs[r].put_ms;
    if (stats == NULL) continue;
    stats->kernel_ms += jobs[r].counters.kernel_ms;
    stats->plan_ms += jobs[r].counters.plan_ms;
    stats->steps += jobs[r].counters.steps;
    stats->batches += jobs[r].counters.batches;
    stats->launches += jobs[r].counters.launches;
    if (jobs[r].counters.max_splits > stats->max_splits)
      stats->max_splits = jobs[r].counters.max_splits;
  }

  /* Split training: merge the devices' states and finish on the host. */
  for (int64_t i = 0; split_training && i < nq; i++) {
    kde_lse_2 st = kde_lse_make_2(state_max[i], state_sum[i]);
    for (int r = 1; r < n_states_per_query; r++)
      st = kde_lse_merge_2(st, kde_lse_make_2(state_max[(size_t) r * nq + i],
                                              state_sum[(size_t) r * nq + i]));
    out[i] = finish_log_density(st, query_offset[i], model->expanded, query->log_const);
  }
  if (split_training) put_rows_in_order(put, out, 0, nq, nq, &put_ms);
  /* the pairs evaluated: visited units x kUnit per query, of n_points each */
  if (stats != NULL) {
    stats->pairs_evaluated = evaluated;
    stats->pairs_total = (double) nq * (double) model->n_points;
  }
  if (query->pairs_share != NULL)
    *query->pairs_share = evaluated / ((double) nq * (double) model->n_points);
  if (kde_trace_file() != NULL) {
    const auto t_end = std::chrono::steady_clock::now();
    fprintf(kde_trace_file(), "evaluate n_query=%lld devices=%d split_training=%d claiming=%d"
            " setup_ms=%.2f loop_ms=%.2f scatter_ms=%.2f kernel_ms=%.2f plan_ms=%.2f",
            (long long) nq, n_dev, split_training, claiming, kde_ms_between(t_start, t_loop),
            kde_ms_between(t_loop, t_end), put_ms, stats->kernel_ms, stats->plan_ms);
    for (int r = 0; r < n_dev; r++) {
      if (jobs[r].batches == 0) { /* no work came to it: no finishing time */
        fprintf(kde_trace_file(), " dev%d_batches=0", r);
        continue;
      }
      fprintf(kde_trace_file(), " dev%d_done_ms=%.2f dev%d_batches=%lld", r,
              kde_ms_between(t_loop, jobs[r].finished_at), r, (long long) jobs[r].batches);
    }
    fprintf(kde_trace_file(), "\n");
    fflush(kde_trace_file());
  }
  failed = 0;

cleanup:
  if (jobs != NULL) {
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      kde_replica *rep = job->rep;
      if (rep == NULL || cudaSetDevice(rep->device) != cudaSuccess) continue;
      /* on an error path work may still be queued on buffers freed below */
      (void) cudaStreamSynchronize(rep->upload);
      (void) cudaStreamSynchronize(rep->stream);
      if (failed || scratch_bytes(rep) > kKeepScratchBytes) scratch_release(rep);
      if (job->ev_start) (void) cudaEventDestroy(job->ev_start);
      if (job->ev_stop) (void) cudaEventDestroy(job->ev_stop);
    }
    (void) cudaGetLastError();
  }
  free(jobs);
  free(state_max);
  free(state_sum);
  free(query_offset);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

extern "C" void kde_cuda_log_density(kde_cuda_model *model,
                                     const kde_query_set *query,
                                     kde_interrupt_probe interrupted,
                                     double *out, kde_status *status)
{
  kde_cuda_log_density_stats(model, query, interrupted, out, NULL, status);
}

/* The evaluation of a checked query set (kde_cuda_log_density_stats). */
static void log_density_run(kde_cuda_model *model, const kde_query_set *query,
                            kde_interrupt_probe interrupted, double *out,
                            kde_cuda_eval_stats *stats, kde_status *status)
{
  /* Pruning pays where the kernels' work outweighs the ordering and the
   * planning. Made on the device (order.cu, plan.cu: milliseconds at 1e6 x
   * 1e6), it pays for every kernel; made on the host (KDEGPU_DEVICE_PLAN=0:
   * about 0.2 s at 1e6 x 1e6 on an H100 host of 16 cores, and quadratic in
   * the blocks), only for compact kernels (1.8-2x) and double precision
   * (2.1-3.2x at d = 3), so the single-precision Gaussian and exponential
   * then sweep every unit (src/cuda/DESIGN.md); their results are the full
   * sum, within any tolerance. */
  const int device_plan = device_plan_enabled() && model->dim <= kPlanMaxDim;
  const int prunes = model->unit_lo != NULL &&
                     (kde_kernel_is_compact(model->kernel) ||
                      (query->tolerance > 0 &&
                       (model->precision == KDE_PRECISION_DOUBLE || device_plan))) &&
                     plan_worth_making(model, query);
  static_assert(kBlockQueries <= kHostOrderMaxQueries, "one block is ordered on the host");
  const int one_block = query->n_query <= kBlockQueries && !query->leave_one_out;
  if (!prunes || (one_block && !one_block_plan_can_pay(model, query))) {
    in_caller_order as_given = {NULL, NULL, query->host_threads, {}};
    if (model->precision == KDE_PRECISION_SINGLE)
      log_density_impl<float>(model, query, NULL, &as_given, interrupted, out, stats, status);
    else
      log_density_impl<double>(model, query, NULL, &as_given, interrupted, out, stats, status);
    return;
  }

  /* Pruning: the queries whitened and put in a spatial order (order.cu),
   * the results put back in the caller's order by log_density_impl
   * (in_caller_order). */
  const int64_t m = query->n_query;
  double *sorted_out = NULL;
  prune_context pc;
  ordered_queries oq;
  kde_query_set sorted_query = *query;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_ordered = t0;
  memset(&pc, 0, sizeof pc);
  if (order_evaluation_queries(model, query, device_plan, &oq, status) != 0) goto cleanup;
  t_ordered = std::chrono::steady_clock::now();
  if (oq.order != NULL) {
    KDE_HOST_ALLOC(sorted_out, m, "the ordered results");
    kde_first_touch(sorted_out, (size_t) m * sizeof(double), query->host_threads);
  }
  sorted_query.query = oq.z;
  sorted_query.query_lo = oq.z_lo;
  sorted_query.codes = oq.codes;
  sorted_query.center = sorted_query.transform = NULL;
  pc.plan = host_prune_plan(model, query->tolerance, query->leave_one_out);
  /* a plan made on the host bounds blocks by their corners, as the CPU's */
  pc.plan.centroid = pc.plan.spread2 = NULL;
  pc.queries = oq.z; /* read by the host plan only: on the host when it runs */
  pc.n_query = m;
  pc.threads = threads_per_device(query->host_threads, model->n_devices);
  pc.device = device_plan;
  pc.reserved = oq.reserved;
  pc.reserved_on = oq.reserved_on;
  {
    const auto t_start_impl = std::chrono::steady_clock::now();
    const double order_ms = kde_ms_between(t0, t_start_impl);
    /* the rows come back in their order and go to out batch by batch */
    in_caller_order put = {oq.order, out, pc.threads, {}};
    double *result = oq.order != NULL ? sorted_out : out;
    const int pays = one_block || plan_can_pay(model, &pc.plan, oq.z, oq.on_device != NULL, m);
    const prune_context *prune = pays ? &pc : NULL;
    if (model->precision == KDE_PRECISION_SINGLE)
      log_density_impl<float>(model, &sorted_query, prune, &put, interrupted, result, stats,
                              status);
    else
      log_density_impl<double>(model, &sorted_query, prune, &put, interrupted, result, stats,
                               status);
    if (kde_trace_file() != NULL) {
      fprintf(kde_trace_file(), "pruned n_query=%lld order_ms=%.2f (of which buffer_ms=%.2f)\n",
              (long long) m, order_ms, kde_ms_between(t_ordered, t_start_impl));
      fflush(kde_trace_file());
    }
    if (stats != NULL) {
      stats->order_ms = order_ms;
      stats->device_plan = device_plan;
    }
  }
cleanup:
  ordered_queries_free(model, &oq);
  free(sorted_out);
}

extern "C" void kde_cuda_log_density_stats(kde_cuda_model *model,
                                           const kde_query_set *query,
                                           kde_interrupt_probe interrupted,
                                           double *out, kde_cuda_eval_stats *stats,
                                           kde_status *status)
{
  kde_status_clear(status);
  if (stats != NULL) memset(stats, 0, sizeof *stats);
  if (model == NULL || query == NULL || out == NULL ||
      (query->n_query > 0 && query->query == NULL) || query->n_query < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "kde_cuda_log_density needs a model, a query set and an"
                   " output buffer");
    return;
  }
  if (model->n_discrete > 0 && query->n_query > 0 && query->codes == NULL) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "internal: a mixed-data model needs the queries' codes");
    return;
  }
  if ((query->center == NULL) != (query->transform == NULL)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the queries' whitening needs both a center and a"
                   " transform, or neither");
    return;
  }
  if (query->leave_one_out && query->n_query != model->n_train) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "leave-one-out needs the training points as queries:"
                   " n_query = %lld but n_train = %lld",
                   (long long) query->n_query, (long long) model->n_train);
    return;
  }
  if (query->n_query == 0) return;
  if (!(query->tolerance >= 0 && query->tolerance < 1)) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "the tolerance must be in [0, 1)");
    return;
  }
  /* The training points as queries (the whitened points in the memory the
   * model was made from): with what their whitening lost, as the model
   * stores them (model.cuh's residual). */
  kde_query_set with_lo;
  double *training_lo = NULL;
  if (model->residual != NULL && query->transform == NULL && query->query_lo == NULL &&
      query->query == model->made_from && query->n_query == model->n_train) {
    const int64_t count = model->n_train * model->dim;
    KDE_HOST_ALLOC(training_lo, count, "the training points' residuals");
    for (int64_t i = 0; i < count; i++) training_lo[i] = (double) model->residual[i];
    with_lo = *query;
    with_lo.query_lo = training_lo;
    query = &with_lo;
  }
  if (query->leave_one_out && model->spread.n_positions > 0) {
    /* the training points as the spread layout holds them (spread.cu):
     * each query at its point's position, so that the kernels leave out
     * the pair whose positions match */
    spread_queries_t laid_out;
    if (spread_queries(model, query, &laid_out, status) == 0) {
      log_density_run(model, &laid_out.set, interrupted, laid_out.out, stats, status);
      if (status->code == KDE_OK)
        for (int64_t i = 0; i < query->n_query; i++)
          out[i] = laid_out.out[model->spread.position_of[i]];
    }
    spread_queries_free(&laid_out);
  } else {
    log_density_run(model, query, interrupted, out, stats, status);
  }
cleanup:
  free(training_lo);
}
