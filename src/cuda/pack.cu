/*
 * pack.cu: putting points where the kernels read them: the query packing
 * kernel (a raw query batch whitened, centred, scaled and laid out on the
 * device) and the host packers of the training set, one per storage
 * layout. Exports select_pack_kernel and the packers (model.cuh).
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "model.cuh"
#include "numeric.cuh"
#include "host_threads.cuh"
#include "tuning.cuh"
#include "spatial.h"

namespace kdegpu {

/* Columns c0 .. c0 + 7 of a packed row (zero past dim and for padding
 * rows). Raw rows are whitened to twice double's precision (whiten_exact),
 * whitened ones come with their lo parts where the model reads them
 * (raw_lo), and the coordinates are then centred and scaled as the
 * training points were (storage_coordinate): an anchored model subtracts
 * its anchors from hi + lo, so that a query thousands of bandwidths from
 * the centre keeps double's precision relative to its distance from a
 * unit. */
constexpr int kPackColumns = 8;
template <typename T>
__device__ __forceinline__ void pack_columns(const kde_pack_args<T> &a, int64_t row,
                                             int c0, T (&v)[kPackColumns])
{
  constexpr int C = kPackColumns;
  double z[C], z_lo[C];
#pragma unroll
  for (int u = 0; u < C; u++) z[u] = z_lo[u] = 0;
  if (c0 >= a.dim) {
    /* padding dimensions of the tensor-core layout: zeros */
  } else if (row < a.rows && a.transform != NULL) {
#pragma unroll
    for (int u = 0; u < C; u++)
      if (c0 + u < a.dim)
        whiten_exact(a.raw, a.ldr, row, a.dim, a.center, a.transform, c0 + u, z[u], z_lo[u]);
  } else if (row < a.rows) {
#pragma unroll
    for (int u = 0; u < C; u++)
      if (c0 + u < a.dim) {
        z[u] = a.raw[(int64_t) (c0 + u) * a.ldr + row];
        if (a.raw_lo != NULL) z_lo[u] = a.raw_lo[(int64_t) (c0 + u) * a.ldr + row];
      }
  }
#pragma unroll
  for (int u = 0; u < C; u++) {
    double hi = 0.0, lo = 0.0;
    if (row < a.rows && c0 + u < a.dim)
      storage_coordinate(z[u], z_lo[u], a.model_center[c0 + u], a.scale, hi, lo);
    v[u] = (T) hi;
    /* an anchored model: the rest, in the rows after the query's */
    if (a.anchored && c0 + u < a.dim)
      a.dst[(int64_t) (a.dim + c0 + u) * a.ldq + row] = (T) ((hi - (double) v[u]) + lo);
  }
}

/* Packs a row, 8 columns at a time in registers, its values multiplied by
 * shrink in the wide tensor-core layout (TC_WIDE). Returns |row|^2 of the
 * unshrunk values; most: their largest magnitude. */
template <typename T, bool TC_WIDE>
__device__ __forceinline__ double pack_row(const kde_pack_args<T> &a, int64_t row,
                                           float shrink, float &most)
{
  constexpr int C = kPackColumns;
  const int out_dims = TC_WIDE ? 16 * a.k16 : a.dim;
  double norm2 = 0;
  most = 0.0f;
  for (int c0 = 0; c0 < out_dims; c0 += C) {
    T v[C];
    pack_columns(a, row, c0, v);
#pragma unroll
    for (int u = 0; u < C; u++) {
      norm2 += (double) v[u] * (double) v[u];
      most = fmaxf(most, fabsf((float) v[u]));
    }
    if (TC_WIDE) {
      uint32_t *tile = reinterpret_cast<uint32_t *>(a.dst) + (row / 16) * a.k16 * 256;
#pragma unroll
      for (int u = 0; u < C; u += 2) {
        uint32_t big[2], small[2];
        f16_split2((float) v[u] * shrink, big[0], small[0]);
        f16_split2((float) v[u + 1] * shrink, big[1], small[1]);
        uint32_t *at = tile + tc_wide_query_word(row % 16, c0 + u);
        at[0] = big[0] | big[1] << 16;
        at[128] = small[0] | small[1] << 16;
      }
    } else {
#pragma unroll
      for (int u = 0; u < C; u++)
        if (c0 + u < out_dims) a.dst[(int64_t) (c0 + u) * a.ldq + row] = v[u];
    }
  }
  return norm2;
}

