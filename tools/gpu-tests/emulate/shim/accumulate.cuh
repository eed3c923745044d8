/* tools/gpu-tests/emulate shim: the few names of src/cuda/accumulate.cuh that the derivative kernels use, for the host. */
#pragma once
#include <stdint.h>
#include "kernels.cuh"
#include "tuning.cuh"
namespace kdegpu {
struct visit_units {
  const int32_t *list; int64_t first; int64_t count; int64_t base;
  int64_t unit(int64_t t) const { return list == nullptr ? t : (int64_t) list[first + t] - base; }
};
inline int64_t lower_bound_unit(const int32_t *list, int64_t lo, int64_t hi, int64_t key)
{
  while (lo < hi) { const int64_t mid = lo + (hi - lo) / 2; if ((int64_t) list[mid] < key) lo = mid + 1; else hi = mid; }
  return lo;
}
template <typename Args>
inline visit_units block_visits(const Args &a, int64_t p0, int64_t units)
{
  visit_units v;
  v.base = (a.train_base + p0) / kUnit;
  if (a.visit == nullptr) { v.list = nullptr; v.first = 0; v.count = units; return v; }
  const int64_t lo = a.visit_offset[blockIdx.x], hi = a.visit_offset[blockIdx.x + 1];
  v.list = a.visit;
  v.first = lower_bound_unit(a.visit, lo, hi, v.base);
  v.count = lower_bound_unit(a.visit, v.first, hi, v.base + units) - v.first;
  return v;
}
}
