#!/usr/bin/env python3
"""scikit-learn's kd-tree KernelDensity on the data of bench/cpu_prune.R.

  /usr/bin/python3 bench/sklearn_tree.py DIR BANDWIDTH RTOL [RTOL ...]

Reads DIR/train.csv and DIR/query.csv (no header, one point per row), fits
KernelDensity(kernel="gaussian", algorithm="kd_tree", bandwidth, rtol, atol=0)
and writes DIR/sklearn_rtol<RTOL>.csv: the log-density at every query, and
DIR/sklearn_times.csv: rtol, fit and score seconds (one run each; sklearn
runs on one thread).
"""
import os
import sys
import time

import numpy as np
from sklearn.neighbors import KernelDensity

folder, bandwidth = sys.argv[1], float(sys.argv[2])
x = np.loadtxt(os.path.join(folder, "train.csv"), delimiter=",", ndmin=2)
q = np.loadtxt(os.path.join(folder, "query.csv"), delimiter=",", ndmin=2)
with open(os.path.join(folder, "sklearn_times.csv"), "w") as times:
    times.write("rtol,fit_s,score_s\n")
    for rtol in sys.argv[3:]:
        t0 = time.perf_counter()
        kde = KernelDensity(kernel="gaussian", algorithm="kd_tree", bandwidth=bandwidth,
                            rtol=float(rtol), atol=0).fit(x)
        t1 = time.perf_counter()
        with np.errstate(all="ignore"):
            ld = kde.score_samples(q)
        t2 = time.perf_counter()
        np.savetxt(os.path.join(folder, f"sklearn_rtol{rtol}.csv"), ld, fmt="%.17g")
        times.write(f"{rtol},{t1 - t0:.3f},{t2 - t1:.3f}\n")
        times.flush()
        print(f"sklearn kd_tree rtol={rtol}: fit {t1 - t0:.2f} s, score {t2 - t1:.2f} s", flush=True)
