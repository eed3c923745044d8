/*
 * kernel_tc_wide.cu: the wide tensor-core kernel (kde_tc_wide_kernel): the
 * single-precision Gaussian at d >= kTcWideMinDim, q.x on fp16 tensor cores
 * as 3xFP16. Exports select_tc_wide_kernel.
 */
#include <cuda_runtime.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "accumulate.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/*
 * Wide tensor-core path: single-precision Gaussian, d >= kTcWideMinDim.
 *
 * value = aux + q.x with q.x = sum over 16-dimension steps of
 * mma.sync.m16n8k16 (fp16 in, FP32 accumulate). Each operand is stored split
 * as big = fp16(v) and small = fp16(v - big) (f16_split2; training points on
 * the host, queries by the packing kernel), and q.x ~ q_small x_big + q_big
 * x_small + q_big x_big: about 22 bits of each operand, as 3xTF32 keeps, at
 * half the MMAs (an fp16 k16 step costs what a TF32 k8 step does) and half
 * the shared memory. The accumulators start at aux, so the bias is free.
 *
 * fp16 holds magnitudes below 65504: training points must lie within
 * kF16Limit (else the model takes the FMA kernel), and a query row beyond it
 * is stored scaled by a power of two, 1 / row_scale, exact; a warp with such
 * a row starts its accumulators at 0 and takes value = acc row_scale + aux.
 *
 * Each warp owns 32 queries (two m16 tiles) and takes every 32-point tile
 * (four n8 tiles): per 16 dimensions, 8 16-byte shared loads feed 24 MMAs.
 * Storage tile (32 points): [k16][n8 tile 0..3][lane][b0 big, b1 big,
 * b0 small, b1 small] (the B fragment of each lane), then aux[32] (float).
 * Queries: [m16 tile][k16][big | small][lane][a0..a3] (A fragments), then
 * the row scales. Fragment layouts: PTX ISA, "Matrix fragments for
 * mma.m16n8k16 with floating point type".
 */
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4],
                                        uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ void load_u4(const float *p, uint32_t (&v)[4])
{
  const uint4 w = *reinterpret_cast<const uint4 *>(p);
  v[0] = w.x;
  v[1] = w.y;
  v[2] = w.z;
  v[3] = w.w;
}

__global__ void __launch_bounds__(kThreads) kde_tc_wide_kernel(const kde_args<float> a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int MI = 2, NJ = 4, R = 2 * MI; /* R query rows per thread */
  extern __shared__ float4 smem_f4[];
  float *smem = reinterpret_cast<float *>(smem_f4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int k16 = a.k16;
  const int64_t tile_elems = a.tile_elems;
  const int q_elems = kWarps * MI * k16 * 256;
  float *sa = smem;
  float *sx = smem + q_elems;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;

  /* thread row r = 2 i + h: query q0 + 32 warp + 16 i + g + 8 h */
  int64_t qg[R];
  float row_scale[R];
  bool scaled = false;
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int64_t row = q0 + 32 * warp + 16 * (r / 2) + g + 8 * (r % 2);
    qg[r] = a.query_base + row;
    row_scale[r] = a.query[tc_wide_scale_offset(a.ldq, k16) + row];
    scaled = scaled || row_scale[r] != 1.0f;
  }
  /* warp-uniform, so that the common case keeps aux as the MMAs' input */
  scaled = __any_sync(0xffffffffu, scaled);
  float m[R], s[R], ts[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    m[r] = -FLT_MAX;
    s[r] = 0;
    ts[r] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kTileWidth;
  const float *src = a.train + (p0 / kTileWidth) * tile_elems;

  block_copy_async(sa, a.query + (q0 / 16) * k16 * 256, (size_t) q_elems * sizeof(float));
  block_copy_async(sx, src, (size_t) tile_elems * sizeof(float));
  async_commit();
  for (int64_t tile = 0; tile < n_tiles; tile++) {
    if (tile + 1 < n_tiles)
      block_copy_async(sx + ((tile + 1) & 1) * tile_elems, src + (tile + 1) * tile_elems,
                       (size_t) tile_elems * sizeof(float));
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();
    const float *xs = sx + (tile & 1) * tile_elems;
    const float *aux = xs + (size_t) k16 * 512;

    float acc[MI][NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const float c0 = scaled ? 0.0f : aux[8 * j + 2 * t];
      const float c1 = scaled ? 0.0f : aux[8 * j + 2 * t + 1];
#pragma unroll
      for (int i = 0; i < MI; i++) {
        acc[i][j][0] = c0;
        acc[i][j][1] = c1;
        acc[i][j][2] = c0;
        acc[i][j][3] = c1;
      }
    }
#pragma unroll 2
    for (int kk = 0; kk < k16; kk++) {
      uint32_t b[NJ][4], abig[MI][4], asmall[MI][4];
#pragma unroll
      for (int j = 0; j < NJ; j++) load_u4(xs + ((kk * NJ + j) * 32 + lane) * 4, b[j]);
#pragma unroll
      for (int i = 0; i < MI; i++) {
        const float *fa = sa + ((size_t) ((warp * MI + i) * k16 + kk) * 2) * 128;
        load_u4(fa + lane * 4, abig[i]);
        load_u4(fa + 128 + lane * 4, asmall[i]);
      }
      /* small products first: they are the smaller terms of the sum */
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          mma_f16(acc[i][j], asmall[i], b[j][0], b[j][1]);
          mma_f16(acc[i][j], abig[i], b[j][2], b[j][3]);
          mma_f16(acc[i][j], abig[i], b[j][0], b[j][1]);
        }
    }

    /* row r = 2 i + h holds columns 8 j + 2 t + e in acc[i][j][2 h + e] */
    float value[R][2 * NJ];
    const int64_t first = a.train_base + p0 + tile * kTileWidth;
    const bool check = a.leave_one_out && qg[0] - 32 < first + kTileWidth &&
                       first <= qg[R - 1] + 32;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float v = acc[r / 2][j][2 * (r % 2) + e];
          if (scaled) v = fmaf(v, row_scale[r], aux[8 * j + 2 * t + e]);
          if (check && first + 8 * j + 2 * t + e == qg[r]) v = -INFINITY;
          value[r][2 * j + e] = v;
        }
    accumulate_group<true, kPolyExps>(value, m, s, ts);
    /* Two-level sum as kde_tc_small_kernel's: kTcSumPoints into ts, then
     * into s. */
    constexpr int64_t run = kTcSumPoints / kTileWidth;
    if ((tile & (run - 1)) == run - 1) flush_tile_sums(s, ts);
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }

  flush_tile_sums(s, ts);
  write_quad_partials(a, q0 + 32 * warp, m, s);
#else
  __trap();
#endif
}

kde_kernel_fn<float> select_tc_wide_kernel() { return kde_tc_wide_kernel; }

} // namespace kdegpu
