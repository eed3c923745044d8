/*
 * tile_copy.cuh: moving tiles into shared memory: asynchronous global ->
 * shared copies by the whole block or by each warp of its share (cp.async;
 * a plain copy before sm_80) and vector loads of consecutive shared values.
 */
#ifndef KDEGPU_CUDA_TILE_COPY_CUH
#define KDEGPU_CUDA_TILE_COPY_CUH

#include <cuda_runtime.h>

#include <stddef.h>

#include "tuning.cuh"

namespace kdegpu {

template <typename T, int N>
__device__ __forceinline__ void load_vec(const T *p, T (&v)[N])
{
  static_assert((N * sizeof(T)) % 16 == 0, "whole 16-byte loads");
#pragma unroll
  for (int c = 0; c < N * (int) sizeof(T) / 16; c++) {
    const float4 w = reinterpret_cast<const float4 *>(p)[c];
    const T *wt = reinterpret_cast<const T *>(&w);
#pragma unroll
    for (int e = 0; e < 16 / (int) sizeof(T); e++)
      v[c * (16 / sizeof(T)) + e] = wt[e];
  }
}

/* Asynchronous global -> shared copies (cp.async, sm_80+), with a plain copy
 * for older devices. `shared_at`: a shared-window address (what the
 * copies take on sm_80+), or the generic pointer before. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
typedef unsigned shared_at;
__device__ __forceinline__ shared_at shared_address(void *smem)
{
  return (unsigned) __cvta_generic_to_shared(smem);
}
__device__ __forceinline__ void copy16_async(shared_at s, const void *gmem)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
/* one 4-byte value (kernel_small's anchors: 8-byte aligned at d = 3) */
__device__ __forceinline__ void copy4_async(shared_at s, const void *gmem)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
#else
typedef char *shared_at;
__device__ __forceinline__ shared_at shared_address(void *smem) { return static_cast<char *>(smem); }
__device__ __forceinline__ void copy16_async(shared_at s, const void *gmem)
{
  *reinterpret_cast<float4 *>(s) = *reinterpret_cast<const float4 *>(gmem);
}
__device__ __forceinline__ void copy4_async(shared_at s, const void *gmem)
{
  *reinterpret_cast<float *>(s) = *reinterpret_cast<const float *>(gmem);
}
#endif
__device__ __forceinline__ void copy16_async(void *smem, const void *gmem)
{
  copy16_async(shared_address(smem), gmem);
}

__device__ __forceinline__ void async_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Wait until at most one committed group (the newest) is still in flight. */
__device__ __forceinline__ void async_wait_all_but_newest()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

/* The block copies `bytes` (a multiple of 16) from global to shared. */
__device__ __forceinline__ void block_copy_async(void *smem, const void *gmem,
                                                 size_t bytes)
{
  char *s = static_cast<char *>(smem);
  const char *g = static_cast<const char *>(gmem);
  for (size_t o = 16 * (size_t) threadIdx.x; o < bytes; o += 16 * kThreads)
    copy16_async(s + o, g + o);
}

/* Warp w copies its share of a block's buffer: the SHARE values from w
 * SHARE, from gmem to the same place of smem (a multiple of 16 bytes). */
template <int SHARE, typename T>
__device__ __forceinline__ void warp_share_copy_async(T *smem, const T *gmem)
{
  static_assert((SHARE * sizeof(T)) % 16 == 0, "whole 16-byte copies");
  constexpr int N = (int) (SHARE * sizeof(T) / 16), PER = (N + 31) / 32;
  const int lane = threadIdx.x % 32;
  const size_t at = (size_t) (threadIdx.x / 32) * SHARE * sizeof(T) + 16 * lane;
  char *s = reinterpret_cast<char *>(smem) + at;
  const char *g = reinterpret_cast<const char *>(gmem) + at;
#pragma unroll
  for (int c = 0; c < PER; c++)
    if ((c + 1) * 32 <= N || lane < N - c * 32) copy16_async(s + 16 * 32 * c, g + 16 * 32 * c);
}

/* warp_share_copy_async from one lane's addresses computed once, for a
 * loop that copies tile after tile: each copy adds the tile's offsets to
 * them (an add a copy) where warp_share_copy_async forms both 64-bit and
 * shared addresses again (kernel_small.cuh: 60 instructions a tile at d =
 * 2, most of them address arithmetic). `gmem` and `smem` as there, for
 * offsets 0. */
template <int SHARE, typename T> struct warp_share_copier {
  static constexpr int N = (int) (SHARE * sizeof(T) / 16), PER = (N + 31) / 32;
  static_assert((SHARE * sizeof(T)) % 16 == 0, "whole 16-byte copies");
  const char *src;
  shared_at dst;
  __device__ __forceinline__ warp_share_copier(T *smem, const T *gmem)
  {
    const size_t at = (size_t) (threadIdx.x / 32) * SHARE * sizeof(T) + 16 * (threadIdx.x % 32);
    src = reinterpret_cast<const char *>(gmem) + at;
    dst = shared_address(reinterpret_cast<char *>(smem) + at);
  }
  /* the warp's share of a tile from gmem + src_bytes into smem + dst_bytes */
  __device__ __forceinline__ void copy(int dst_bytes, int64_t src_bytes) const
  {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < PER; c++)
      if ((c + 1) * 32 <= N || lane < N - c * 32)
        copy16_async(dst + dst_bytes + 512 * c, src + src_bytes + 512 * c);
  }
};

/* The same for one 4-byte value a lane (kernel_small's anchors). */
struct lane_copier4 {
  const char *src;
  shared_at dst;
  __device__ __forceinline__ lane_copier4(void *smem, const void *gmem)
      : src(static_cast<const char *>(gmem)), dst(shared_address(smem))
  {
  }
  /* the lane's value at gmem + src_bytes into smem + dst_bytes */
  __device__ __forceinline__ void copy(int dst_bytes, int64_t src_bytes) const
  {
    copy4_async(dst + dst_bytes, src + src_bytes);
  }
};

} // namespace kdegpu

#endif /* KDEGPU_CUDA_TILE_COPY_CUH */
