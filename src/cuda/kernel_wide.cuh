/*
 * kernel_wide.cuh: the FMA kernel for d >= 5 (kde_wide_kernel, every kernel,
 * both precisions): 4-query x 8-point register blocks over dimension-major
 * shared tiles, chunked over the dimensions when d exceeds shared memory.
 * A template only: kernel_wide.cu instantiates the fixed-bandwidth kernels
 * (select_wide_kernel), kernel_adaptive.cu the adaptive ones (A =
 * kFitAdaptive), kernel_plain.cu the Gaussian's difference form (A =
 * kFitPlain).
 */
#ifndef KDEGPU_CUDA_KERNEL_WIDE_CUH
#define KDEGPU_CUDA_KERNEL_WIDE_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "accumulate.cuh"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/*
 * d >= 5 (any d). Each thread computes a 4-query x 8-point block of s^2 (or
 * of q.x for the Gaussian) as a dot product over the dimensions, reading 4
 * query values and 8 point values from shared memory per dimension (three
 * 16-byte loads for 32 FMAs). Queries of the block stay in shared memory,
 * dimension-major [dim][128]; each step brings one 32-point storage tile
 * (or, when d is too large for shared memory, one chunk of dimensions of it,
 * with the queries' chunk reloaded alongside). A: the fit's variant
 * (kernel_facts.cuh); an adaptive fit's storage tiles hold a row of
 * per-point 1 / lambda^2 after aux, and its pairs take the difference form,
 * s^2 times that.
 */
template <int K, typename T, int A>
__global__ void __launch_bounds__(kThreads, real_traits<T>::min_blocks)
    kde_wide_kernel(const kde_args<T> a)
{
  constexpr int Q = kQueriesPerThread;
  constexpr int P = kWidePoints;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr bool EXPANDED = expanded_form(K, 5, A); /* d >= 5 here */
  constexpr int EXTRA = 1 + scale_rows(A); /* rows after the coordinates */
  extern __shared__ float4 smem_f4[];
  T *smem = reinterpret_cast<T *>(smem_f4);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;
  const int d = a.dim;
  const int dc = a.chunk_dims;
  const int n_chunks = a.n_chunks;
  T *sq = smem;                               /* [dc][kBlockQueries] */
  T *sx = smem + (size_t) dc * kBlockQueries; /* 2 x [(dc + EXTRA)][32] */
  const int sx_elems = (dc + EXTRA) * kTileWidth;

  int slot[Q];
  int64_t qg[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    slot[i] = lane * Q + i;
    qg[i] = a.query_base + q0 + slot[i];
  }

  T m[Q], ts[Q];
  compensated_sum<T> s[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    m[i] = LSE ? real_traits<T>::lowest() : (T) 0;
    ts[i] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kTileWidth;
  const int64_t n_steps = n_tiles * n_chunks;
  const T *src = a.train + p0 * (d + EXTRA);
  const size_t tile_stride = (size_t) (d + EXTRA) * kTileWidth;

  /* Rows of query chunk c: dims [c dc, c dc + len). */
  auto load_query_chunk = [&](int c) {
    const int len = min(dc, d - c * dc);
    const int per_row = kBlockQueries * (int) sizeof(T) / 16;
    for (int o = threadIdx.x; o < len * per_row; o += kThreads) {
      const int k = o / per_row, part = o % per_row;
      copy16_async(reinterpret_cast<char *>(sq + (size_t) k * kBlockQueries) +
                       16 * part,
                   reinterpret_cast<const char *>(
                       a.query + q0 + (int64_t) (c * dc + k) * a.ldq) +
                       16 * part);
    }
  };
  /* Rows of training step `step`: chunk rows, plus the aux row (and the
   * scale row) with the last chunk (contiguous in the storage tile). */
  auto load_train_step = [&](int64_t step, T *dst) {
    const int64_t tile = step / n_chunks;
    const int c = (int) (step % n_chunks);
    const int len = min(dc, d - c * dc);
    const int rows = len + (c == n_chunks - 1) * EXTRA;
    block_copy_async(dst, src + tile * tile_stride + (size_t) c * dc * kTileWidth,
                     (size_t) rows * kTileWidth * sizeof(T));
  };

  if (n_chunks == 1) load_query_chunk(0);
  if (n_steps > 0) load_train_step(0, sx);
  async_commit();

  T acc[Q][P];
  int c = 0;
  int64_t tile = 0;
  for (int64_t step = 0; step < n_steps; step++) {
    if (n_chunks > 1) {
      load_query_chunk(c); /* the last step's end barrier freed sq */
      async_commit();
    }
    if (step + 1 < n_steps)
      load_train_step(step + 1, sx + ((step + 1) & 1) * sx_elems);
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();

    const T *xs = sx + (step & 1) * sx_elems;
    const int len = min(dc, d - c * dc);
    if (c == 0) {
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) acc[i][p] = 0;
    }
#pragma unroll 4
    for (int k = 0; k < len; k++) {
      T qv[Q], xv[P];
      load_vec<T, Q>(sq + k * kBlockQueries + lane * Q, qv);
      load_vec<T, P>(xs + k * kTileWidth + warp * P, xv);
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) {
          if (EXPANDED) {
            acc[i][p] = fma(qv[i], xv[p], acc[i][p]);
          } else {
            const T diff = qv[i] - xv[p];
            acc[i][p] = fma(diff, diff, acc[i][p]);
          }
        }
    }

    if (c == n_chunks - 1) {
      T aux[P], inv[P];
      load_vec<T, P>(xs + len * kTileWidth + warp * P, aux);
      if (A == kFitAdaptive) {
        load_vec<T, P>(xs + (len + 1) * kTileWidth + warp * P, inv);
      } else {
#pragma unroll
        for (int p = 0; p < P; p++) inv[p] = (T) 1; /* unused */
      }
      const int64_t first = a.train_base + p0 + tile * kTileWidth + warp * P;
      const bool check = a.leave_one_out && qg[0] < first + P &&
                         first <= qg[Q - 1];
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) {
          const T s2 = A == kFitAdaptive ? acc[i][p] * inv[p] : acc[i][p];
          T v = EXPANDED ? acc[i][p] + aux[p] : pair_value<K, LSE>(s2, aux[p]);
          if (check && first + p == qg[i]) v = excluded_value<LSE, T>();
          acc[i][p] = v;
        }
      accumulate_group<LSE>(acc, m, s, ts);
      /* Two-level sum: 16 tiles into ts, then into s. */
      if ((tile & 15) == 15) flush_tile_sums(s, ts);
      tile++;
      c = 0;
    } else {
      c++;
    }
    __syncthreads(); /* sq and this sx buffer are overwritten next */
  }
  flush_tile_sums(s, ts);
  write_partials<T, Q>(a, smem, m, s, slot);
}

/* kde_wide_kernel<K, T, A> for a runtime kernel. */
template <typename T, int A> kde_kernel_fn<T> wide_kernel_for(int kernel)
{
  return dispatch_kernel(kernel, [](auto k) -> kde_kernel_fn<T> {
    return kde_wide_kernel<decltype(k)::value, T, A>;
  });
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNEL_WIDE_CUH */
