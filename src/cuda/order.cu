/*
 * order.cu: the queries of a pruned evaluation put in a spatial order on
 * the device, so that each block of kBlockQueries consecutive queries is
 * compact and its plan (plan.cu) skips much.
 *
 * The host did this with a k-d order (kde_kd_sort, about 0.1 s for 1e6
 * queries on 16 cores); here the place along a Hilbert curve
 * (hilbert.cuh) of the whitened coordinates, quantised in the queries'
 * bounding box, sorted with CUB's radix sort: a few milliseconds for 1e7
 * queries. A block of the curve is connected but less compact than a k-d
 * cell, which costs some pruning, never correctness: every block's plan
 * is made from its own box.
 */
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>

#include "kde_cuda_common.h"
#include "hilbert.cuh"
#include "layout.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "spatial.h"
#include "staged_copy.cuh"
#include "tuning.cuh"
#include "tuning_hooks.h"
#include "whiten.h"

namespace kdegpu {

constexpr int kOrderThreads = 256;

/* z = (raw - center) transform in double, rounded as the CPU's kde_whiten
 * rounds a diagonal transform, and (lo not NULL) what its rounding lost
 * (whitening_residual: as the host's kde_whiten_residual), in the columns
 * of lo. */
__global__ void kde_order_whiten_kernel(const double *raw, int64_t m, int dim,
                                        const double *center, const double *transform,
                                        double *z, double *lo)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  for (int c = 0; c < dim; c++) {
    double acc = 0.0;
    for (int k = 0; k < dim; k++)
      acc = fma(raw[k * m + i] - center[k], transform[(int64_t) c * dim + k], acc);
    z[c * m + i] = acc;
    if (lo != NULL) {
      double hi, hi_lo;
      whiten_exact(raw, m, i, dim, center, transform, c, hi, hi_lo);
      lo[c * m + i] = whitening_residual(hi, hi_lo, acc);
    }
  }
}

/* Each query's place along the Hilbert curve over the box [box[k],
 * box[dim + k]] (hilbert.cuh). */
__global__ void kde_order_key_kernel(const double *z, int64_t m, int dim, int bits,
                                     const double *box, uint64_t *key, int64_t *index)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const double top = (double) ((UINT64_C(1) << bits) - 1);
  uint64_t cell[kPlanMaxDim];
  for (int k = 0; k < dim; k++) {
    const double lo = box[k], width = box[dim + k] - box[k];
    double x = width > 0 ? (z[k * m + i] - lo) / width * top : 0.0;
    x = x < 0 ? 0 : x > top ? top : x;
    cell[k] = (uint64_t) x;
  }
  key[i] = hilbert_index(cell, dim, bits);
  index[i] = i;
}

/* sorted row i = z row index[i], over `cols` columns */
__global__ void kde_order_gather_kernel(const double *z, int64_t m, int cols,
                                        const int64_t *index, double *sorted)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int64_t from = index[i];
  for (int k = 0; k < cols; k++) sorted[k * m + i] = z[k * m + from];
}

