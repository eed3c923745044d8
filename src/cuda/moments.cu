/*
 * moments.cu: Gaussian moment sums on one or several GPUs (the contract:
 * moments.h).
 *
 * One thread per query; the block's threads stream the training points
 * through shared memory in tiles, as the density kernels do. Per pair: the
 * offset u and |u|^2 in double, the exponent log w_j - |u|^2 / 2 in double,
 * its exponential relative to the query's running maximum M as 2^n * 2^f
 * with the integer part n exact (built in the exponent bits) and only
 * 2^f, f in [0, 1), in single precision (exp2f, 2 ulp): about 2e-7 relative
 * error per term, independent of how far the query lies, against a double
 * exp that would cost several times as much on any GPU (the double FMAs of
 * the moments themselves are cheap on an H100). The moment terms
 * w e^{..} u^a are formed and accumulated in double, each multi-index's term
 * its parent's times one coordinate.
 *
 * Small d (1..3, every degree): one instantiation per (d, p), accumulators
 * in registers. Other d: a generic kernel that keeps the sums in the
 * output array in global memory (coalesced over queries) and adds a tile's
 * worth at a time; correct for any d, slower.
 *
 * Each device listed takes a contiguous share of the queries (equal shares
 * of the pairs) and runs it in batches sized by its memory budget and by
 * time (the interrupt poll comes between rounds of batches). These sums
 * have no fit, so no device model: each call uploads the training set.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kde_cuda_common.h"
#include "moments.h"

namespace {

constexpr int kThreads = 128;   /* queries per block */
constexpr int kTile = 128;      /* training points per shared-memory tile */
constexpr int kGenericTile = 32; /* the generic kernel's tile (terms in registers) */
constexpr int kMaxSmallDim = 3;
/* Pairs per batch between interrupt polls: about 0.1-0.5 s on an H100. */
constexpr double kPairsPerBatch = 2.0e11;
constexpr int64_t kMinBatchRows = 1 << 16;

struct moment_args {
  const double *train;      /* n x dim, column-major */
  const double *log_weight; /* n */
  const double *query;      /* rows x dim, column-major (ld = rows) */
  const int8_t *factors;    /* generic kernel: count x degree variables */
  int64_t n;
  int64_t rows;
  int64_t first;            /* global index of row 0 (for the pairs rule) */
  int dim, degree, count, pairs;
  double *log_scale;        /* rows */
  double *sums;             /* rows x count (ld = rows) */
};

/* exp(x) for x <= 0 (0 for x below -1022 ln 2 and for -inf). */
__device__ __forceinline__ double exp_term(double x)
{
  const double y = x * 1.4426950408889634; /* log2(e) */
  if (!(y > -1022.0)) return 0.0;
  const double n = floor(y);
  const float f = (float) (y - n);
  const double scale = __longlong_as_double((long long) ((int) n + 1023) << 52);
  return (double) exp2f(f) * scale;
}

/* Whether pair (self, j) is summed under the pairs rule. */
__device__ __forceinline__ bool pair_kept(int pairs, int64_t self, int64_t j)
{
  if (pairs == KDE_PAIRS_LEAVE_ONE_OUT) return j != self;
  if (pairs == KDE_PAIRS_ABOVE) return j > self;
  return true;
}

/* The first training point a block needs: under KDE_PAIRS_ABOVE, past
 * its first query, rounded down to a tile. */
__device__ __forceinline__ int64_t block_start(const moment_args &a, int tile)
{
  if (a.pairs != KDE_PAIRS_ABOVE) return 0;
  const int64_t first = a.first + (int64_t) blockIdx.x * kThreads + 1;
  return first - first % tile;
}

/* The multi-index table of (D, P), built at compile time in the order of
 * kde_moment_index: parent[m] = index of a - e_k, var[m] = k, k the first
 * coordinate of a that is positive. */
__host__ __device__ constexpr int moment_count(int d, int p)
{
  int c = 1;
  for (int i = 1; i <= d; i++) c = c * (p + i) / i;
  return c;
}

template <int D, int P> struct moment_table {
  int parent[moment_count(D, P)];
  int var[moment_count(D, P)];
};

