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
 * for older devices. */
__device__ __forceinline__ void copy16_async(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned s = (unsigned) __cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s),
               "l"(gmem));
#else
  *reinterpret_cast<float4 *>(smem) = *reinterpret_cast<const float4 *>(gmem);
#endif
}
/* one 4-byte value (kernel_small's anchors: 8-byte aligned at d = 3) */
__device__ __forceinline__ void copy4_async(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned s = (unsigned) __cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
#else
  *reinterpret_cast<float *>(smem) = *reinterpret_cast<const float *>(gmem);
#endif
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
 * loop that copies tile after tile: each copy adds the tile's offset to
 * them (an add a copy) where warp_share_copy_async forms both 64-bit and
 * shared addresses again (kernel_small.cuh: 60 instructions a tile at d =
 * 2, most of them address arithmetic). `gmem` and `smem` as there, for
 * offset 0; `buffer` a byte offset into smem. */
template <int SHARE, typename T> struct warp_share_copier {
  static constexpr int N = (int) (SHARE * sizeof(T) / 16), PER = (N + 31) / 32;
  static_assert((SHARE * sizeof(T)) % 16 == 0, "whole 16-byte copies");
  const char *src;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned dst; /* shared-window address */
#else
  char *dst;
#endif
  __device__ __forceinline__ warp_share_copier(T *smem, const T *gmem)
  {
    const size_t at = (size_t) (threadIdx.x / 32) * SHARE * sizeof(T) + 16 * (threadIdx.x % 32);
    src = reinterpret_cast<const char *>(gmem) + at;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    dst = (unsigned) __cvta_generic_to_shared(reinterpret_cast<char *>(smem) + at);
#else
    dst = reinterpret_cast<char *>(smem) + at;
#endif
  }
  /* the share of the tile `elems` values from gmem into smem + buffer bytes */
  __device__ __forceinline__ void copy(int buffer, int64_t elems) const
  {
    const char *g = src + elems * (int64_t) sizeof(T);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < PER; c++) {
      if ((c + 1) * 32 <= N || lane < N - c * 32) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + buffer + 512 * c),
                     "l"(g + 512 * c));
#else
        copy16_async(dst + buffer + 512 * c, g + 512 * c);
#endif
      }
    }
  }
};

/* The same for one 4-byte value a lane (kernel_small's anchors). */
struct lane_copier4 {
  const char *src;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned dst;
#else
  char *dst;
#endif
  __device__ __forceinline__ lane_copier4(void *smem, const void *gmem)
      : src(static_cast<const char *>(gmem))
  {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    dst = (unsigned) __cvta_generic_to_shared(smem);
#else
    dst = static_cast<char *>(smem);
#endif
  }
  __device__ __forceinline__ void copy(int buffer, int64_t bytes) const
  {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst + buffer), "l"(src + bytes));
#else
    copy4_async(dst + buffer, src + bytes);
#endif
  }
};

} // namespace kdegpu

#endif /* KDEGPU_CUDA_TILE_COPY_CUH */
