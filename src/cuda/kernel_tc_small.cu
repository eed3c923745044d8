/*
 * kernel_tc_small.cu: the small-d tensor-core kernel (kde_tc_small_kernel):
 * the single-precision Gaussian at d = kTcSmallDim, a pair's whole exponent
 * from bfloat16 MMAs. Exports select_tc_small_kernel.
 */
#include <cuda_runtime.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "accumulate.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "numeric.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/*
 * Tensor-core path for small d: single-precision Gaussian, d = 3 (the
 * template serves d <= 3; see kTcSmallDim).
 *
 * One MMA product gives a pair's whole exponent, running max included:
 * value - m = q.x + aux - m, with -m entering as the accumulator input. Per
 * pair, what is left for the FP32 pipes is the exp2 and one add (the FMA
 * kernel spends d FMAs and a subtraction more).
 *
 * Precision: a float v is split into three bfloat16 pieces, v = v0 + v1 +
 * v2 exactly (8 + 8 + 8 bits), and q_c x_c keeps the six piece products
 * down to 2^-16 relative (q0 x0, q0 x1, q1 x0, q0 x2, q1 x1, q2 x0; what is
 * dropped is about 2^-24 of q_c x_c, one float rounding); aux keeps its
 * three pieces, a float's 24 bits. So the products are as exact as the FMA
 * kernel's, which matters: the expanded form's terms reach |x|^2 / 2 ~ 1e3
 * in bandwidth units at n = 1e6, where 2^-22 of them is 2e-4 in log2 k.
 * 3xTF32 (q0 x0 + q0 x1 + q1 x0 with 11-bit pieces) was 4x less accurate
 * than the FMA kernel at n = 1e6; six TF32 terms were as accurate but need
 * three k8 steps, slower than the FMA kernel. bfloat16 m16n8k16 takes 16
 * entries per step at the cost of a TF32 k8 step.
 *
 * The k entries (2 k16 steps): lane t of a quad holds k = 16 s + 2 t + e and
 * 16 s + 2 t + 8 + e (e = 0, 1), which we number j = 4 s + e and 4 s + 2 +
 * e. For t < d, entry j < 6 of lane t is term j of coordinate t: query piece
 * tc_query_piece(j) times point piece tc_point_piece(j); lane 3 carries aux,
 * its pieces at j = 0, 1, 2 times a query entry of 1. Everything else is 0
 * (and -inf, aux0 of a null point, meets a 1). Storage is the B fragments
 * as they are: per n8 tile and lane (g, t), point g's 8 entries of lane t as
 * 4 packed pairs, one 16-byte shared load. The entries and the storage are
 * in layout.cuh (tc_query_entry, tc_point_entry, kTcPointWords).
 *
 * Each warp owns 32 queries (two m16 tiles) and takes every point of the
 * block's 256-point shared tile, in groups of kTcGroupTiles n8 tiles: per
 * group a thread has 4 query rows x 8 points, the same 32 terms per lazy-max
 * check as the FMA kernel. The lazy max is as in small_tile, with each
 * thread keeping its own running max per row (its 2 of the 8 columns of
 * every n8 tile); a quad's 4 states are merged at the end.
 */
constexpr int kTcSteps = 2;
constexpr int kTcGroupTiles = 4;

/* d = a b + c for bfloat16 m16n8k16, c given as (row g, row g + 8) values,
 * or accumulating into d. */
__device__ __forceinline__ void mma_bf16_rows(float (&d)[4], const uint32_t (&a)[4],
                                              uint32_t b0, uint32_t b1, float c_lo,
                                              float c_hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%11,%11};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c_lo),
        "f"(c_hi));
#endif
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* The values (exponents minus the row's max; the max is -neg_m) of one group
 * of kTcGroupTiles n8 tiles, from n8 tile j0 of the shared tile, for the
 * thread's 4 rows (r = 2 i + h: m16 tile i, row g + 8 h). value[r][2 jj + e]
 * is point 8 (j0 + jj) + 2 t + e. CHECK: exclude a query's own point. */
template <int D, bool CHECK>
__device__ __forceinline__ void tc_small_values(
    const float *__restrict__ tile, int j0, const uint32_t (&a)[2][kTcSteps][4],
    const float (&neg_m)[4], int64_t first, const int64_t (&qg)[4],
    float (&value)[4][2 * kTcGroupTiles])
{
  constexpr int KS = kTcSteps;
  const int lane = threadIdx.x % 32, t = lane % 4;
#pragma unroll
  for (int jj = 0; jj < kTcGroupTiles; jj++) {
    /* this lane's B fragments: step s takes b[2 s] and b[2 s + 1] */
    const uint4 w = *reinterpret_cast<const uint4 *>(tile + ((j0 + jj) * 32 + lane) * 4);
    const uint32_t b[2 * KS] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float d[4];
      mma_bf16_rows(d, a[i][0], b[0], b[1], neg_m[2 * i], neg_m[2 * i + 1]);
#pragma unroll
      for (int s = 1; s < KS; s++) mma_bf16(d, a[i][s], b[2 * s], b[2 * s + 1]);
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float v = d[2 * h + e];
          if (CHECK && first + 8 * (j0 + jj) + 2 * t + e == qg[2 * i + h]) v = -INFINITY;
          value[2 * i + h][2 * jj + e] = v;
        }
    }
  }
}

/* One 256-point shared tile, software-pipelined by one group as small_tile:
 * the MMAs of group k are issued while the exp2s of group k - 1 drain. When
 * a group's check fails, its values are computed again with the max left
 * out (absolute exponents) to set the new max, and the next group, already
 * computed against the old max, is computed again. */
