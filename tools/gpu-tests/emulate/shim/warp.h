/* Shim for tools/gpu-tests/emulate: the warp intrinsics of the CUDA
 * kernels, for threads emulated one std::thread each (launch_warps below):
 * a shuffle writes every lane's value to its warp's slots, waits for the
 * warp, reads the source lane's, and waits again before the slots are
 * reused; atomics through std::atomic_ref. Include after cuda_runtime.h. */
#pragma once
#include <atomic>
#include <barrier>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct emulated_warp {
  std::barrier<> bar{32};
  alignas(16) unsigned char slot[32][16];
};
extern std::vector<std::unique_ptr<emulated_warp>> g_warps;

template <typename T> T emulated_shuffle(T v, int src)
{
  emulated_warp &w = *g_warps[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  std::memcpy(w.slot[lane], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  std::memcpy(&r, w.slot[src], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}
template <typename T> T __shfl_sync(unsigned, T v, int src) { return emulated_shuffle(v, src % 32); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int o)
{
  return emulated_shuffle(v, (int) (threadIdx.x % 32) ^ o);
}
template <typename T> T __shfl_down_sync(unsigned, T v, unsigned o)
{
  const int lane = threadIdx.x % 32;
  return emulated_shuffle(v, lane + (int) o < 32 ? lane + (int) o : lane);
}
template <typename T> T __shfl_up_sync(unsigned, T v, unsigned o)
{
  const int lane = threadIdx.x % 32;
  return emulated_shuffle(v, lane >= (int) o ? lane - (int) o : lane);
}
inline void __syncwarp(unsigned = 0xffffffffu) { g_warps[threadIdx.x / 32]->bar.arrive_and_wait(); }
/* every lane's predicate as the warp's bits, lane l in bit l */
inline unsigned __ballot_sync(unsigned, int predicate)
{
  emulated_warp &w = *g_warps[threadIdx.x / 32];
  w.slot[threadIdx.x % 32][0] = predicate ? 1 : 0;
  w.bar.arrive_and_wait();
  unsigned bits = 0u;
  for (int src = 0; src < 32; src++) bits |= (unsigned) (w.slot[src][0] & 1u) << src;
  w.bar.arrive_and_wait();
  return bits;
}
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0u; }
/* redux.sync's max over the warp's lanes */
inline int __reduce_max_sync(unsigned, int v)
{
  for (int o = 16; o > 0; o /= 2) {
    const int other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned atomicOr(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}

/* fn() on every thread of every block of `grid`, `threads` (a multiple of
 * 32) per block, with the warps' barriers (launch.h's launch_block has the
 * block's only). The threads are made once per launch and run the blocks
 * in turn: a barrier between blocks moves blockIdx on. */
template <typename F> void launch_warps(dim3 grid, int threads, F fn)
{
  gridDim = {grid.x, grid.y, 1};
  blockDim = {(unsigned) threads, 1, 1};
  blockIdx = {0, 0, 0};
  const unsigned blocks = grid.x * grid.y;
  std::barrier<> sync(threads);
  g_barrier = &sync;
  g_warps.clear();
  for (int w = 0; w < threads / 32; w++) g_warps.push_back(std::make_unique<emulated_warp>());
  unsigned block = 0;
  auto next = [&]() noexcept {
    block++;
    blockIdx = {block % grid.x, block / grid.x, 0};
  };
  std::barrier<decltype(next)> between(threads, next);
  std::vector<std::thread> th;
  for (int t = 0; t < threads; t++)
    th.emplace_back([&, t] {
      threadIdx = {(unsigned) t, 0, 0};
      for (unsigned b = 0; b < blocks; b++) {
        fn();
        between.arrive_and_wait();
      }
    });
  for (auto &x : th) x.join();
}
