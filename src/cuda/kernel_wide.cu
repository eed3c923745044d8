/*
 * kernel_wide.cu: the fixed-bandwidth instances of the FMA kernel for
 * d >= 5 (kernel_wide.cuh). Exports select_wide_kernel.
 */
#include "kernel_wide.cuh"

namespace kdegpu {

template <typename T> kde_kernel_fn<T> select_wide_kernel(int kernel)
{
  return wide_kernel_for<T, kFitFixed>(kernel);
}
template kde_kernel_fn<float> select_wide_kernel<float>(int);
template kde_kernel_fn<double> select_wide_kernel<double>(int);

} // namespace kdegpu
