/*
 * cdf.cu: the kernel estimate's CDF on one GPU (the contract: cdf.h), with
 * the CPU's arithmetic (kde_cdf_term, kde_cdf_without_sum), double
 * throughout.
 *
 * Thread (query i, split s) sums the terms of training points
 * [s * split_len, (s + 1) * split_len); a second kernel adds a query's
 * splits in split order, so the result does not depend on timing. Splits
 * keep the device busy when there are few queries (a quantile's bisection
 * asks for one at a time). The training set, its weights and factors go
 * up once; the queries in batches sized by time, with the interrupt poll
 * between batches.
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cdf.h"
#include "kde_cuda_common.h"

namespace {

constexpr int kThreads = 128;
/* Threads to keep in flight: a few waves of a large GPU. */
constexpr double kTargetThreads = 1 << 19;
/* Kernel terms per batch between interrupt polls: well under a second
 * (a Gaussian term costs about as much as a double erfc). */
constexpr double kTermsPerBatch = 2.0e10;
/* Training points per split at least, so that a thread's loop outweighs
 * its start. */
constexpr int64_t kMinSplitLength = 256;

__global__ void cdf_split_sums(const kde_cdf_problem p, const double *query,
                               int64_t rows, int64_t split_len, double scale,
                               double *partial)
{
  const int64_t i = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  if (i >= rows) return;
  const int64_t split = blockIdx.y;
  const double *x = query + i;
  const double fixed = kde_cdf_without_sum(&p, x, rows);
  double total = 0;
  if (fixed < 0) {
    const int64_t begin = split * split_len;
    const int64_t end = begin + split_len < p.n_train ? begin + split_len : p.n_train;
    for (int64_t j = begin; j < end; j++) total += kde_cdf_term(&p, x, rows, j, scale);
  } else if (split == 0) {
    total = fixed;
  }
  partial[split * rows + i] = total;
}

__global__ void cdf_add_splits(const double *partial, int64_t rows, int64_t splits,
                               double *out)
{
  const int64_t i = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  if (i >= rows) return;
  double total = 0;
  for (int64_t s = 0; s < splits; s++) total += partial[s * rows + i];
  out[i] = kde_cdf_clamp(total);
}

} // namespace

