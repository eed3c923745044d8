/*
 * kernel_adaptive.cu: the FMA kernels of adaptive (sample-point) fits, in
 * their own translation unit so that they compile beside the fixed ones:
 * kde_small_kernel and kde_wide_kernel with A = kFitAdaptive (kernel_small.cuh,
 * kernel_wide.cuh). Their storage tiles carry one more row, each point's
 * 1 / lambda_j^2, and every kernel takes the difference form, s^2 =
 * |q - x_j|^2 / lambda_j^2 (the expanded Gaussian form would need a
 * per-pair |q|^2 / lambda_j^2 term). The tensor-core kernels have no
 * adaptive variant: an adaptive model always takes the plain layout.
 * Exports select_small_adaptive_kernel and select_wide_adaptive_kernel.
 */
#include "kernel_small.cuh"
#include "kernel_wide.cuh"

namespace kdegpu {

template <typename T> kde_kernel_fn<T> select_small_adaptive_kernel(int kernel, int dim)
{
  return small_kernel_for<T, kFitAdaptive>(kernel, dim);
}
template kde_kernel_fn<float> select_small_adaptive_kernel<float>(int, int);
template kde_kernel_fn<double> select_small_adaptive_kernel<double>(int, int);

template <typename T> kde_kernel_fn<T> select_wide_adaptive_kernel(int kernel)
{
  return wide_kernel_for<T, kFitAdaptive>(kernel);
}
template kde_kernel_fn<float> select_wide_adaptive_kernel<float>(int);
template kde_kernel_fn<double> select_wide_adaptive_kernel<double>(int);

} // namespace kdegpu