int order_queries(const kde_cuda_model *model, const kde_query_set *query,
                  kde_replica *rep, double bytes_allowed, double **sorted,
                  int64_t *order, kde_status *status)
{
  const int64_t m = query->n_query;
  const int dim = (int) model->dim;
  const int whiten = query->transform != NULL, sort = !query->leave_one_out;
  /* the lo parts, where the model reads them, in the columns after z's */
  const int lo = query_lo_rows(model) > 0 && (whiten || query->query_lo != NULL);
  const int cols = dim * (lo ? 2 : 1);
  const int bits = hilbert_key_bits(dim);
  const size_t coords = (size_t) m * dim * sizeof(double);
  const unsigned grid = (unsigned) ceil_div(m, kOrderThreads);
  double *raw = NULL, *z = NULL, *out = NULL, *box = NULL;
  uint64_t *keys = NULL;
  int64_t *index = NULL;
  void *temp = NULL;
  size_t sort_bytes = 0, reduce_bytes = 0, temp_bytes = 0;
  double need;
  int done = -1;

  /* KDEGPU_TRACE: the phases' times (the device synchronised after each;
   * the sort's also covers the host's first touch of order, alongside it) */
  const int trace = kde_trace_file() != NULL;
  std::chrono::steady_clock::time_point t_phase[5];
  t_phase[0] = std::chrono::steady_clock::now();

  *sorted = NULL;
  if (dim > kPlanMaxDim || m < 1) return 0;
  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  if (sort) { /* CUB's scratch, sized without pointers */
    KDE_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, (const uint64_t *) nullptr, (uint64_t *) nullptr,
        (const int64_t *) nullptr, (int64_t *) nullptr, m, 0, bits * dim, rep->stream));
    KDE_CUDA_TRY(cub::DeviceReduce::Min(nullptr, reduce_bytes, (const double *) nullptr,
                                        (double *) nullptr, m, rep->stream));
    temp_bytes = sort_bytes > reduce_bytes ? sort_bytes : reduce_bytes;
    KDE_CUDA_TRY(cub::DeviceReduce::Max(nullptr, reduce_bytes, (const double *) nullptr,
                                        (double *) nullptr, m, rep->stream));
    if (reduce_bytes > temp_bytes) temp_bytes = reduce_bytes;
  }
  /* raw, whitened, ordered coordinates (each with the lo parts but the raw
   * ones to be whitened); keys and indices twice (the sort's input and
   * output) */
  need = (double) coords * ((whiten ? 1 : cols / dim) + (whiten + sort) * (cols / dim)) +
         (sort ? 4.0 * (double) m * sizeof(int64_t) + (double) temp_bytes : 0.0);
  if (need > bytes_allowed) return 0;

  KDE_CUDA_TRY(cudaMalloc((void **) &raw, whiten ? coords : (size_t) m * cols * sizeof(double)));
  if (upload_staged(rep, raw, query->query, coords, query->host_threads, status) != 0 ||
      (lo && !whiten &&
       upload_staged(rep, raw + (size_t) m * dim, query->query_lo, coords, query->host_threads,
                     status) != 0))
    goto cleanup;
  z = raw;
  if (whiten) {
    KDE_CUDA_TRY(cudaMalloc((void **) &z, (size_t) m * cols * sizeof(double)));
    kde_order_whiten_kernel<<<grid, kOrderThreads, 0, rep->stream>>>(
        raw, m, dim, rep->whitening, rep->whitening + dim, z, lo ? z + (size_t) m * dim : NULL);
    KDE_CUDA_LAUNCHED("query whitening kernel");
  }
  if (!sort) { /* leave one out: the training set's order */
    /* done before the upload stream reads them */
    KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    *sorted = z;
    done = 1;
    goto cleanup;
  }

  if (trace) KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
  t_phase[1] = std::chrono::steady_clock::now(); /* uploaded and whitened */
  KDE_CUDA_TRY(cudaMalloc((void **) &box, 2 * dim * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &keys, 2 * (size_t) m * sizeof(uint64_t)));
  KDE_CUDA_TRY(cudaMalloc((void **) &index, 2 * (size_t) m * sizeof(int64_t)));
  KDE_CUDA_TRY(cudaMalloc(&temp, temp_bytes > 0 ? temp_bytes : 1));
  for (int k = 0; k < dim; k++) {
    size_t bytes = temp_bytes;
    KDE_CUDA_TRY(cub::DeviceReduce::Min(temp, bytes, z + (int64_t) k * m, box + k, m,
                                        rep->stream));
    bytes = temp_bytes;
    KDE_CUDA_TRY(cub::DeviceReduce::Max(temp, bytes, z + (int64_t) k * m, box + dim + k, m,
                                        rep->stream));
  }
  kde_order_key_kernel<<<grid, kOrderThreads, 0, rep->stream>>>(z, m, dim, bits, box, keys,
                                                                index);
  KDE_CUDA_LAUNCHED("Hilbert key kernel");
  {
    size_t bytes = temp_bytes;
    /* only the key's bits in use: fewer radix passes */
    KDE_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, bytes, keys, keys + m, index,
                                                 index + m, m, 0, bits * dim, rep->stream));
  }
  KDE_CUDA_TRY(cudaMalloc((void **) &out, (size_t) m * cols * sizeof(double)));
  kde_order_gather_kernel<<<grid, kOrderThreads, 0, rep->stream>>>(z, m, cols, index + m, out);
  KDE_CUDA_LAUNCHED("query gather kernel");
  /* the order goes to the host, which puts the results back with it (its
   * pages faulted in while the device sorts) */
  kde_first_touch(order, (size_t) m * sizeof(int64_t), query->host_threads);
  if (trace) KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
  t_phase[2] = std::chrono::steady_clock::now(); /* sorted and gathered */
  if (download_staged(rep, order, index + m, (size_t) m * sizeof(int64_t), query->host_threads,
                      status) != 0)
    goto cleanup;
  t_phase[3] = std::chrono::steady_clock::now();
  *sorted = out;
  done = 1;