template <int D, bool CHECK>
__device__ __forceinline__ void tc_small_tile(const float *__restrict__ tile,
                                              const uint32_t (&a)[2][kTcSteps][4],
                                              float (&neg_m)[4], float (&s)[4],
                                              float (&ts)[4], int64_t first,
                                              const int64_t (&qg)[4])
{
  constexpr int R = 4, G = kTcGroupTiles, N8 = kUnit / 8;
  /* the values are relative to the max already: group_exps subtracts 0 */
  const float zero[R] = {0.0f, 0.0f, 0.0f, 0.0f};
  float value[R][2 * G], gsum[R];
  tc_small_values<D, CHECK>(tile, 0, a, neg_m, first, qg, value);
  /* warp-uniform: the branch below issues MMAs, which need the whole warp */
  bool far = __any_sync(0xffffffffu, group_exps<kTcPolyExps>(value, zero, gsum));
#pragma unroll 1
  for (int j = G; j <= N8; j += G) {
    if (j < N8) tc_small_values<D, CHECK>(tile, j, a, neg_m, first, qg, value);
    if (__builtin_expect(far, 0)) { /* resolve group j - G */
      float again[R][2 * G];
      tc_small_values<D, CHECK>(tile, j - G, a, zero, first, qg, again);
#pragma unroll
      for (int r = 0; r < R; r++)
        if (!(gsum[r] <= (float) kLazyLimit)) {
          float m = -neg_m[r];
          group_fix_one(again[r], m, s[r], ts[r], gsum[r]);
          neg_m[r] = -m;
        }
      if (j < N8) tc_small_values<D, CHECK>(tile, j, a, neg_m, first, qg, value);
    }
#pragma unroll
    for (int r = 0; r < R; r++) ts[r] += gsum[r];
    if (j < N8) far = __any_sync(0xffffffffu, group_exps<kTcPolyExps>(value, zero, gsum));
  }
}

/* Block (bx, by): queries [128 bx, 128 bx + 128), warp w the 32 from
 * 32 w, against the by-th split of the training range; 256-point tiles
 * double-buffered with cp.async. */
template <int D>
__global__ void __launch_bounds__(kThreads, real_traits<float>::min_blocks)
    kde_tc_small_kernel(const kde_args<float> a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int KS = kTcSteps, R = 4;
  constexpr int tile_elems = kUnit * kTcPointWords;
  extern __shared__ float4 smem_f4[];
  float *smem = reinterpret_cast<float *>(smem_f4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries + 32 * warp;

  /* A fragments of step s: register x holds row g + 8 (x % 2) at j = 4 s +
   * 2 (x / 2) and the next j (low half first); row r = 2 i + h is query
   * q0 + 16 i + g + 8 h */
  uint32_t afrag[2][KS][4];
  int64_t qg[R];
  float neg_m[R], s[R];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    uint32_t piece[2][3][D];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int64_t row = q0 + 16 * i + g + 8 * h;
      qg[2 * i + h] = a.query_base + row;
#pragma unroll
      for (int c = 0; c < D; c++) {
        uint32_t p[3];
        bf16_split3(a.query[row + c * a.ldq], p);
#pragma unroll
        for (int u = 0; u < 3; u++) piece[h][u][c] = p[u];
      }
    }
#pragma unroll
    for (int st = 0; st < KS; st++)
#pragma unroll
      for (int x = 0; x < 4; x++)
      {
        const int j = 4 * st + 2 * (x / 2);
        afrag[i][st][x] = tc_query_entry<D>(piece[x % 2], t, j) |
                          tc_query_entry<D>(piece[x % 2], t, j + 1) << 16;
      }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    neg_m[r] = FLT_MAX; /* m = lowest(): the first group sets it */
    s[r] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const visit_units visits = block_visits(a, p0, split_count / kUnit);
  const int64_t n_tiles = visits.count;
  const float *src = a.train + p0 * kTcPointWords;

  if (n_tiles > 0)
    block_copy_async(smem, src + visits.unit(0) * tile_elems, tile_elems * sizeof(float));
  async_commit();
  float ts[R] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t tile = 0; tile < n_tiles; tile++) {
    if (tile + 1 < n_tiles)
      block_copy_async(smem + ((tile + 1) & 1) * tile_elems,
                       src + visits.unit(tile + 1) * tile_elems, tile_elems * sizeof(float));
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();
    const float *xs = smem + (tile & 1) * tile_elems;
    const int64_t first = a.train_base + p0 + visits.unit(tile) * kUnit;
    /* warp-uniform, for the MMAs: the warp's 32 queries against the tile */
    const bool check = a.leave_one_out && a.query_base + q0 < first + kUnit &&
                       first <= a.query_base + q0 + 31;
    if (check)
      tc_small_tile<D, true>(xs, afrag, neg_m, s, ts, first, qg);
    else
      tc_small_tile<D, false>(xs, afrag, neg_m, s, ts, first, qg);
    /* Two-level sum, kTcSumPoints into ts, then into s (the FMA kernels'
     * compensated_sum costs 3% here, measured on an H100). */
    constexpr int64_t run = kTcSumPoints / kUnit;
    if ((tile & (run - 1)) == run - 1) flush_tile_sums(s, ts);
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }
  flush_tile_sums(s, ts);
  float m[R];
#pragma unroll
  for (int r = 0; r < R; r++) m[r] = -neg_m[r];
  write_quad_partials(a, q0, m, s);
#else
  __trap();
#endif
}

kde_kernel_fn<float> select_tc_small_kernel() { return kde_tc_small_kernel<kTcSmallDim>; }

} // namespace kdegpu
