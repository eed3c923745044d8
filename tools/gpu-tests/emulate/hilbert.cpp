// Checks hilbert_index (src/cuda/hilbert.cuh, the query order of order.cu)
// on whole grids, dim = 1..8 and bits up to 2^16 cells: the indices are a
// permutation of 0 .. 2^(dim bits) - 1 (every cell has its own place), and
// the cells at consecutive places share a face (differ by one in one
// coordinate), which is what makes a run of the order one connected region.
#include "hilbert.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>

int main()
{
  int failures = 0, grids = 0;
  for (int dim = 1; dim <= 8; dim++)
    for (int bits = 1; dim * bits <= 16; bits++) {
      const uint64_t cells = UINT64_C(1) << (dim * bits), side = UINT64_C(1) << bits;
      std::vector<int64_t> at(cells, -1); /* the cell (its number) at each place */
      bool ok = true;
      for (uint64_t c = 0; c < cells && ok; c++) {
        uint64_t cell[8];
        for (int k = 0; k < dim; k++) cell[k] = c >> (k * bits) & (side - 1);
        const uint64_t place = kdegpu::hilbert_index(cell, dim, bits);
        if (place >= cells || at[place] != -1) {
          std::printf("FAIL dim=%d bits=%d: cell %llu at place %llu, taken or out of range\n",
                      dim, bits, (unsigned long long) c, (unsigned long long) place);
          ok = false;
        } else {
          at[place] = (int64_t) c;
        }
      }
      for (uint64_t p = 1; p < cells && ok; p++) {
        uint64_t steps = 0;
        for (int k = 0; k < dim; k++) {
          const int64_t a = (int64_t) (at[p - 1] >> (k * bits) & (side - 1)),
                        b = (int64_t) (at[p] >> (k * bits) & (side - 1));
          steps += (uint64_t) std::llabs(a - b);
        }
        if (steps != 1) {
          std::printf("FAIL dim=%d bits=%d: places %llu and %llu are %llu steps apart\n", dim,
                      bits, (unsigned long long) (p - 1), (unsigned long long) p,
                      (unsigned long long) steps);
          ok = false;
        }
      }
      failures += !ok;
      grids++;
    }
  std::printf("hilbert: %d grids, %d failures\n", grids, failures);
  return failures != 0;
}
