#!/usr/bin/env python3
"""Reference log-densities from scikit-learn and scipy, for bench/compare_sklearn.R.

Writes, into the folder given as the first argument (default
/tmp/kdegpu-compare):

  train_d{d}.csv   training points x1..xd and a weight w, d = 1..5
  query_d{d}.csv   query points x1..xd
  reference.csv    lib, kernel, d, param, weighted, query, logdens

lib "sklearn": KernelDensity(kernel, bandwidth = param, rtol = atol = 0,
leaf_size = n).score_samples(query), with sample_weight = w when weighted.
One leaf holding every training point makes sklearn sum every pair: with
its trees' default leaves (40), scikit-learn 1.2.1 returns small nonzero
densities (log-density about -38) at queries beyond every compact kernel's
support, where the density is exactly 0.
lib "scipy": gaussian_kde(train.T, bw_method = param, weights = w when
weighted).logpdf(query.T); param is a number (the factor) or "scott" /
"silverman".

bench/compare_sklearn.R converts each param to kdegpu's bw / H (the table in
README.md) and reports the largest absolute log-density difference.

Run with a python3 that has scikit-learn and scipy (Debian:
apt-get install python3-sklearn python3-scipy, then /usr/bin/python3):

  /usr/bin/python3 bench/compare_sklearn.py /tmp/kdegpu-compare
  Rscript bench/compare_sklearn.R /tmp/kdegpu-compare
"""
import csv
import os
import sys

import numpy as np
import scipy
import sklearn
from scipy.stats import gaussian_kde
from sklearn.neighbors import KernelDensity

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kdegpu-compare"
os.makedirs(out, exist_ok=True)

rng = np.random.default_rng(16)
N_TRAIN, N_QUERY = 400, 200
DIMS = [1, 2, 3, 4, 5]
SK_KERNELS = ["gaussian", "tophat", "epanechnikov", "exponential", "linear", "cosine"]
# sklearn's bandwidth is a scale: the support radius of the compact kernels.
# Two values: one where most queries see many points, one narrow.
SK_BANDWIDTHS = [1.3, 0.6]
SCIPY_BW = [0.4, 1.0, "scott", "silverman"]

rows = []
for d in DIMS:
    # A two-component mixture with correlated coordinates, offset from 0.
    a = rng.standard_normal((N_TRAIN, d))
    a[N_TRAIN // 2:] = 0.6 * a[N_TRAIN // 2:] + 2.5
    if d > 1:
        a[:, 1] += 0.7 * a[:, 0]
    x = a + 10.0
    w = rng.uniform(0.1, 2.0, N_TRAIN)
    q = x[rng.integers(0, N_TRAIN, N_QUERY)] + 0.8 * rng.standard_normal((N_QUERY, d))
    cols = [f"x{k + 1}" for k in range(d)]
    np.savetxt(os.path.join(out, f"train_d{d}.csv"), np.column_stack([x, w]),
               delimiter=",", header=",".join(cols + ["w"]), comments="", fmt="%.17g")
    np.savetxt(os.path.join(out, f"query_d{d}.csv"), q, delimiter=",",
               header=",".join(cols), comments="", fmt="%.17g")
    for weighted in (False, True):
        sw = w if weighted else None
        for kernel in SK_KERNELS:
            for h in SK_BANDWIDTHS:
                kde = KernelDensity(kernel=kernel, bandwidth=h, rtol=0, atol=0,
                                    leaf_size=N_TRAIN)
                kde.fit(x, sample_weight=sw)
                with np.errstate(all="ignore"):  # log(0), sklearn's NaN
                    ld = kde.score_samples(q)
                rows += [("sklearn", kernel, d, h, int(weighted), i + 1, v)
                         for i, v in enumerate(ld)]
        for bw in SCIPY_BW:
            kde = gaussian_kde(x.T, bw_method=bw, weights=sw)
            ld = kde.logpdf(q.T)
            rows += [("scipy", "gaussian", d, bw, int(weighted), i + 1, v)
                     for i, v in enumerate(ld)]

with open(os.path.join(out, "reference.csv"), "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["lib", "kernel", "d", "param", "weighted", "query", "logdens"])
    for r in rows:
        wr.writerow(r[:-1] + (repr(float(r[-1])),))

print(f"scikit-learn {sklearn.__version__}, scipy {scipy.__version__}, numpy {np.__version__}: "
      f"{len(rows)} log-densities in {out}")
