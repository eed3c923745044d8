/*
 * conditional_cdf.cu: the conditional CDF F(y | x) of a Gaussian estimate
 * (conditional_cdf.h) on one or several GPUs, the CPU's arithmetic per
 * pair (kde_log_normal_cdf, the log-sum-exp states of kernels.h) in double.
 *
 * One thread per query and training split (a block: 128 queries against
 * one split of the points, streamed through shared memory in tiles), then
 * a merge of the splits' log-sum-exp states in split order. The splits
 * depend on n alone (a few queries still fill the GPU), so a query's result
 * is the same bits in any batch and on any device. Each device
 * in the list takes a contiguous share of the queries and runs it in
 * batches sized by its memory budget and by time (the interrupt poll comes
 * between rounds). The sums belong to a (fit, conditioning columns) pair,
 * not to the fit's device model: each call uploads its transformed points.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conditional_cdf.h"
#include "kde_cuda_common.h"

namespace {

constexpr int kThreads = 128;          /* queries per block */
constexpr int kTileDoubles = 6144;     /* 48 KB of shared memory per tile */
constexpr double kPairsPerBatch = 2.0e10;
constexpr int64_t kMinBatchRows = 1 << 14;
constexpr int64_t kSplitPoints = 16384; /* training points per split, at least */
constexpr int64_t kMaxSplits = 1024;
constexpr int kStates = 6;              /* three (max, sum) states per query and split */

struct ccdf_args {
  const double *train;  /* n x dim, then u, log w, lambda (n each): column-major */
  int64_t n;
  int dim, scaled, tile;
  const double *z;      /* rows x dim */
  const double *v;      /* rows */
  int64_t rows;
  int64_t split_points; /* training points per split (blockIdx.y) */
  int splits;
  double *partial;      /* rows x splits x kStates */
  double *cdf, *density; /* rows each */
};

__global__ void conditional_cdf_kernel(ccdf_args a)
{
  extern __shared__ double tile[]; /* a.tile x (dim + 3), column-major */
  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  const bool active = row < a.rows;
  const int width = a.dim + 3;
  const double v = active ? a.v[row] : 0;
  const int64_t from = (int64_t) blockIdx.y * a.split_points;
  const int64_t to = from + a.split_points < a.n ? from + a.split_points : a.n;
  kde_lse margin = kde_lse_empty(), below = kde_lse_empty(), at = kde_lse_empty();
  for (int64_t start = from; start < to; start += a.tile) {
    const int count = (int) (to - start < a.tile ? to - start : a.tile);
    __syncthreads();
    for (int k = threadIdx.x; k < count * width; k += kThreads) {
      const int column = k / count, j = k % count;
      tile[column * a.tile + j] = a.train[(int64_t) column * a.n + start + j];
    }
    __syncthreads();
    if (!active) continue;
    for (int j = 0; j < count; j++) {
      const double lambda = a.scaled ? tile[(a.dim + 2) * a.tile + j] : 1.0;
      double d2 = 0;
      for (int c = 0; c < a.dim; c++) {
        const double diff = a.z[(int64_t) c * a.rows + row] - tile[c * a.tile + j];
        d2 += diff * diff;
      }
      const double log_a = tile[(a.dim + 1) * a.tile + j] - 0.5 * d2 / (lambda * lambda);
      const double t = (v - tile[a.dim * a.tile + j]) / lambda;
      margin = kde_lse_add(margin, log_a);
      below = kde_lse_add(below, log_a + kde_log_normal_cdf(t));
      at = kde_lse_add(at, log_a - 0.5 * t * t - log(lambda));
    }
  }
  if (!active) return;
  double *out = a.partial + (int64_t) blockIdx.y * kStates * a.rows + row;
  const kde_lse states[3] = {margin, below, at};
  for (int k = 0; k < 3; k++) {
    out[(2 * k) * a.rows] = states[k].max;
    out[(2 * k + 1) * a.rows] = states[k].sum;
  }
}