template <int D>
__host__ __device__ constexpr int composition_rank(const int (&a)[D], int k)
{
  int rank = 0;
  for (int c = 0; c + 1 < D; c++) {
    for (int t = a[c] + 1; t <= k; t++) rank += moment_count(D - c - 2, k - t);
    k -= a[c];
  }
  return rank;
}

template <int D, int P>
__host__ __device__ constexpr moment_table<D, P> make_table()
{
  moment_table<D, P> tab{};
  int m = 0, previous_start = 0, layer_start = 0;
  for (int k = 0; k <= P; k++) {
    int a[D] = {};
    a[0] = k;
    for (;;) {
      if (k > 0) {
        int first = 0;
        while (a[first] == 0) first++;
        a[first]--;
        tab.parent[m] = previous_start + composition_rank<D>(a, k - 1);
        tab.var[m] = first;
        a[first]++;
      } else {
        tab.parent[m] = -1;
        tab.var[m] = -1;
      }
      m++;
      int j = D - 2;
      while (j >= 0 && a[j] == 0) j--;
      if (j < 0) break;
      const int rest = a[D - 1];
      for (int c = j + 1; c < D; c++) a[c] = 0;
      a[j]--;
      a[j + 1] = rest + 1;
    }
    previous_start = layer_start;
    layer_start = m;
  }
  return tab;
}

template <int D, int P>
__global__ void __launch_bounds__(kThreads) moments_small(const moment_args a)
{
  constexpr int C = moment_count(D, P);
  constexpr moment_table<D, P> tab = make_table<D, P>();
  __shared__ double s_x[D][kTile];
  __shared__ double s_lw[kTile];
  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  const bool active = row < a.rows;
  const int64_t self = a.first + row;
  double q[D];
  double acc[C];
  double scale = -INFINITY;
#pragma unroll
  for (int c = 0; c < D; c++) q[c] = active ? a.query[row + (int64_t) c * a.rows] : 0.0;
#pragma unroll
  for (int m = 0; m < C; m++) acc[m] = 0.0;

  for (int64_t t0 = block_start(a, kTile); t0 < a.n; t0 += kTile) {
    for (int k = threadIdx.x; k < kTile; k += kThreads) {
      const int64_t j = t0 + k;
      s_lw[k] = j < a.n ? a.log_weight[j] : -INFINITY;
#pragma unroll
      for (int c = 0; c < D; c++) s_x[c][k] = j < a.n ? a.train[j + (int64_t) c * a.n] : 0.0;
    }
    __syncthreads();
    if (active) {
      for (int k = 0; k < kTile; k++) {
        double u[D], s2 = 0.0;
#pragma unroll
        for (int c = 0; c < D; c++) {
          u[c] = s_x[c][k] - q[c];
          s2 = fma(u[c], u[c], s2);
        }
        double e = fma(-0.5, s2, s_lw[k]);
        if (!pair_kept(a.pairs, self, t0 + k)) e = -INFINITY;
        if (e > scale) { /* a new maximum: rare after the first tiles */
          const double f = exp_term(scale - e);
#pragma unroll
          for (int m = 0; m < C; m++) acc[m] *= f;
          scale = e;
        }
        double mono[C];
        mono[0] = exp_term(e - scale);
        acc[0] += mono[0];
#pragma unroll
        for (int m = 1; m < C; m++) {
          mono[m] = mono[tab.parent[m]] * u[tab.var[m]];
          acc[m] += mono[m];
        }
      }
    }
    __syncthreads();
  }
  if (!active) return;
  a.log_scale[row] = scale;
#pragma unroll
  for (int m = 0; m < C; m++) a.sums[row + (int64_t) m * a.rows] = acc[m];
}

/* Any d: the sums live in a.sums (zeroed by the caller) and each tile of
 * kGenericTile points adds its share; a monomial is the product of its
 * |a| <= degree coordinates, listed in a.factors (-1 pads). Shared memory:
 * dim x kGenericTile coordinates, then the log weights. */
