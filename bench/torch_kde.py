"""PyTorch baseline for bench/gpu.R: exact Gaussian KDE log-densities with
torch.cdist + logsumexp, chunked over queries so the chunk x n matrix fits
in memory (unchunked it runs out of memory from n = m = 2e5).

usage: python3 bench/torch_kde.py n m d precision reps
prints: median seconds (after a warm-up) and the first log-density.
"""
import math
import sys
import time

import torch


def log_density(x, q, bw, chunk_elems):
    n, d = x.shape
    log_const = -math.log(n) - d * math.log(bw) - 0.5 * d * math.log(2 * math.pi)
    out = torch.empty(q.shape[0], dtype=q.dtype, device=q.device)
    chunk = max(1, chunk_elems // n)
    for start in range(0, q.shape[0], chunk):
        d2 = torch.cdist(q[start:start + chunk], x).square_()
        out[start:start + chunk] = torch.logsumexp(d2.mul_(-0.5 / bw ** 2), dim=1) + log_const
    return out


def main():
    n, m, d = int(float(sys.argv[1])), int(float(sys.argv[2])), int(sys.argv[3])
    dtype = torch.float32 if sys.argv[4] == "single" else torch.float64
    reps = int(sys.argv[5])
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, d, device="cuda", dtype=dtype, generator=gen)
    q = torch.randn(m, d, device="cuda", dtype=dtype, generator=gen)
    free, _ = torch.cuda.mem_get_info()
    chunk_elems = int(free * 0.25 / (3 * x.element_size()))
    result = log_density(x, q, 0.3, chunk_elems)  # warm-up
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        result = log_density(x, q, 0.3, chunk_elems)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"{times[len(times) // 2]:.6g} {result[0].item():.10g}")


if __name__ == "__main__":
    main()
