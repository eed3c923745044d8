/*
 * kernel_small.cu: the fixed-bandwidth instances of the FMA kernel for
 * d = 1..4 (kernel_small.cuh). Exports select_small_kernel.
 */
#include "kernel_small.cuh"

namespace kdegpu {

template <typename T> kde_kernel_fn<T> select_small_kernel(int kernel, int dim)
{
  return small_kernel_for<T, kFitFixed>(kernel, dim);
}
template kde_kernel_fn<float> select_small_kernel<float>(int, int);
template kde_kernel_fn<double> select_small_kernel<double>(int, int);

} // namespace kdegpu