cleanup:
  /* on a failure, work may still be queued on what is freed below */
  if (done != 1) (void) cudaStreamSynchronize(rep->stream);
  if (raw != NULL && raw != *sorted) (void) cudaFree(raw);
  if (z != NULL && z != raw && z != *sorted) (void) cudaFree(z);
  if (out != NULL && out != *sorted) (void) cudaFree(out);
  if (box != NULL) (void) cudaFree(box);
  if (keys != NULL) (void) cudaFree(keys);
  if (index != NULL) (void) cudaFree(index);
  if (temp != NULL) (void) cudaFree(temp);
  if (trace && done == 1 && sort) {
    t_phase[4] = std::chrono::steady_clock::now();
    fprintf(kde_trace_file(),
            "order n_query=%lld upload_ms=%.2f sort_ms=%.2f download_ms=%.2f free_ms=%.2f\n",
            (long long) m, kde_ms_between(t_phase[0], t_phase[1]),
            kde_ms_between(t_phase[1], t_phase[2]), kde_ms_between(t_phase[2], t_phase[3]),
            kde_ms_between(t_phase[3], t_phase[4]));
    fflush(kde_trace_file());
  }
  return done;
}

void ordered_queries_free(const kde_cuda_model *model, ordered_queries *oq)
{
  if (oq->on_device != NULL && cudaSetDevice(model->rep[0].device) == cudaSuccess)
    (void) cudaFree(oq->on_device);
  free(oq->host_sorted);
  free(oq->host_whitened);
  free(oq->host_codes);
  free(oq->order);
  memset(oq, 0, sizeof *oq);
}

int order_evaluation_queries(kde_cuda_model *model, const kde_query_set *query,
                             int on_device, ordered_queries *oq, kde_status *status)
{
  const int64_t m = query->n_query, d = model->dim;
  /* the lo parts, where the model reads them (order_queries' rule) */
  const int lo = query_lo_rows(model) > 0 &&
                 (query->transform != NULL || query->query_lo != NULL);
  const int64_t cols = d * (lo ? 2 : 1);
  int ordered = 0, prev = -1, ok = 0;
  memset(oq, 0, sizeof *oq);
  oq->z = query->query;
  oq->z_lo = lo ? query->query_lo : NULL;
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  if (!query->leave_one_out) KDE_HOST_ALLOC(oq->order, m, "the queries' order");
  /* a few queries: the host whitens and orders them in microseconds */
  if (on_device && m > kHostOrderMaxQueries) {
    kde_replica *rep = &model->rep[0];
    /* half of what the model leaves of the budget: the ordering's buffers,
     * then the ordered queries for the evaluation */
    const double model_bytes = model->resident ? (double) model->n_points * point_bytes(model)
                                               : 0.5 * rep->budget;
    if (sync_whitening(model, query, rep, status) != 0) goto cleanup;
    ordered = order_queries(model, query, rep, 0.5 * (rep->budget - model_bytes),
                            &oq->on_device, oq->order, status);
    if (ordered < 0) goto cleanup;
    if (ordered) { /* several devices copy their batches from the first */
      oq->z = oq->on_device;
      oq->z_lo = lo ? oq->on_device + m * d : NULL;
      oq->reserved = (double) (m * cols) * sizeof(double);
      oq->reserved_on = rep;
    }
  }
  if (!ordered) { /* on the host: a k-d order */
    const double *z = query->query, *z_lo = oq->z_lo;
    if (query->transform != NULL) {
      KDE_HOST_ALLOC(oq->host_whitened, m * cols, "the whitened queries");
      kde_whiten(query->query, m, d, query->center, query->transform, query->host_threads,
                 oq->host_whitened);
      z = oq->host_whitened;
      if (lo) {
        z_lo = oq->host_whitened + m * d;
        kde_whiten_residual(query->query, m, d, query->center, query->transform,
                            query->host_threads, z, oq->host_whitened + m * d);
      }
    }
    if (!query->leave_one_out) {
      /* sorted in place where the whitened copy is ours (at 1e9 queries a
       * copy of 24 GB less), else in a copy with room for the lo parts */
      double *sorted = oq->host_whitened;
      if (sorted == NULL) {
        KDE_HOST_ALLOC(oq->host_sorted, m * cols, "the ordered queries");
        kde_copy_bytes(oq->host_sorted, z, (size_t) (m * d) * sizeof(double),
                       query->host_threads);
        sorted = oq->host_sorted;
      }
      /* blocks, and within them the plan's groups of queries, compact */
      kde_kd_sort(sorted, m, d, kBlockQueries, kGroupRows, query->host_threads, oq->order);
      z = sorted;
      if (lo) { /* the lo parts in the same order, after the copy's rows
                   or in a buffer of their own */
        if (oq->host_sorted == NULL)
          KDE_HOST_ALLOC(oq->host_sorted, m * d, "the ordered queries' lo parts");
        double *sorted_lo = oq->host_sorted + (sorted == oq->host_sorted ? m * d : 0);
        for (int64_t k = 0; k < d; k++)
          kde_gather_rows(z_lo + k * m, oq->order, m, query->host_threads, sorted_lo + k * m);
        z_lo = sorted_lo;
      }
    }
    oq->z = z;
    oq->z_lo = z_lo;
  }
  oq->codes = query->codes;
  if (model->n_discrete > 0 && oq->order != NULL) { /* mixed data: the codes follow */
    const int64_t c = model->n_discrete;
    KDE_HOST_ALLOC(oq->host_codes, m * c, "the ordered codes");
    for (int64_t k = 0; k < c; k++)
      kde_gather_rows(query->codes + k * m, oq->order, m, query->host_threads,
                      oq->host_codes + k * m);
    oq->codes = oq->host_codes;
  }
  ok = 1;
cleanup:
  if (prev >= 0) (void) cudaSetDevice(prev);
  if (!ok) ordered_queries_free(model, oq);
  return ok ? 0 : -1;
}

} // namespace kdegpu

