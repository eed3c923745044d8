/*
 * derivatives_double.cu: the double-precision kernels of the derivative sums
 * (derivatives_kernels.cuh), apart from the other precision's so that the
 * two compile side by side.
 */
#include "derivatives_kernels.cuh"

namespace kdegpu {

template deriv_kernel_fn<double> select_deriv_kernel<double>(int, int, bool, bool,
                                                                size_t *);

} // namespace kdegpu