/* One thread per row. In the wide tensor-core layout a row beyond
 * kF16Limit (rare: thousands of bandwidths out) is packed again, scaled
 * down by a power of two, and its scale goes after the fragments. */
template <typename T, bool TC_WIDE>
__global__ void kde_pack_kernel(const kde_pack_args<T> a)
{
  const int64_t row = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= a.ldq) return;
  float most;
  const double norm2 = pack_row<T, TC_WIDE>(a, row, 1.0f, most);
  if (TC_WIDE) {
    float row_scale = 1.0f;
    if (!(most < kF16Limit)) {
      int e = 0;
      (void) frexpf(most, &e); /* most < 2^e */
      row_scale = ldexpf(1.0f, e - kF16LimitLog2);
      (void) pack_row<T, TC_WIDE>(a, row, 1.0f / row_scale, most);
    }
    reinterpret_cast<float *>(a.dst)[tc_wide_scale_offset(a.ldq, a.k16) + row] = row_scale;
  }
  if (row < a.rows) a.offset[row] = 0.5 * norm2;
  for (int k = 0; k < a.n_discrete; k++) /* mixed data: the codes as they are */
    a.dst[(a.code_row + k) * a.ldq + row] =
        row < a.rows ? (T) a.raw[(int64_t) (a.dim + k) * a.ldr + row] : (T) 0;
}

template <typename T> kde_pack_fn<T> select_pack_kernel(int layout)
{
  if constexpr (std::is_same<T, float>::value) {
    if (layout == KDE_LAYOUT_TC_WIDE) return kde_pack_kernel<T, true>;
  }
  return kde_pack_kernel<T, false>;
}
template kde_pack_fn<float> select_pack_kernel<float>(int);
template kde_pack_fn<double> select_pack_kernel<double>(int);

/* Coordinate k of training point j as every layout stores it: centred on
 * the training mean and scaled (the packing kernel does the same to the
 * queries), as hi + lo (storage_coordinate). */
static void train_coordinate(const kde_training_set *train, const kde_cuda_model *model,
                             int64_t j, int64_t k, double &hi, double &lo)
{
  const int64_t at = k * train->n_train + j;
  storage_coordinate(train->train[at],
                     train->residual != NULL ? (double) train->residual[at] : 0.0,
                     model->center[k], model->scale, hi, lo);
}
static double train_coordinate(const kde_training_set *train,
                               const kde_cuda_model *model, int64_t j, int64_t k)
{
  double hi, lo;
  train_coordinate(train, model, j, k, hi, lo);
  return hi;
}

/* aux of the tensor-core layouts: log2 w - |x|^2 / 2, with norm2 = |x|^2 of
 * the stored float coordinates; -inf for a padding point. */
static float expanded_aux(const kde_training_set *train, int64_t j, double norm2)
{
  return j < train->n_train ? (float) (train->log_weight[j] * kLog2e - 0.5 * norm2)
                            : -INFINITY;
}

/* Whether every training coordinate lies within kF16Limit, as the wide
 * tensor-core layout needs (queries are scaled per row; points are not). */
int train_fits_f16(const kde_training_set *train, const kde_cuda_model *model)
{
  std::atomic<int> fits(1); /* no allocation: nothing to throw into C */
  parallel_ranges(train->n_train, 1, train->host_threads, [&](int64_t first, int64_t last) {
    for (int64_t k = 0; k < model->dim && fits.load(std::memory_order_relaxed); k++)
      for (int64_t j = first; j < last; j++)
        if (!(fabsf((float) train_coordinate(train, model, j, k)) < kF16Limit)) {
          fits.store(0, std::memory_order_relaxed);
          break;
        }
  });
  return fits.load();
}

/* The largest |x|^2 over the training points, in storage coordinates
 * (NaN never: the data are finite). */
double train_max_norm2(const kde_training_set *train, const kde_cuda_model *model)
{
  std::atomic<double> best(0.0); /* no allocation: nothing to throw into C */
  parallel_ranges(train->n_train, 4096, train->host_threads, [&](int64_t first, int64_t last) {
    double local = 0;
    for (int64_t j = first; j < last; j++) {
      double norm2 = 0;
      for (int64_t k = 0; k < model->dim; k++) {
        const double v = train_coordinate(train, model, j, k);
        norm2 += v * v;
      }
      if (norm2 > local) local = norm2;
    }
    double seen = best.load();
    while (local > seen && !best.compare_exchange_weak(seen, local)) {
    }
  });
  return best.load();
}

