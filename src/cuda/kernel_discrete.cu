/*
 * kernel_discrete.cu: the small FMA kernel for mixed data (kde_small_kernel
 * with C discrete columns, kernel_small.cuh): the Gaussian in the
 * difference form, each pair's term times its discrete columns' factors
 * (kde_backend.h), so that the numeric columns' tiles skip as any fit's
 * and a factor costs one term per pair whatever its levels. Exports
 * select_discrete_kernel.
 */
#include "kernel_small.cuh"

namespace kdegpu {

template <typename T, int D> kde_kernel_fn<T> discrete_kernel_for(int n_discrete)
{
  static_assert(kMaxDiscrete == 4, "one case per count of discrete columns");
  switch (n_discrete) {
  case 1: return kde_small_kernel<KDE_GAUSSIAN, T, D, kFitPlain, 1>;
  case 2: return kde_small_kernel<KDE_GAUSSIAN, T, D, kFitPlain, 2>;
  case 3: return kde_small_kernel<KDE_GAUSSIAN, T, D, kFitPlain, 3>;
  case 4: return kde_small_kernel<KDE_GAUSSIAN, T, D, kFitPlain, 4>;
  default: return nullptr;
  }
}

template <typename T> kde_kernel_fn<T> select_discrete_kernel(int dim, int n_discrete)
{
  switch (dim) {
  case 1: return discrete_kernel_for<T, 1>(n_discrete);
  case 2: return discrete_kernel_for<T, 2>(n_discrete);
  case 3: return discrete_kernel_for<T, 3>(n_discrete);
  case 4: return discrete_kernel_for<T, 4>(n_discrete);
  default: return nullptr;
  }
}
template kde_kernel_fn<float> select_discrete_kernel<float>(int, int);
template kde_kernel_fn<double> select_discrete_kernel<double>(int, int);

} // namespace kdegpu
