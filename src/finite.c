/*
 * The finiteness scan of R's input matrices, on every allowed core: at
 * 1e6 x 64 a serial scan took a noticeable part of a GPU evaluation, and
 * it runs twice (R's check names the bad element, .Call's guards it).
 */
#include <math.h>
#include <string.h>

#include "finite.h"
#include "threads.h"

/* Values per task; a scan of fewer runs on the calling thread. */
#define SCAN_BLOCK ((int64_t) 1 << 16)

/* Whether x[begin..end) holds a value that is not finite (exponent bits
 * all ones): a branch-free loop that vectorises. */
static int block_has_nonfinite(const double *x, int64_t begin, int64_t end)
{
  uint64_t any = 0;
  for (int64_t i = begin; i < end; i++) {
    uint64_t bits;
    memcpy(&bits, x + i, sizeof bits);
    any |= ((bits >> 52) & 0x7ff) == 0x7ff;
  }
  return any != 0;
}

static int64_t scan_block(const double *x, int64_t begin, int64_t end)
{
  if (!block_has_nonfinite(x, begin, end)) return -1;
  for (int64_t i = begin; i < end; i++)
    if (!isfinite(x[i])) return i;
  return -1;
}

int64_t kde_first_nonfinite(const double *x, int64_t n, int threads)
{
  const int64_t n_blocks = (n + SCAN_BLOCK - 1) / SCAN_BLOCK;
  int64_t first_bad_block = n_blocks;
  if (n_blocks <= 1) return scan_block(x, 0, n);
  /* which block holds the first bad value; then where in it */
#pragma omp parallel for num_threads(kde_thread_count_for(threads, (double) n)) \
    schedule(static) reduction(min : first_bad_block)
  for (int64_t block = 0; block < n_blocks; block++) {
    const int64_t begin = block * SCAN_BLOCK;
    const int64_t end = begin + SCAN_BLOCK < n ? begin + SCAN_BLOCK : n;
    if (block < first_bad_block && block_has_nonfinite(x, begin, end))
      first_bad_block = block;
  }
  if (first_bad_block == n_blocks) return -1;
  return scan_block(x, first_bad_block * SCAN_BLOCK,
                    first_bad_block * SCAN_BLOCK + SCAN_BLOCK < n
                        ? first_bad_block * SCAN_BLOCK + SCAN_BLOCK : n);
}