/* Wide tensor-core storage tiles: big and small fp16 parts of the
 * coordinates in B fragment order, then aux = log2 w - |x|^2 / 2 of the
 * float coordinates. Padding (dimensions up to 16 k16, null points) is
 * zero, aux -inf. Reads the column-major input one column at a time. */
int pack_train_tc_wide(const kde_training_set *train,
                              const kde_cuda_model *model, uint32_t *dst)
{
  const int64_t n = train->n_train, d = model->dim;
  const int64_t n_tiles = model->n_points / kTileWidth;
  memset(dst, 0, (size_t) n_tiles * model->tile_elems * sizeof(uint32_t));
  /* tile by tile, so that each tile is written while it is in cache */
  parallel_ranges(n_tiles, 1, train->host_threads, [&](int64_t first, int64_t last) {
    for (int64_t tile = first; tile < last; tile++) {
      uint32_t *words = dst + tile * model->tile_elems;
      const int64_t j0 = tile * kTileWidth;
      double norm2[kTileWidth] = {0};
      for (int64_t k = 0; k < d; k++) {
        for (int64_t jj = 0; jj < kTileWidth && j0 + jj < n; jj++) {
          const float v = (float) train_coordinate(train, model, j0 + jj, k);
          uint32_t big, small;
          f16_split2(v, big, small);
          uint32_t *at = words + tc_wide_train_word((int) jj, k);
          at[0] |= big << (16 * (k % 2));
          at[2] |= small << (16 * (k % 2));
          norm2[jj] += (double) v * v;
        }
      }
      uint32_t *aux = words + (int64_t) model->k16 * 512;
      for (int64_t jj = 0; jj < kTileWidth; jj++)
        aux[jj] = float_bits(expanded_aux(train, j0 + jj, norm2[jj]));
    }
  });
  return 0;
}

/* Small-d tensor-core storage (see kde_tc_small_kernel): per n8 tile and
 * lane (g, t), point g's 8 bfloat16 entries of lane t, packed in pairs (low
 * half first). aux = log2 w - |x|^2 / 2 of the float coordinates; a null
 * or zero-weight point has aux pieces (-inf, 0, 0), so its pairs are -inf. */
void pack_train_tc_small(const kde_training_set *train,
                                const kde_cuda_model *model, uint32_t *dst)
{
  const int64_t n = train->n_train, d = model->dim;
  memset(dst, 0, (size_t) model->n_points * kTcPointWords * sizeof(uint32_t));
  parallel_ranges(model->n_points, 8, train->host_threads, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; j++) {
      uint32_t piece[4][3] = {{0}}; /* coordinates 0..d-1, aux in 3 */
      double norm2 = 0;
      for (int64_t k = 0; k < d && j < n; k++) {
        const float v = (float) train_coordinate(train, model, j, k);
        bf16_split3(v, piece[k]);
        norm2 += (double) v * v;
      }
      bf16_split3(expanded_aux(train, j, norm2), piece[3]);
      /* point j: n8 tile j / 8, column g = j % 8, lanes 4 g + t */
      uint32_t *lanes = dst + (j / 8) * 8 * kTcPointWords + (j % 8) * kTcPointWords;
      for (int t = 0; t < 4; t++) {
        if (t < 3 && t >= d) continue;
        for (int r = 0; r < 4; r++)
          lanes[4 * t + r] = tc_point_entry(piece[t], t, 2 * r) |
                             tc_point_entry(piece[t], t, 2 * r + 1) << 16;
      }
    }
  });
}

/* The boxes of the model's runs of kAnchorPoints positions (model.cuh's
 * `anchored`): of the points' coordinates, widened by what a double fit's
 * residuals add; runs past the last point (padding) take the box before. */
void anchor_boxes(const kde_training_set *train, const kde_cuda_model *model, double *lo,
                  double *hi)
{
  const int64_t d = model->dim, n = train->n_train;
  kde_tile_boxes(train->train, n, d, kAnchorPoints, train->host_threads, lo, hi);
  if (train->residual != NULL)
    kde_tile_boxes_widen(train->residual, n, d, kAnchorPoints, train->host_threads, lo, hi);
  for (int64_t r = (n + kAnchorPoints - 1) / kAnchorPoints; r < model->n_points / kAnchorPoints;
       r++)
    for (int64_t k = 0; k < d; k++) {
      lo[r * d + k] = r > 0 ? lo[(r - 1) * d + k] : 0.0;
      hi[r * d + k] = r > 0 ? hi[(r - 1) * d + k] : 0.0;
    }
}

