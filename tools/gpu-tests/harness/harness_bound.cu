/*
 * tools/gpu-tests/harness/harness_bound.cu: how many Gaussian pairs per
 * second a kernel that does nothing but each pair's own arithmetic can
 * reach, with a share of the exponentials on the FMA pipe (issue 32's
 * "above the exp unit's limit"): an upper bound for every real kernel of
 * that form, which also loads tiles, keeps a running max and merges.
 *
 *   harness bound       d = 1, 2, 3; both forms; P of every 32 exponentials
 *                       as numeric.cuh's poly_exp2 (P = 0, 2, ..., 12), the
 *                       last P of 32 or spread evenly
 *   BOUND_CSV=file      the rows also as CSV (tools/gpu-session.sh's step
 *                       bound adds the card, date and commit)
 *
 * A thread holds 4 queries; a block's 256 points (x, aux) sit in shared
 * memory, read as one float4 a point (a broadcast), and are swept again
 * and again; each pair is
 *   expanded:   s = aux + q.x                  d FMAs
 *   difference: s = aux - sum (q_k - x_k)^2    d subtracts, d FMAs
 *   mma:        s from bfloat16 tensor-core products (mma.sync m16n8k16:
 *               128 pairs a warp, two chained MMAs per 4 pairs a lane,
 *               the 32 k entries of the d = 3 tensor-core form)
 * then exp2(s) and one add. Nothing else per pair: no running max, no
 * compensation, no copies. The "lean" polynomial is poly_exp2 without its
 * range clamps (poly_exp2_in_range: wrong outside [-125, 126]; the bound it
 * gives is the more generous). run.sh counts each kernel's instructions a
 * pair from its SASS (bound_sass.awk), for the issue slots' limit. The SM clock is measured in the kernel (clock64 against the
 * global timer), so the exp unit's limit is stated at the clock run.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/numeric.cuh"

namespace {

constexpr int kThreads = 256, kPoints = 256, kQ = 4, kGroup = 8;


/* P of every 32 exponentials on the FMA pipe: the last P, or (SPREAD)
 * spread evenly, the schedulers then interleaving them with the exp unit's */
template <int P, bool LEAN, bool SPREAD>
__device__ __forceinline__ float bound_exp2(float v, int at)
{
  const bool poly = SPREAD ? (at + 1) * P / 32 > at * P / 32 : at >= 32 - P;
  return poly ? (LEAN ? kdegpu::poly_exp2_in_range(v) : kdegpu::poly_exp2(v))
              : kdegpu::fast_exp2(v);
}

/* The mma form: each warp's 16 queries x 8 points a step, as the d = 3
 * tensor-core form (kernel_tc_small.cu) two chained k16 MMAs (its kTcSteps),
 * 32 steps of points (bfloat16 pairs, one 16-byte load a lane) in shared
 * memory, swept 8 times a sweep so that a lane sums as many pairs as in the
 * FMA forms. */
template <int P, bool LEAN, bool SPREAD>
__device__ __forceinline__ void mma_sweeps(const uint4 *__restrict__ mma_points,
                                           const float *__restrict__ queries, int sweeps,
                                           float (&acc)[kQ])
{
  __shared__ uint4 steps[32 * 32];
  for (int k = threadIdx.x; k < 32 * 32; k += kThreads)
    steps[k] = mma_points[(blockIdx.x % 64) * 32 * 32 + k];
  __syncthreads();
  const int tid = blockIdx.x * kThreads + threadIdx.x, lane = threadIdx.x % 32;
  unsigned a[2][4];
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const __nv_bfloat162 h =
        __floats2bfloat162_rn(queries[tid * 16 + 2 * j], queries[tid * 16 + 2 * j + 1]);
    a[j / 4][j % 4] = *reinterpret_cast<const unsigned *>(&h);
  }
  for (int s = 0; s < 8 * sweeps; s++) {
#pragma unroll 2
    for (int g = 0; g < 32; g += kGroup) {
#pragma unroll
      for (int p = 0; p < kGroup; p++) {
        const uint4 b = steps[(g + p) * 32 + lane];
        float v[4];
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
            : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
            : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(b.x), "r"(b.y),
              "f"(0.0f));
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(v[0]), "+f"(v[1]), "+f"(v[2]), "+f"(v[3])
            : "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "r"(b.z), "r"(b.w));
#pragma unroll
        for (int i = 0; i < kQ; i++) acc[i] += bound_exp2<P, LEAN, SPREAD>(v[i], p * kQ + i);
      }
    }
  }
}

/* FORM 0 expanded, 1 difference, 2 mma; LEAN: poly_exp2_in_range for the
 * polynomial share; SPREAD: the polynomials spread evenly */