__global__ void __launch_bounds__(kThreads) moments_generic(const moment_args a)
{
  extern __shared__ double shared[];
  double *s_x = shared;
  double *s_lw = shared + (int64_t) a.dim * kGenericTile;
  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  const bool active = row < a.rows;
  const int64_t self = a.first + row;
  double scale = -INFINITY;

  for (int64_t t0 = block_start(a, kGenericTile); t0 < a.n; t0 += kGenericTile) {
    for (int k = threadIdx.x; k < kGenericTile * (a.dim + 1); k += kThreads) {
      const int c = k / kGenericTile, i = k % kGenericTile;
      const int64_t j = t0 + i;
      if (c < a.dim) s_x[k] = j < a.n ? a.train[j + (int64_t) c * a.n] : 0.0;
      else s_lw[i] = j < a.n ? a.log_weight[j] : -INFINITY;
    }
    __syncthreads();
    if (active) {
      double e[kGenericTile], tile_max = -INFINITY;
#pragma unroll
      for (int k = 0; k < kGenericTile; k++) {
        double s2 = 0.0;
        for (int c = 0; c < a.dim; c++) {
          const double u = s_x[c * kGenericTile + k] - a.query[row + (int64_t) c * a.rows];
          s2 = fma(u, u, s2);
        }
        e[k] = pair_kept(a.pairs, self, t0 + k) ? fma(-0.5, s2, s_lw[k]) : -INFINITY;
        tile_max = fmax(tile_max, e[k]);
      }
      if (tile_max > scale) {
        const double f = exp_term(scale - tile_max);
        for (int m = 0; m < a.count; m++) a.sums[row + (int64_t) m * a.rows] *= f;
        scale = tile_max;
      }
      if (tile_max > -INFINITY) {
#pragma unroll
        for (int k = 0; k < kGenericTile; k++) e[k] = exp_term(e[k] - scale);
        for (int m = 0; m < a.count; m++) {
          const int8_t *vars = a.factors + (int64_t) m * a.degree;
          double s = 0.0;
#pragma unroll
          for (int k = 0; k < kGenericTile; k++) {
            double term = e[k];
            for (int f = 0; f < a.degree && vars[f] >= 0; f++)
              term *= s_x[vars[f] * kGenericTile + k] - a.query[row + (int64_t) vars[f] * a.rows];
            s += term;
          }
          a.sums[row + (int64_t) m * a.rows] += s;
        }
      }
    }
    __syncthreads();
  }
  if (active) a.log_scale[row] = scale;
}

typedef void (*moment_kernel)(const moment_args);

template <int D> moment_kernel select_degree(int p)
{
  switch (p) {
  case 0: return moments_small<D, 0>;
  case 1: return moments_small<D, 1>;
  case 2: return moments_small<D, 2>;
  case 3: return moments_small<D, 3>;
  case 4: return moments_small<D, 4>;
  case 5: return moments_small<D, 5>;
  default: return moments_small<D, 6>;
  }
}

/* The one dispatch point: NULL means the generic kernel. */
moment_kernel select_moment_kernel(int dim, int degree)
{
  switch (dim) {
  case 1: return select_degree<1>(degree);
  case 2: return select_degree<2>(degree);
  case 3: return select_degree<3>(degree);
  default: return NULL;
  }
}

/* One device's share of the queries, [first, first + n), and its buffers. */
struct moment_device {
  int device;
  cudaStream_t stream;
  int64_t first, n, done, batch, rows; /* rows: the batch in flight */
  double *train, *log_weight, *query, *scale, *sums;
  int8_t *factors;
};

void moment_device_free(moment_device *md)
{
  if (md->stream == NULL || cudaSetDevice(md->device) != cudaSuccess) return;
  (void) cudaStreamSynchronize(md->stream);
  if (md->train != NULL) (void) cudaFree(md->train);
  if (md->log_weight != NULL) (void) cudaFree(md->log_weight);
  if (md->query != NULL) (void) cudaFree(md->query);
  if (md->scale != NULL) (void) cudaFree(md->scale);
  if (md->sums != NULL) (void) cudaFree(md->sums);
  if (md->factors != NULL) (void) cudaFree(md->factors);
  (void) cudaStreamDestroy(md->stream);
  (void) cudaGetLastError();
}

/* Where device k of n_dev starts: equal shares of the pairs (under
 * KDE_PAIRS_ABOVE row i has n - 1 - i of them, so the shares of rows
 * shrink). */
