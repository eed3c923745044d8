/* tools/gpu-tests/emulate shim for the density kernel's build (run.sh
 * density): numeric.cuh's fp16 splits serve the tensor-core layouts only,
 * which the FMA kernel never reads; these let numeric.cuh compile and stop
 * the program if anything calls them. */
#pragma once
#include <cstdlib>
struct __half_raw { unsigned short x; };
struct __half { explicit __half(__half_raw) {} };
inline __half_raw __float2half_rn(float) { std::abort(); }
inline float __half2float(__half) { std::abort(); }
