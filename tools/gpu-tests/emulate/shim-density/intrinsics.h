/* tools/gpu-tests/emulate shim for the density kernel's build (run.sh
 * density): the device intrinsics of numeric.cuh's exp2s, for the host, and
 * the MUFU's ex2.approx.ftz (run.sh puts emulated_ex2 in place of its asm):
 * exp2f, with results below 2^-126 flushed to 0 as ftz does. */
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, sizeof f); return f; }
inline int __float_as_int(float f) { int v; std::memcpy(&v, &f, sizeof v); return v; }
inline int __double2hiint(double x) { int64_t v; std::memcpy(&v, &x, sizeof v); return (int) (v >> 32); }
inline int __double2loint(double x) { int64_t v; std::memcpy(&v, &x, sizeof v); return (int) (uint32_t) v; }
inline double __hiloint2double(int hi, int lo)
{
  const int64_t v = (int64_t) ((uint64_t) (uint32_t) hi << 32 | (uint32_t) lo);
  double x;
  std::memcpy(&x, &v, sizeof x);
  return x;
}
inline float emulated_ex2(float x)
{
  const float r = exp2f(x);
  return r < 1.17549435e-38f ? 0.0f : r;
}
