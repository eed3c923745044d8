/*
 * host_threads.cuh: host work of the CUDA backend on the CPU's threads
 * (packing the training set, scattering results), with std::thread: the
 * .cu files are not built with OpenMP.
 */
#ifndef KDEGPU_CUDA_HOST_THREADS_CUH
#define KDEGPU_CUDA_HOST_THREADS_CUH

#include <stdint.h>

#include <thread>
#include <vector>

#include "model.cuh"
#include "threads.h"

namespace kdegpu {

/* fn(first, last) over [0, count) in contiguous ranges on up to `threads`
 * host threads (kde_thread_count's: 1 in a forked child), each range a
 * whole number of `grain`s; the ranges are disjoint, so the result does not
 * depend on the thread count. A thread that cannot be started leaves its
 * range to this one. */
template <typename F>
inline void parallel_ranges(int64_t count, int64_t grain, int threads, F fn)
{
  int64_t n = kde_thread_count(threads);
  if (n > count / (64 * grain)) n = count / (64 * grain);
  if (n <= 1) {
    fn((int64_t) 0, count);
    return;
  }
  const int64_t per = ceil_div(ceil_div(count, n), grain) * grain;
  std::vector<std::thread> pool;
  int64_t started = 1; /* range 0 is this thread's */
  try {
    pool.reserve((size_t) n);
    for (; started < n && started * per < count; started++) {
      const int64_t last = (started + 1) * per < count ? (started + 1) * per : count;
      pool.emplace_back(fn, started * per, last);
    }
  } catch (...) { /* no more threads: the rest run here */
  }
  fn((int64_t) 0, per < count ? per : count);
  for (int64_t r = started; r * per < count; r++)
    fn(r * per, (r + 1) * per < count ? (r + 1) * per : count);
  for (std::thread &t : pool) t.join();
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_HOST_THREADS_CUH */
