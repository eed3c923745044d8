/*
 * kernel_plain.cu: the Gaussian's FMA kernels in the difference form at
 * d >= 3 (A = kFitPlain in kernel_small.cuh and kernel_wide.cuh), for a
 * fixed-bandwidth fit whose points span too many bandwidths for the
 * expanded form's rounding (model.cu decides). Every other kernel, and the
 * Gaussian at d <= 2, takes the difference form in kFitFixed already.
 * Exports select_plain_gaussian_kernel.
 */
#include "kernel_small.cuh"
#include "kernel_wide.cuh"

namespace kdegpu {

/* dim >= 3 (below, the fixed-bandwidth kernels are these already) */
template <typename T> kde_kernel_fn<T> select_plain_gaussian_kernel(int dim)
{
  switch (dim) {
  case 3: return kde_small_kernel<KDE_GAUSSIAN, T, 3, kFitPlain>;
  case 4: return kde_small_kernel<KDE_GAUSSIAN, T, 4, kFitPlain>;
  default: return kde_wide_kernel<KDE_GAUSSIAN, T, kFitPlain>;
  }
}
template kde_kernel_fn<float> select_plain_gaussian_kernel<float>(int);
template kde_kernel_fn<double> select_plain_gaussian_kernel<double>(int);

} // namespace kdegpu
