/* bench/cuda/emulate shim: the few names of src/cuda/accumulate.cuh that the derivative kernels use, for the host. */
#pragma once
#include <stdint.h>
#include "kernels.cuh"
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
}