template <int D, int FORM, int P, bool LEAN, bool SPREAD>
__global__ void __launch_bounds__(kThreads) pair_bound(const float4 *__restrict__ points,
                                                       const uint4 *__restrict__ mma_points,
                                                       const float *__restrict__ queries,
                                                       int sweeps, float *out,
                                                       long long *clock_ticks,
                                                       unsigned long long *nanoseconds)
{
  __shared__ float4 tile[kPoints];
  if (FORM != 2) tile[threadIdx.x] = points[(blockIdx.x % 64) * kPoints + threadIdx.x];
  __syncthreads();
  float q[kQ][D], acc[kQ];
  const int tid = blockIdx.x * kThreads + threadIdx.x;
#pragma unroll
  for (int i = 0; i < kQ; i++) {
#pragma unroll
    for (int k = 0; k < D; k++) q[i][k] = queries[(tid * kQ + i) * D + k];
    acc[i] = 0.0f;
  }
  long long c0 = 0;
  unsigned long long t0 = 0;
  if (tid == 0) {
    c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  }
  if constexpr (FORM == 2) mma_sweeps<P, LEAN, SPREAD>(mma_points, queries, sweeps, acc);
  for (int s = 0; s < (FORM == 2 ? 0 : sweeps); s++) {
#pragma unroll 2
    for (int g = 0; g < kPoints; g += kGroup) {
#pragma unroll
      for (int p = 0; p < kGroup; p++) {
        const float4 x = tile[g + p];
        const float xs[3] = {x.x, x.y, x.z};
#pragma unroll
        for (int i = 0; i < kQ; i++) {
          float v = x.w;
#pragma unroll
          for (int k = 0; k < D; k++) {
            if (FORM == 0) {
              v = fmaf(q[i][k], xs[k], v);
            } else {
              const float u = q[i][k] - xs[k];
              v = fmaf(-u, u, v);
            }
          }
          acc[i] += bound_exp2<P, LEAN, SPREAD>(v, p * kQ + i);
        }
      }
    }
  }
  if (tid == 0) {
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    *clock_ticks = clock64() - c0;
    *nanoseconds = t1 - t0;
  }
  out[tid] = acc[0] + acc[1] + acc[2] + acc[3];
}

const char *form_name(int form)
{
  return form == 0 ? "expanded" : form == 1 ? "difference" : "mma";
}

struct bound_result {
  double pairs_per_s, mhz;
};

template <int D, int FORM, int P, bool LEAN, bool SPREAD>
bound_result run_bound(const float4 *points, const uint4 *mma_points, const float *queries,
                       float *out, long long *ticks,
                       unsigned long long *ns, int blocks, int sweeps)
{
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  bound_result r = {0, 0};
  for (int rep = 0; rep < 4; rep++) {
    cudaEventRecord(a);
    pair_bound<D, FORM, P, LEAN, SPREAD><<<blocks, kThreads>>>(points, mma_points, queries, sweeps, out,
                                                        ticks, ns);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t;
    cudaEventElapsedTime(&t, a, b);
    if (rep > 0) ms.push_back(t);
  }
  long long h_ticks;
  unsigned long long h_ns;
  cudaMemcpy(&h_ticks, ticks, sizeof h_ticks, cudaMemcpyDeviceToHost);
  cudaMemcpy(&h_ns, ns, sizeof h_ns, cudaMemcpyDeviceToHost);
  std::sort(ms.begin(), ms.end());
  const double pairs = (double) blocks * kThreads * kQ * kPoints * sweeps;
  r.pairs_per_s = pairs / (ms[ms.size() / 2] * 1e-3);
  r.mhz = h_ns > 0 ? 1e3 * (double) h_ticks / (double) h_ns : 0;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return r;
}

struct bound_args {
  FILE *csv;
  const float4 *points;
  const uint4 *mma_points;
  const float *queries;
  float *out;
  long long *ticks;
  unsigned long long *ns;
  int blocks, sweeps, sms;
};

template <int D, int FORM, bool LEAN, bool SPREAD, int P>
void bound_row(const bound_args &g, double *best, int *best_p)
{
  const bound_result r = run_bound<D, FORM, P, LEAN, SPREAD>(
      g.points, g.mma_points, g.queries, g.out, g.ticks, g.ns, g.blocks, g.sweeps);
  const double limit = (double) g.sms * 16 * r.mhz * 1e6;
  const char *placement = P == 0 ? "none" : SPREAD ? "spread" : "last";
  printf("bound d=%d %-10s %-4s %-6s P=%2d/32: %.3e pairs/s at %4.0f MHz, %.2fx the exp "
         "unit's limit\n",
         D, form_name(FORM), LEAN ? "lean" : "poly", placement, P, r.pairs_per_s, r.mhz,
         r.pairs_per_s / limit);
  if (g.csv != NULL)
    fprintf(g.csv, "%s,%d,%s,%s,%d,%.4e,%.0f,%.4e,%.3f\n", form_name(FORM), D,
            LEAN ? "lean" : "poly_exp2", placement, P, r.pairs_per_s, r.mhz, limit,
            r.pairs_per_s / limit);
  if (r.pairs_per_s > *best) {
    *best = r.pairs_per_s;
    *best_p = P;
  }
}

