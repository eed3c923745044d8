// What every emulator program shares: the CUDA built-ins the shims
// declare (one std::thread per CUDA thread, a std::barrier for
// __syncthreads), the kernels' shared memory, a launch of a grid block by
// block, and a k-d order of points (order_evaluation_queries' host path).
// Include once per program, after derivatives_kernels.cuh.
#pragma once
#include <algorithm>
#include <thread>
#include <vector>

thread_local uint3_ threadIdx;
uint3_ blockIdx, blockDim, gridDim;
std::barrier<> *g_barrier;
namespace kdegpu { alignas(16) float4 deriv_smem[256 * 1024 / 16]; }

// fn() on every thread of every block of `grid`, `threads` per block.
template <typename F> void launch_block(dim3 grid, int threads, F fn)
{
  gridDim = {grid.x, grid.y, 1};
  blockDim = {(unsigned) threads, 1, 1};
  for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
      blockIdx = {bx, by, 0};
      std::barrier<> bar(threads);
      g_barrier = &bar;
      std::vector<std::thread> th;
      for (int t = 0; t < threads; t++) th.emplace_back([&, t] { threadIdx = {(unsigned) t, 0, 0}; fn(); });
      for (auto &x : th) x.join();
    }
}

// k-d order of n points (column-major) in idx[lo, hi), runs of `leaf`
static void kd(const std::vector<double> &x, int64_t n, int d, std::vector<int64_t> &idx, int64_t lo,
               int64_t hi, int64_t leaf)
{
  if (hi - lo <= leaf) return;
  int best = 0; double wbest = -1;
  for (int k = 0; k < d; k++) {
    double a = 1e300, b = -1e300;
    for (int64_t i = lo; i < hi; i++) { a = std::min(a, x[idx[i] + k * n]); b = std::max(b, x[idx[i] + k * n]); }
    if (b - a > wbest) { wbest = b - a; best = k; }
  }
  int64_t mid = lo + ((hi - lo) / 2 + leaf - 1) / leaf * leaf;
  if (mid >= hi) mid = lo + leaf;
  std::nth_element(idx.begin() + lo, idx.begin() + mid, idx.begin() + hi,
                   [&](int64_t a, int64_t b) { return x[a + best * n] < x[b + best * n]; });
  kd(x, n, d, idx, lo, mid, leaf);
  kd(x, n, d, idx, mid, hi, leaf);
}