/* The anchors: per run of kAnchorPoints positions the centre of its box
 * (lo, hi: anchor_boxes) in storage coordinates, rounded to T as hi + lo
 * (lo = 0 in double). A point is stored as its coordinate minus its
 * anchor, a query's hi and lo parts (kde_pack_kernel) minus the anchor's
 * in the kernels: each rounding is then relative to a distance from the
 * run, not to where the data sit. */
template <typename T>
void point_anchors(const kde_cuda_model *model, const double *lo, const double *hi, T *dst)
{
  const int64_t d = model->dim;
  for (int64_t r = 0; r < model->n_points / kAnchorPoints; r++)
    for (int64_t k = 0; k < d; k++) {
      const double mid = 0.5 * lo[r * d + k] + 0.5 * hi[r * d + k];
      const double anchor = (mid - model->center[k]) * model->scale;
      dst[r * 2 * d + k] = (T) anchor;
      dst[r * 2 * d + d + k] = (T) (anchor - (double) dst[r * 2 * d + k]);
    }
}

template void point_anchors<float>(const kde_cuda_model *, const double *, const double *,
                                   float *);
template void point_anchors<double>(const kde_cuda_model *, const double *, const double *,
                                    double *);

/* Pack the training set: storage tiles of 32 points, dimension-major, then
 * the aux row, and for an adaptive model a row of 1 / lambda^2 (in any
 * coordinate units: s^2 scales with the coordinates, lambda does not);
 * null points (coordinates 0, weight 0, scale 1) pad to n_points. */
template <typename T>
void pack_train(const kde_training_set *train, const kde_cuda_model *model,
                const T *anchors, T *dst)
{
  const int64_t n = train->n_train, d = model->dim, codes = d + 1 + model->adaptive,
                rows = codes + model->n_discrete;
  const int lse = kernel_sums_logs(model->kernel);
  /* tile by tile (each written while it is in cache) */
  parallel_ranges(model->n_points, kTileWidth, train->host_threads,
                  [&](int64_t first, int64_t last) {
    for (int64_t j0 = first; j0 < last; j0 += kTileWidth)
      for (int64_t k = 0; k < d; k++) {
        T *at = dst + (j0 / kTileWidth) * rows * kTileWidth + k * kTileWidth;
        /* an anchored model: relative to its run's anchor (point_anchors),
         * from the coordinate to twice double's precision as the queries'
         * (pack_columns) */
        const double anchor =
            anchors == NULL ? 0.0 : anchor_value(anchors + j0 / kAnchorPoints * 2 * d, d, k);
        for (int64_t jj = 0; jj < kTileWidth; jj++) {
          if (j0 + jj >= n) {
            at[jj] = (T) 0;
            continue;
          }
          double hi, lo;
          train_coordinate(train, model, j0 + jj, k, hi, lo);
          at[jj] = (T) (anchors == NULL ? hi : relative_to_anchor(hi, lo, anchor));
        }
      }
    for (int64_t j = first; j < last; j++) {
      T *tile = dst + (j / kTileWidth) * rows * kTileWidth + j % kTileWidth;
      double aux;
      if (j >= n) {
        aux = lse ? -INFINITY : 0.0;
      } else if (!lse) {
        aux = train->weight[j];
      } else {
        aux = train->log_weight[j] * kLog2e;
        if (model->expanded) {
          double norm2 = 0;
          for (int64_t k = 0; k < d; k++) {
            const double v = (double) tile[k * kTileWidth];
            norm2 += v * v;
          }
          aux -= 0.5 * norm2; /* -inf stays -inf */
        }
      }
      tile[d * kTileWidth] = (T) aux;
      if (model->adaptive) tile[(d + 1) * kTileWidth] = j < n ? (T) train->inv_scale2[j] : (T) 1;
      for (int64_t k = 0; k < model->n_discrete; k++) /* level ranks: exact in T */
        tile[(codes + k) * kTileWidth] = j < n ? (T) train->codes[k * n + j] : (T) 0;
    }
  });
}

template void pack_train<float>(const kde_training_set *, const kde_cuda_model *,
                                const float *, float *);
template void pack_train<double>(const kde_training_set *, const kde_cuda_model *,
                                 const double *, double *);

} // namespace kdegpu