/* P = 0 once (it has no placement), then 2 .. 12 of 32 placed both ways */
template <int D, int FORM, bool LEAN>
void bound_rows(const bound_args &g)
{
  double best = 0;
  int best_p = 0;
  bound_row<D, FORM, LEAN, false, 0>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 2>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 4>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 6>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 8>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 10>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, false, 12>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 2>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 4>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 6>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 8>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 10>(g, &best, &best_p);
  bound_row<D, FORM, LEAN, true, 12>(g, &best, &best_p);
  printf("best  d=%d %-10s %-4s: %.3e pairs/s (P=%d)\n", D, form_name(FORM),
         LEAN ? "lean" : "poly", best, best_p);
}

template <int D>
void bound_forms(const bound_args &g)
{
  bound_rows<D, 0, false>(g);
  bound_rows<D, 0, true>(g);
  bound_rows<D, 1, false>(g);
  bound_rows<D, 1, true>(g);
}

} // namespace

int bound_mode()
{
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pair_bound<3, 1, 12, false, false>,
                                                kThreads, 0);
  const int blocks = sms * std::max(per_sm, 1) * 4;
  /* points in a cube of side 2, aux in [-4, 0]; queries within it: every
   * exponent between about -30 and 4 (normal results, either form) */
  std::vector<float4> hp(64 * kPoints);
  unsigned state = 12345;
  auto uniform = [&state]() {
    state = state * 1664525u + 1013904223u;
    return (float) (state >> 8) / 16777216.0f;
  };
  for (auto &p : hp) p = make_float4(2 * uniform() - 1, 2 * uniform() - 1, 2 * uniform() - 1, -4 * uniform());
  /* bfloat16 pairs in [-1/4, 1/4] for the mma form: |s| <= 8 */
  std::vector<uint4> hm(64 * 32 * 32);
  auto bf16 = [&uniform]() {
    const float v = 0.5f * uniform() - 0.25f;
    unsigned bits;
    memcpy(&bits, &v, 4);
    return bits >> 16;
  };
  for (auto &b : hm)
    b = make_uint4(bf16() | bf16() << 16, bf16() | bf16() << 16, bf16() | bf16() << 16,
                   bf16() | bf16() << 16);
  /* a thread's 4 queries of 3 coordinates, or the mma form's 16 entries */
  const size_t nq = (size_t) blocks * kThreads * 16;
  std::vector<float> hq(nq);
  for (auto &v : hq) v = 2 * uniform() - 1;
  float4 *d_points = nullptr;
  uint4 *d_mma = nullptr;
  float *d_queries = nullptr, *d_out = nullptr;
  long long *d_ticks = nullptr;
  unsigned long long *d_ns = nullptr;
  const auto free_all = [&]() {
    cudaFree(d_points);
    cudaFree(d_mma);
    cudaFree(d_queries);
    cudaFree(d_out);
    cudaFree(d_ticks);
    cudaFree(d_ns);
  };
  if (cudaMalloc(&d_points, hp.size() * sizeof(float4)) != cudaSuccess ||
      cudaMalloc(&d_mma, hm.size() * sizeof(uint4)) != cudaSuccess ||
      cudaMalloc(&d_queries, nq * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&d_out, (size_t) blocks * kThreads * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&d_ticks, sizeof(long long)) != cudaSuccess ||
      cudaMalloc(&d_ns, sizeof(unsigned long long)) != cudaSuccess) {
    printf("FAIL bound: cudaMalloc\n");
    free_all();
    return 1;
  }
  cudaMemcpy(d_points, hp.data(), hp.size() * sizeof(float4), cudaMemcpyHostToDevice);
  cudaMemcpy(d_queries, hq.data(), nq * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_mma, hm.data(), hm.size() * sizeof(uint4), cudaMemcpyHostToDevice);
  const char *csv_path = getenv("BOUND_CSV");
  const bound_args g = {csv_path != NULL ? fopen(csv_path, "w") : NULL,
                        d_points, d_mma, d_queries, d_out, d_ticks, d_ns, blocks, 64, sms};
  if (g.csv != NULL)
    fprintf(g.csv, "form,d,polynomial,placement,poly_of_32,pairs_per_s,sm_clock_mhz,exp_limit,share_of_limit\n");
  printf("\n== bound: each pair's arithmetic alone, %d SMs, %d blocks of %d threads (%d a SM)\n",
         sms, g.blocks, kThreads, per_sm);
  bound_forms<1>(g);
  bound_forms<2>(g);
  bound_forms<3>(g);
  bound_rows<3, 2, false>(g);
  bound_rows<3, 2, true>(g);
  if (g.csv != NULL) fclose(g.csv);
  const cudaError_t err = cudaDeviceSynchronize();
  free_all();
  if (err != cudaSuccess) {
    printf("FAIL bound: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