/* Each query's splits merged in split order, and its F and density. */
__global__ void conditional_cdf_merge_kernel(ccdf_args a)
{
  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  if (row >= a.rows) return;
  kde_lse states[3] = {kde_lse_empty(), kde_lse_empty(), kde_lse_empty()};
  for (int s = 0; s < a.splits; s++) {
    const double *in = a.partial + (int64_t) s * kStates * a.rows + row;
    for (int k = 0; k < 3; k++)
      states[k] = kde_lse_merge(states[k], kde_lse_make(in[(2 * k) * a.rows],
                                                        in[(2 * k + 1) * a.rows]));
  }
  const double log_margin = kde_lse_log(states[0]);
  if (!(log_margin > -INFINITY)) {
    a.cdf[row] = NAN;
    a.density[row] = NAN;
    return;
  }
  const double f = exp(kde_lse_log(states[1]) - log_margin);
  a.cdf[row] = f > 1 ? 1 : f;
  a.density[row] = exp(kde_lse_log(states[2]) - log_margin - 0.91893853320467274178);
}

struct ccdf_device {
  int device;
  cudaStream_t stream;
  int64_t first, n, done, batch, rows;
  double *train, *z, *v, *cdf, *density, *partial;
};

void ccdf_device_free(ccdf_device *cd)
{
  if (cd->stream == NULL || cudaSetDevice(cd->device) != cudaSuccess) return;
  (void) cudaStreamSynchronize(cd->stream);
  double *buffers[] = {cd->train, cd->z, cd->v, cd->cdf, cd->density, cd->partial};
  for (double *b : buffers)
    if (b != NULL) (void) cudaFree(b);
  (void) cudaStreamDestroy(cd->stream);
  (void) cudaGetLastError();
}

} // namespace

