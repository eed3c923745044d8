/*
 * hilbert.cuh: a point's place along the Hilbert curve through a grid of
 * 2^bits cells per coordinate (order.cu's query order). Consecutive cells
 * along the curve share a face, so a run of consecutive queries is one
 * connected region; along the Morton (Z) curve a run jumps wherever the
 * curve does, and a block of queries then spans two regions and the space
 * between them, which its plan must visit (bench/shapes.R's sparse and
 * clustered queries).
 *
 * Skilling's transform ("Programming the Hilbert curve", AIP Conference
 * Proceedings 707, 2004): the cell numbers are rewritten in place to the
 * "transposed" index, whose bits, interleaved from the most significant
 * down as a Morton code's, are the distance along the curve.
 * tools/gpu-tests/emulate/hilbert.cpp checks both properties on whole grids.
 */
#ifndef KDEGPU_CUDA_HILBERT_CUH
#define KDEGPU_CUDA_HILBERT_CUH

#include <cuda_runtime.h>

#include <stdint.h>

namespace kdegpu {

/* Bits per coordinate of order.cu's key: 63 bits in all (a 64-bit key),
 * and no finer than double's 52 fractional bits (d = 1). */
__host__ __device__ inline int hilbert_key_bits(int dim)
{
  const int bits = 63 / dim;
  return bits < 52 ? bits : 52;
}

/* cell[0 .. dim) in [0, 2^bits), bits >= 1, dim * bits <= 64: the
 * distance along the curve. Destroys cell. */
__host__ __device__ inline uint64_t hilbert_index(uint64_t *cell, int dim, int bits)
{
  const uint64_t top = UINT64_C(1) << (bits - 1);
  if (dim > 1) {
    for (uint64_t q = top; q > 1; q >>= 1) { /* undo the excess work, level by level */
      const uint64_t p = q - 1;
      for (int k = 0; k < dim; k++) {
        if (cell[k] & q) {
          cell[0] ^= p; /* invert */
        } else {        /* exchange */
          const uint64_t t = (cell[0] ^ cell[k]) & p;
          cell[0] ^= t;
          cell[k] ^= t;
        }
      }
    }
    for (int k = 1; k < dim; k++) cell[k] ^= cell[k - 1]; /* Gray encode */
    uint64_t t = 0;
    for (uint64_t q = top; q > 1; q >>= 1)
      if (cell[dim - 1] & q) t ^= q - 1;
    for (int k = 0; k < dim; k++) cell[k] ^= t;
  }
  uint64_t index = 0;
  for (int bit = bits - 1; bit >= 0; bit--)
    for (int k = 0; k < dim; k++) index = index << 1 | (cell[k] >> bit & 1u);
  return index;
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_HILBERT_CUH */
