// Checks hilbert_index (src/cuda/hilbert.cuh, the query order of order.cu)
// on whole grids, dim = 1..8 and bits up to 2^16 cells: the indices are a
// permutation of 0 .. 2^(dim bits) - 1 (every cell has its own place), and
// the cells at consecutive places share a face (differ by one in one
// coordinate), which is what makes a run of the order one connected region.
// At the widths order.cu uses (hilbert_key_bits: 63 / dim bits, at most
// 52), sampled cells: the index below 2^(dim bits), Skilling's inverse
// (written here) gives the cell back, and the cell at the next index is a
// neighbour.
#include "hilbert.cuh"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

// The cell at `index` (Skilling's TransposetoAxes after the index's bits
// are dealt back to the coordinates).
static void hilbert_cell(uint64_t index, int dim, int bits, uint64_t *cell)
{
  for (int k = 0; k < dim; k++) cell[k] = 0;
  for (int bit = bits - 1, pos = dim * bits - 1; bit >= 0; bit--)
    for (int k = 0; k < dim; k++, pos--) cell[k] |= (index >> pos & 1u) << bit;
  if (dim == 1) return;
  const uint64_t top = UINT64_C(1) << (bits - 1);
  uint64_t t = cell[dim - 1] >> 1; /* Gray decode */
  for (int k = dim - 1; k > 0; k--) cell[k] ^= cell[k - 1];
  cell[0] ^= t;
  for (uint64_t q = 2; q != top << 1; q <<= 1) { /* redo the excess work */
    const uint64_t p = q - 1;
    for (int k = dim - 1; k >= 0; k--) {
      if (cell[k] & q) {
        cell[0] ^= p;
      } else {
        t = (cell[0] ^ cell[k]) & p;
        cell[0] ^= t;
        cell[k] ^= t;
      }
    }
  }
}

static int sampled_widths()
{
  int failures = 0;
  std::mt19937_64 rng(7);
  for (int dim = 1; dim <= 8; dim++) {
    const int bits = kdegpu::hilbert_key_bits(dim);
    const uint64_t side = UINT64_C(1) << bits, places = UINT64_C(1) << (dim * bits);
    int bad = 0;
    for (int sample = 0; sample < 100000 && bad == 0; sample++) {
      uint64_t cell[8], copy[8], back[8], next[8];
      for (int k = 0; k < dim; k++) {
        /* every tenth sample at the grid's corners and edges */
        cell[k] = sample % 10 == 0 ? (rng() & 1u ? side - 1 : 0) : rng() & (side - 1);
        copy[k] = cell[k];
      }
      const uint64_t place = kdegpu::hilbert_index(copy, dim, bits);
      hilbert_cell(place, dim, bits, back);
      uint64_t steps = 0;
      if (place + 1 < places) {
        hilbert_cell(place + 1, dim, bits, next);
        for (int k = 0; k < dim; k++)
          steps += next[k] > cell[k] ? next[k] - cell[k] : cell[k] - next[k];
      } else {
        steps = 1;
      }
      bool same = place < places;
      for (int k = 0; k < dim; k++) same = same && back[k] == cell[k];
      if (!same || steps != 1) {
        std::printf("FAIL dim=%d bits=%d: place %llu %s, next cell %llu steps away\n", dim, bits,
                    (unsigned long long) place, same ? "inverts" : "out of range or not inverted",
                    (unsigned long long) steps);
        bad = 1;
      }
    }
    failures += bad;
  }
  return failures;
}

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
  const int sampled = sampled_widths();
  std::printf("hilbert: 8 sampled grids at order.cu's widths, %d failures\n", sampled);
  return failures + sampled != 0;
}