extern "C" void kde_cuda_conditional_cdf(const kde_conditional_cdf_problem *p,
                                         const double *z, const double *v, int64_t m,
                                         const int *devices, int n_devices,
                                         double memory_budget,
                                         kde_interrupt_probe interrupted, double *out,
                                         double *density, kde_status *status)
{
  const int64_t n = p->n_train, d = p->dim, width = d + 3;
  ccdf_device *devs = NULL;
  double *packed = NULL, *scratch_density = NULL;
  int prev = -1;
  int64_t done = 0;
  ccdf_args args;

  kde_status_clear(status);
  if (n < 1 || d < 1 || m < 0 || devices == NULL || n_devices < 1 || width > kTileDoubles) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CUDA conditional CDF");
    return;
  }
  if (m == 0) return;
  /* the training columns in one block: z, u, log w, lambda (1 when none) */
  KDE_HOST_ALLOC(packed, n * width, "the conditional CDF's points");
  memcpy(packed, p->train, (size_t) (n * d) * sizeof(double));
  memcpy(packed + n * d, p->response, (size_t) n * sizeof(double));
  memcpy(packed + n * (d + 1), p->log_weight, (size_t) n * sizeof(double));
  for (int64_t j = 0; j < n; j++) packed[n * (d + 2) + j] = p->scale != NULL ? p->scale[j] : 1;
  if (density == NULL) KDE_HOST_ALLOC(scratch_density, m, "the conditional densities");

  args.n = n;
  args.dim = (int) d;
  args.scaled = p->scale != NULL;
  args.tile = (int) (kTileDoubles / width < 128 ? kTileDoubles / width : 128);
  {
    int64_t splits = (n + kSplitPoints - 1) / kSplitPoints;
    if (splits > kMaxSplits) splits = kMaxSplits;
    args.split_points = (n + splits - 1) / splits;
    args.splits = (int) ((n + args.split_points - 1) / args.split_points);
  }
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_HOST_ALLOC(devs, n_devices, "the devices' shares");
  for (int k = 0; k < n_devices; k++) {
    ccdf_device *cd = &devs[k];
    size_t free_b = 0, total_b = 0;
    cd->device = devices[k];
    cd->first = m * k / n_devices;
    cd->n = m * (k + 1) / n_devices - cd->first;
    if (cd->n == 0) continue;
    KDE_CUDA_TRY(cudaSetDevice(cd->device));
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const double budget = budget_bytes(memory_budget, free_b);
    const double fixed = (double) (n * width) * sizeof(double);
    const double per_row = (double) (d + 3 + kStates * args.splits) * sizeof(double);
    int64_t by_time = (int64_t) (kPairsPerBatch / (double) n);
    if (by_time < kMinBatchRows) by_time = kMinBatchRows;
    cd->batch = (int64_t) ((budget - fixed) / per_row);
    if (cd->batch > by_time) cd->batch = by_time;
    if (cd->batch > cd->n) cd->batch = cd->n;
    if (cd->batch < 1) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) cannot hold the training set"
                     " (%.0f bytes) for the conditional CDF; raise"
                     " options(kdegpu.gpu_memory = ...)", budget, fixed);
      goto cleanup;
    }
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->train, (size_t) (n * width) * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->z, (size_t) (cd->batch * d) * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->v, (size_t) cd->batch * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->cdf, (size_t) cd->batch * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->density, (size_t) cd->batch * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &cd->partial,
                            (size_t) (cd->batch * kStates * args.splits) * sizeof(double)));
    KDE_CUDA_TRY(cudaMemcpyAsync(cd->train, packed, (size_t) (n * width) * sizeof(double),
                                 cudaMemcpyHostToDevice, cd->stream));
  }

  /* Rounds: every device with queries left queues a batch, then each
   * batch comes back in turn. */
  while (done < m) {
    for (int k = 0; k < n_devices; k++) {
      ccdf_device *cd = &devs[k];
      cd->rows = cd->n - cd->done < cd->batch ? cd->n - cd->done : cd->batch;
      if (cd->rows == 0) continue;
      const int64_t first = cd->first + cd->done;
      KDE_CUDA_TRY(cudaSetDevice(cd->device));
      KDE_CUDA_TRY(cudaMemcpy2DAsync(cd->z, (size_t) cd->rows * sizeof(double), z + first,
                                     (size_t) m * sizeof(double),
                                     (size_t) cd->rows * sizeof(double), (size_t) d,
                                     cudaMemcpyHostToDevice, cd->stream));
      KDE_CUDA_TRY(cudaMemcpyAsync(cd->v, v + first, (size_t) cd->rows * sizeof(double),
                                   cudaMemcpyHostToDevice, cd->stream));
      args.train = cd->train;
      args.z = cd->z;
      args.v = cd->v;
      args.rows = cd->rows;
      args.cdf = cd->cdf;
      args.density = cd->density;
      args.partial = cd->partial;
      const unsigned blocks = (unsigned) ((cd->rows + kThreads - 1) / kThreads);
      const size_t shared = (size_t) args.tile * (size_t) width * sizeof(double);
      conditional_cdf_kernel<<<dim3(blocks, (unsigned) args.splits), kThreads, shared,
                               cd->stream>>>(args);
      KDE_CUDA_LAUNCHED("conditional CDF kernel");
      conditional_cdf_merge_kernel<<<blocks, kThreads, 0, cd->stream>>>(args);
      KDE_CUDA_LAUNCHED("conditional CDF merge kernel");
    }
    for (int k = 0; k < n_devices; k++) {
      ccdf_device *cd = &devs[k];
      if (cd->rows == 0) continue;
      const int64_t first = cd->first + cd->done;
      double *density_out = density != NULL ? density : scratch_density;
      KDE_CUDA_TRY(cudaSetDevice(cd->device));
      KDE_CUDA_TRY(cudaMemcpyAsync(out + first, cd->cdf, (size_t) cd->rows * sizeof(double),
                                   cudaMemcpyDeviceToHost, cd->stream));
      KDE_CUDA_TRY(cudaMemcpyAsync(density_out + first, cd->density,
                                   (size_t) cd->rows * sizeof(double), cudaMemcpyDeviceToHost,
                                   cd->stream));
      KDE_CUDA_TRY(cudaStreamSynchronize(cd->stream));
      cd->done += cd->rows;
      done += cd->rows;
    }
    if (interrupted != NULL && done < m && interrupted((double) done / (double) m)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  for (int k = 0; devs != NULL && k < n_devices; k++) ccdf_device_free(&devs[k]);
  free(devs);
  free(packed);
  free(scratch_density);
  (void) cudaGetLastError();
  if (prev >= 0) (void) cudaSetDevice(prev);
}
