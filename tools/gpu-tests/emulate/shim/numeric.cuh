/* tools/gpu-tests/emulate shim: the few names of src/cuda/numeric.cuh that the derivative kernels use, for the host. */
#pragma once
#include <math.h>
#include "kdegpu/kernels.h"
namespace kdegpu {
constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;
inline float fast_exp2(float x) { float r = exp2f(x); return r < 1.17549435e-38f ? 0.0f : r; }
inline double fast_exp2(double x) { return x < -1022.0 ? 0.0 : exp2(fmin(x, 1023.0)); }
template <int K> inline float log_profile(float s2) { return kde_log_profile_f(K, s2); }
template <int K> inline double log_profile(double s2) { return kde_log_profile(K, s2); }
template <int K> inline float profile(float s2) { return kde_profile_f(K, s2); }
template <int K> inline double profile(double s2) { return kde_profile(K, s2); }
}
