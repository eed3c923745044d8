/* tools/gpu-tests/emulate shim: the few names of src/cuda/kernels.cuh that the derivative kernels use, for the host. */
#pragma once
#include <type_traits>
#include "kdegpu/kernels.h"
namespace kdegpu {
template <typename F> auto dispatch_kernel(int kernel, F &&f)
{
  switch (kernel) {
  case KDE_EPANECHNIKOV: return f(std::integral_constant<int, KDE_EPANECHNIKOV>());
  case KDE_RECTANGULAR:  return f(std::integral_constant<int, KDE_RECTANGULAR>());
  case KDE_TRIANGULAR:   return f(std::integral_constant<int, KDE_TRIANGULAR>());
  case KDE_BIWEIGHT:     return f(std::integral_constant<int, KDE_BIWEIGHT>());
  case KDE_COSINE:       return f(std::integral_constant<int, KDE_COSINE>());
  case KDE_OPTCOSINE:    return f(std::integral_constant<int, KDE_OPTCOSINE>());
  case KDE_EXPONENTIAL:  return f(std::integral_constant<int, KDE_EXPONENTIAL>());
  default:               return f(std::integral_constant<int, KDE_GAUSSIAN>());
  }
}
}