extern "C" void kde_cuda_cdf(const kde_cdf_problem *p, const double *query,
                             int64_t n_query, int device, double memory_budget,
                             kde_interrupt_probe interrupted, double *out,
                             kde_status *status)
{
  kde_cdf_problem dp = *p;
  double *d_train = NULL, *d_weight = NULL, *d_scale = NULL, *d_bandwidth = NULL;
  double *d_bounds = NULL, *d_images = NULL, *d_query = NULL, *d_partial = NULL;
  double *d_out = NULL;
  int64_t *d_count = NULL;
  int prev = -1;
  size_t free_b = 0, total_b = 0;
  int64_t n_images = 0, batch = 0, splits = 1, split_len = 0;
  double fixed_bytes, per_row, budget, terms_per_row;
  const int64_t n = p->n_train, d = p->dim;

  if (!kde_cdf_problem_valid(p, n_query, status) || n_query == 0) return;
  n_images = kde_cdf_image_total(p);

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_CUDA_TRY(cudaSetDevice(device));
  KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  budget = budget_bytes(memory_budget, free_b);

  /* Batch rows: by time (terms), then splits to fill the device, then the
   * memory a row needs (its coordinates, its splits' partial sums, out). */
  terms_per_row = (double) n * (double) n_images;
  batch = (int64_t) (kTermsPerBatch / terms_per_row);
  if (batch < 1) batch = 1;
  if (batch > n_query) batch = n_query;
  splits = (int64_t) (kTargetThreads / (double) batch);
  if (splits > n / kMinSplitLength) splits = n / kMinSplitLength;
  if (splits > 65535) splits = 65535; /* gridDim.y */
  if (splits < 1) splits = 1;
  split_len = (n + splits - 1) / splits;
  splits = (n + split_len - 1) / split_len;
  fixed_bytes = (double) (n * (d + 2) + 3 * d + 2 * n_images) * sizeof(double);
  per_row = (double) (d + splits + 1) * sizeof(double);
  if ((double) batch * per_row > budget - fixed_bytes)
    batch = (int64_t) ((budget - fixed_bytes) / per_row);
  if (batch < 1) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes) cannot hold the training"
                   " set (%.0f bytes) for the CDF; raise"
                   " options(kdegpu.gpu_memory = ...)", budget, fixed_bytes);
    goto cleanup;
  }

  KDE_CUDA_TRY(cudaMalloc((void **) &d_train, (size_t) (n * d) * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_weight, (size_t) n * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_bandwidth, (size_t) d * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_bounds, (size_t) (2 * d) * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_count, (size_t) d * sizeof(int64_t)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_images, (size_t) (2 * n_images) * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_query, (size_t) (batch * d) * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_partial, (size_t) (batch * splits) * sizeof(double)));
  KDE_CUDA_TRY(cudaMalloc((void **) &d_out, (size_t) batch * sizeof(double)));
  KDE_CUDA_TRY(cudaMemcpy(d_train, p->train, (size_t) (n * d) * sizeof(double),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_weight, p->weight, (size_t) n * sizeof(double),
                          cudaMemcpyHostToDevice));
  if (p->scale != NULL) {
    KDE_CUDA_TRY(cudaMalloc((void **) &d_scale, (size_t) n * sizeof(double)));
    KDE_CUDA_TRY(cudaMemcpy(d_scale, p->scale, (size_t) n * sizeof(double),
                            cudaMemcpyHostToDevice));
  }
  KDE_CUDA_TRY(cudaMemcpy(d_bandwidth, p->bandwidth, (size_t) d * sizeof(double),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_bounds, p->lower, (size_t) d * sizeof(double),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_bounds + d, p->upper, (size_t) d * sizeof(double),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_count, p->image_count, (size_t) d * sizeof(int64_t),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_images, p->image_sign, (size_t) n_images * sizeof(double),
                          cudaMemcpyHostToDevice));
  KDE_CUDA_TRY(cudaMemcpy(d_images + n_images, p->image_shift,
                          (size_t) n_images * sizeof(double), cudaMemcpyHostToDevice));
  dp.train = d_train;
  dp.weight = d_weight;
  dp.scale = d_scale;
  dp.bandwidth = d_bandwidth;
  dp.lower = d_bounds;
  dp.upper = d_bounds + d;
  dp.image_count = d_count;
  dp.image_sign = d_images;
  dp.image_shift = d_images + n_images;

  for (int64_t first = 0; first < n_query; first += batch) {
    const int64_t rows = n_query - first < batch ? n_query - first : batch;
    const dim3 grid((unsigned) ((rows + kThreads - 1) / kThreads), (unsigned) splits);
    KDE_CUDA_TRY(cudaMemcpy2D(d_query, (size_t) rows * sizeof(double), query + first,
                              (size_t) n_query * sizeof(double), (size_t) rows * sizeof(double),
                              (size_t) d, cudaMemcpyHostToDevice));
    cdf_split_sums<<<grid, kThreads>>>(dp, d_query, rows, split_len,
                                       kde_scale(p->kernel, 1), d_partial);
    KDE_CUDA_LAUNCHED("CDF kernel");
    cdf_add_splits<<<grid.x, kThreads>>>(d_partial, rows, splits, d_out);
    KDE_CUDA_LAUNCHED("CDF split sum");
    KDE_CUDA_TRY(cudaMemcpy(out + first, d_out, (size_t) rows * sizeof(double),
                            cudaMemcpyDeviceToHost));
    if (interrupted != NULL && first + rows < n_query &&
        interrupted((double) (first + rows) / (double) n_query)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  if (d_train != NULL) (void) cudaFree(d_train);
  if (d_weight != NULL) (void) cudaFree(d_weight);
  if (d_scale != NULL) (void) cudaFree(d_scale);
  if (d_bandwidth != NULL) (void) cudaFree(d_bandwidth);
  if (d_bounds != NULL) (void) cudaFree(d_bounds);
  if (d_count != NULL) (void) cudaFree(d_count);
  if (d_images != NULL) (void) cudaFree(d_images);
  if (d_query != NULL) (void) cudaFree(d_query);
  if (d_partial != NULL) (void) cudaFree(d_partial);
  if (d_out != NULL) (void) cudaFree(d_out);
  (void) cudaGetLastError();
  if (prev >= 0) (void) cudaSetDevice(prev);
}