int64_t share_start(int k, int n_dev, int64_t m, int pairs)
{
  if (k >= n_dev) return m;
  if (pairs != KDE_PAIRS_ABOVE) return m * k / n_dev;
  const int64_t at = (int64_t) ((double) m * (1.0 - sqrt(1.0 - (double) k / n_dev)));
  return at < m ? at : m;
}

} // namespace

extern "C" void kde_cuda_moments(const kde_moment_problem *pr, const int *devices,
                                 int n_devices, double memory_budget,
                                 kde_interrupt_probe interrupted,
                                 double *log_scale, double *sums,
                                 kde_status *status)
{
  const int64_t n = pr->n_train, m = pr->n_query, d = pr->dim;
  const int64_t count = kde_moment_count(d, pr->degree, INT32_MAX);
  const int64_t factor_bytes = count * (pr->degree > 0 ? pr->degree : 1);
  int *exponents = NULL;
  int8_t *factors = NULL;
  moment_device *devs = NULL;
  int prev = -1;
  size_t shared_bytes = 0;
  int64_t done = 0;
  moment_args args;
  moment_kernel kernel = NULL;

  kde_status_clear(status);
  if (n < 1 || d < 1 || m < 0 || count < 0 || pr->degree < 0 ||
      pr->degree > KDE_MOMENT_MAX_DEGREE || pr->pairs < KDE_PAIRS_ALL ||
      pr->pairs > KDE_PAIRS_ABOVE || (pr->pairs != KDE_PAIRS_ALL && m != n) ||
      devices == NULL || n_devices < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CUDA moment sums");
    return;
  }
  if (m == 0) return;
  kernel = d <= kMaxSmallDim ? select_moment_kernel((int) d, pr->degree) : NULL;
  /* the generic kernel's list of each monomial's coordinates */
  KDE_HOST_ALLOC(exponents, count * d, "the moment index");
  KDE_HOST_ALLOC(factors, factor_bytes, "the moment index");
  kde_moment_index(d, pr->degree, count, exponents, NULL, NULL);
  for (int64_t i = 0; i < count; i++) {
    int f = 0;
    for (int64_t c = 0; c < d; c++)
      for (int e = 0; e < exponents[i + c * count]; e++)
        factors[i * pr->degree + f++] = (int8_t) (c < 127 ? c : 127);
    for (; f < pr->degree; f++) factors[i * pr->degree + f] = -1;
  }
  if (kernel == NULL && d > 127) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the CUDA moment sums support at most 127 dimensions, not %lld",
                   (long long) d);
    goto cleanup;
  }
  shared_bytes = kernel == NULL ? (size_t) (d + 1) * kGenericTile * sizeof(double) : 0;

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_HOST_ALLOC(devs, n_devices, "the devices' shares");
  memset(devs, 0, (size_t) n_devices * sizeof *devs);
  /* Each device: the training set, and batches of its share of the queries
   * under its budget. A query's sums do not depend on its batch or device
   * (its thread sums every pair in the same order), so shares and batches
   * are free. */
  for (int k = 0; k < n_devices; k++) {
    moment_device *md = &devs[k];
    size_t free_b = 0, total_b = 0;
    md->device = devices[k];
    md->first = share_start(k, n_devices, m, pr->pairs);
    md->n = share_start(k + 1, n_devices, m, pr->pairs) - md->first;
    if (md->n == 0) continue;
    KDE_CUDA_TRY(cudaSetDevice(md->device));
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&md->stream, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (kernel == NULL && shared_bytes > 48 * 1024)
      KDE_CUDA_TRY(cudaFuncSetAttribute(moments_generic,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int) shared_bytes));
    const double budget = budget_bytes(memory_budget, free_b);
    const double fixed = (double) (n * (d + 1)) * sizeof(double) + (double) factor_bytes;
    const double per_row = (double) (d + 1 + count) * sizeof(double);
    int64_t by_time = (int64_t) (kPairsPerBatch / (double) n);
    md->batch = (int64_t) ((budget - fixed) / per_row);
    if (by_time < kMinBatchRows) by_time = kMinBatchRows;
    if (md->batch > by_time) md->batch = by_time;
    if (md->batch > md->n) md->batch = md->n;
    if (md->batch < kThreads && md->batch < md->n) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) cannot hold the training"
                     " set (%.0f bytes) for the moment sums; raise"
                     " options(kdegpu.gpu_memory = ...)", budget, fixed);
      goto cleanup;
    }
    KDE_CUDA_TRY(cudaMalloc((void **) &md->train, (size_t) (n * d) * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &md->log_weight, (size_t) n * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &md->query, (size_t) (md->batch * d) * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &md->scale, (size_t) md->batch * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &md->sums, (size_t) (md->batch * count) * sizeof(double)));
    KDE_CUDA_TRY(cudaMalloc((void **) &md->factors, (size_t) factor_bytes));
    KDE_CUDA_TRY(cudaMemcpyAsync(md->train, pr->train, (size_t) (n * d) * sizeof(double),
                                 cudaMemcpyHostToDevice, md->stream));
    KDE_CUDA_TRY(cudaMemcpyAsync(md->log_weight, pr->log_weight, (size_t) n * sizeof(double),
                                 cudaMemcpyHostToDevice, md->stream));
    KDE_CUDA_TRY(cudaMemcpyAsync(md->factors, factors, (size_t) factor_bytes,
                                 cudaMemcpyHostToDevice, md->stream));
  }

  args.log_weight = NULL;
  args.n = n;
  args.dim = (int) d;
  args.degree = pr->degree;
  args.count = (int) count;
  args.pairs = pr->pairs;
  /* Rounds: every device with queries left queues a batch, then each
   * batch comes back in turn (the others run meanwhile). */
  while (done < m) {
    for (int k = 0; k < n_devices; k++) {
      moment_device *md = &devs[k];
      md->rows = md->n - md->done < md->batch ? md->n - md->done : md->batch;
      if (md->rows == 0) continue;
      const int64_t first = md->first + md->done;
      KDE_CUDA_TRY(cudaSetDevice(md->device));
      args.train = md->train;
      args.log_weight = md->log_weight;
      args.factors = md->factors;
      args.query = md->query;
      args.rows = md->rows;
      args.first = first;
      args.log_scale = md->scale;
      args.sums = md->sums;
      KDE_CUDA_TRY(cudaMemcpy2DAsync(md->query, (size_t) md->rows * sizeof(double),
                                     pr->query + first, (size_t) m * sizeof(double),
                                     (size_t) md->rows * sizeof(double), (size_t) d,
                                     cudaMemcpyHostToDevice, md->stream));
      const unsigned blocks = (unsigned) ((md->rows + kThreads - 1) / kThreads);
      if (kernel != NULL) {
        kernel<<<blocks, kThreads, 0, md->stream>>>(args);
        KDE_CUDA_LAUNCHED("moment-sum kernel");
      } else {
        KDE_CUDA_TRY(cudaMemsetAsync(md->sums, 0, (size_t) (md->rows * count) * sizeof(double),
                                     md->stream));
        moments_generic<<<blocks, kThreads, shared_bytes, md->stream>>>(args);
        KDE_CUDA_LAUNCHED("generic moment-sum kernel");
      }
    }
    for (int k = 0; k < n_devices; k++) {
      moment_device *md = &devs[k];
      if (md->rows == 0) continue;
      const int64_t first = md->first + md->done;
      KDE_CUDA_TRY(cudaSetDevice(md->device));
      KDE_CUDA_TRY(cudaMemcpyAsync(log_scale + first, md->scale,
                                   (size_t) md->rows * sizeof(double), cudaMemcpyDeviceToHost,
                                   md->stream));
      KDE_CUDA_TRY(cudaMemcpy2DAsync(sums + first, (size_t) m * sizeof(double), md->sums,
                                     (size_t) md->rows * sizeof(double),
                                     (size_t) md->rows * sizeof(double), (size_t) count,
                                     cudaMemcpyDeviceToHost, md->stream));
      KDE_CUDA_TRY(cudaStreamSynchronize(md->stream));
      md->done += md->rows;
      done += md->rows;
    }
    if (interrupted != NULL && done < m && interrupted((double) done / (double) m)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  for (int k = 0; devs != NULL && k < n_devices; k++) moment_device_free(&devs[k]);
  free(devs);
  free(exponents);
  free(factors);
  (void) cudaGetLastError();
  if (prev >= 0) (void) cudaSetDevice(prev);
}