using namespace kdegpu;

extern "C" int kde_cuda_device_plan(kde_cuda_model *model, const kde_query_set *query,
                                    int64_t *order, double *sorted, int64_t *offsets,
                                    int32_t **visit, double *ms, kde_status *status)
{
  ordered_queries oq;
  double *uploaded = NULL;
  const double *z = NULL;
  kde_replica *rep = NULL;
  kde_prune_plan plan;
  plan_counts counts;
  int64_t m = 0, d = 0, blocks = 0;
  int prev = -1, ok = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

  kde_status_clear(status);
  memset(&oq, 0, sizeof oq);
  *visit = NULL;
  if (model == NULL || query == NULL || model->unit_lo == NULL || model->dim > kPlanMaxDim ||
      query->n_query < 1 || query->query == NULL ||
      (query->leave_one_out &&
       (query->n_query != model->n_train || model->spread.n_positions > 0))) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the device plan needs a model that prunes (a spatially ordered"
                   " training set, d <= 4) and queries (leaving one out: not of a"
                   " spread layout)");
    return -1;
  }
  m = query->n_query;
  d = model->dim;
  blocks = ceil_div(m, kBlockQueries);
  rep = &model->rep[0];
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  if (order_evaluation_queries(model, query, 1, &oq, status) != 0) goto cleanup;
  ms[0] = kde_ms_between(t0, std::chrono::steady_clock::now());
  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  z = oq.on_device;
  if (z == NULL) { /* ordered on the host (no room on the device) */
    KDE_CUDA_TRY(cudaMalloc((void **) &uploaded, (size_t) (m * d) * sizeof(double)));
    if (copy_to_replica(rep, uploaded, oq.z, (size_t) (m * d) * sizeof(double), status) != 0)
      goto cleanup;
    z = uploaded;
  }
  t0 = std::chrono::steady_clock::now();
  if (buffer_reserve(&rep->plan_box, (size_t) (blocks * 2 * d) * sizeof(double), status) != 0 ||
      plan_block_boxes(z, m, m, (int) d, (double *) rep->plan_box.ptr, rep->stream, status) != 0)
    goto cleanup;
  plan = device_prune_plan(model, rep, query->tolerance, query->leave_one_out);
  if (plan_count(model, &plan, (const double *) rep->plan_box.ptr, blocks, rep, &counts,
                 status) != 0 ||
      plan_fill(&plan, &counts, 1, 0, rep, status) != 0)
    goto cleanup;
  KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
  ms[1] = kde_ms_between(t0, std::chrono::steady_clock::now());

  *visit = (int32_t *) malloc((size_t) (counts.total > 0 ? counts.total : 1) * sizeof(int32_t));
  if (*visit == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for the plan");
    goto cleanup;
  }
  if (counts.total > 0)
    KDE_CUDA_TRY(cudaMemcpy(*visit, rep->visit.ptr, (size_t) counts.total * sizeof(int32_t),
                            cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(offsets, rep->visit_offset.ptr, (size_t) (blocks + 1) * sizeof(int64_t),
                          cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(sorted, z, (size_t) (m * d) * sizeof(double), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < m; i++) order[i] = oq.order != NULL ? oq.order[i] : i;
  ok = 1;

cleanup:
  if (rep != NULL && cudaSetDevice(rep->device) == cudaSuccess) {
    (void) cudaStreamSynchronize(rep->stream);
    if (uploaded != NULL) (void) cudaFree(uploaded);
    scratch_release(rep);
  }
  ordered_queries_free(model, &oq);
  if (!ok) {
    free(*visit);
    *visit = NULL;
  }
  if (prev >= 0) (void) cudaSetDevice(prev);
  return ok ? 0 : -1;
}
