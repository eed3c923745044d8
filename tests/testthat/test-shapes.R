# The shapes users run beyond dense queries on normal data: a few queries
# against a larger fit (the GPU plans such a batch in chunks of units,
# src/cuda/plan.cu), data far from the origin, clustered data, and the
# Gaussian's form chosen by the call's tolerance. Against plain-R sums
# whose pair differences are taken in the data's own coordinates (exact to
# rounding relative to each pair's distance, whatever the data's extent).

test_that("a few queries (1, 10, 100) against a fit of 2e4 points match the reference, d = 1, 2, 3, 5", {
  for (be in eval_backends()) {
    for (d in c(1, 2, 3, 5)) {
      x <- ref_data(2e4, d, seed = 900 + d)
      for (m in c(1, 10, 100)) {
        q <- ref_queries(x, m, seed = 910 + m)
        for (k in c("gaussian", "epanechnikov")) {
          fit <- kde_on(be, x, kernel = k)
          lab <- be_label(be, k, sprintf("d = %d, m = %d", d, m))
          expect_log_density_equal(predict(fit, q, log = TRUE),
                                   ref_log_density(x, q, fit$H, k),
                                   tol = be$tol, label = lab)
        }
      }
    }
  }
})

test_that("CPU: a few queries share a fit's tiles among threads, the same bits at any thread count", {
  # 40 queries are 3 blocks of 16: each block's tiles are cut in parts that
  # depend on the blocks and tiles alone (src/kde_cpu.c, FEW_BLOCKS), and
  # the work (40 x 3e5 x 2) is enough for 2 threads
  x <- ref_data(3e5, 2, seed = 930)
  fit <- kde_gpu(x, backend = "cpu")
  q <- rbind(ref_queries(x, 38, seed = 931), colMeans(x) + c(30, 0), colMeans(x))
  by_threads <- lapply(1:2, function(t) {
    with_kde_options(list(kdegpu.threads = t), predict(fit, q, log = TRUE))
  })
  expect_identical(by_threads[[2]], by_threads[[1]])
  expect_log_density_equal(by_threads[[1]], ref_log_density(x, q, fit$H, "gaussian"),
                           tol = 1e-12, label = "CPU, 40 queries against 3e5 points")
  # 10 queries scattered over the data: one block whose box is the data's,
  # split into single queries with plans of their own (every pair before)
  set.seed(932)
  q10 <- matrix(rnorm(20), 10) %*% chol(cov(x)) + rep(colMeans(x), each = 10)
  expect_log_density_equal(predict(fit, q10, log = TRUE),
                           ref_log_density(x, q10, fit$H, "gaussian"), tol = 1e-12,
                           label = "CPU, 10 scattered queries")
  expect_lt(summary(fit)$pairs_share, 0.5)
})

test_that("CUDA: an evaluation of fewer pairs than a plan pays for takes the full sum", {
  skip_without_gpu()
  x <- ref_data(2e4, 3, seed = 940)
  # 1000 queries in the data's tail, which a plan narrows to the units near
  # them; 2e7 pairs: no plan by default
  set.seed(941)
  spread <- apply(x, 2, sd)
  q <- sweep(matrix(rnorm(3000, sd = 0.2), 1000, 3) * rep(spread, each = 1000), 2,
             colMeans(x) + 2 * spread, "+")
  old <- Sys.getenv("KDEGPU_PLAN_MIN_PAIRS")
  on.exit(Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = old))
  for (precision in c("single", "double")) {
    fit <- kde_gpu(x, precision = precision)
    lab <- paste(precision, "precision")
    Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
    by_default <- predict(fit, q, log = TRUE)
    expect_equal(summary(fit)$pairs_share, 1, label = lab)
    Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
    planned <- predict(fit, q, log = TRUE)
    expect_lt(summary(fit)$pairs_share, 0.9, label = lab)
    tol <- if (precision == "single") 1e-5 else 1e-12
    reference <- ref_log_density(x, q, fit$H, "gaussian")
    expect_log_density_equal(by_default, reference, tol = tol, label = paste(lab, "full sum"))
    expect_log_density_equal(planned, reference, tol = tol, label = paste(lab, "planned"))
    # one query block too: below its own threshold, the full sum; planned,
    # a query in the tail skips the units across the data
    Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
    tail_query <- rbind(colMeans(x) + 2 * spread)
    one <- predict(fit, tail_query, log = TRUE)
    expect_equal(summary(fit)$pairs_share, 1, label = paste(lab, "one query"))
    Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
    one_planned <- predict(fit, tail_query, log = TRUE)
    expect_lt(summary(fit)$pairs_share, 0.5, label = paste(lab, "one query planned"))
    reference <- ref_log_density(x, tail_query, fit$H, "gaussian")
    expect_log_density_equal(one, reference, tol = tol, label = paste(lab, "one query"))
    expect_log_density_equal(one_planned, reference, tol = tol,
                             label = paste(lab, "one query planned"))
  }
  # one query against 1.5e6 points in double (1.9e8 pairs for its block):
  # planned by default
  Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
  big <- ref_data(1.5e6, 3, seed = 942)
  fit <- kde_gpu(big, precision = "double")
  tail_query <- rbind(colMeans(big) + 2 * apply(big, 2, sd))
  one <- predict(fit, tail_query, log = TRUE)
  expect_lt(summary(fit)$pairs_share, 0.5, label = "1.5e6 points, one query")
  expect_log_density_equal(one, ref_log_density(big, tail_query, fit$H, "gaussian"),
                           tol = 1e-12, label = "1.5e6 points, one query")
})

test_that("CUDA: clustered fits are planned from fewer pairs than normal ones (the groups' share estimate)", {
  skip_without_gpu()
  # 20 clusters 200 apart, bw 0.25: a query keeps about a twentieth of the
  # units, so a plan pays from fewer pairs than on N(0, I) data, whose
  # estimate keeps them to the full sum
  set.seed(943)
  centres <- as.matrix(expand.grid(200 * (0:4), 200 * (0:3)))
  x <- centres[sample.int(20, 5e5, replace = TRUE), ] + matrix(rnorm(1e6), ncol = 2)
  old <- Sys.getenv("KDEGPU_PLAN_MIN_PAIRS", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS") else
    Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = old))
  Sys.unsetenv("KDEGPU_PLAN_MIN_PAIRS")
  # one block in double: 6.4e7 pairs (the normal threshold is 1.25e8)
  fit <- kde_gpu(x, bw = 0.25, precision = "double")
  q <- centres[c(1, 1, 1), ] + matrix(rnorm(6, sd = 0.5), 3, 2)
  got <- predict(fit, q, log = TRUE)
  expect_lt(summary(fit)$pairs_share, 0.2)
  expect_log_density_equal(got, exact_gaussian_log_density(x, q, 0.25), tol = 1e-12,
                           label = "clustered, one block, double")
  normal <- ref_data(5e5, 2, seed = 944)
  tail_query <- rbind(colMeans(normal) + 2 * apply(normal, 2, sd))
  normal_fit <- kde_gpu(normal, precision = "double")
  predict(normal_fit, tail_query, log = TRUE)
  expect_equal(summary(normal_fit)$pairs_share, 1, label = "normal, one block, double")
  # more blocks in single: 1.1e9 pairs (the normal threshold is 2e9), a
  # query inside each cluster and between neighbours, repeated
  single <- kde_gpu(x[1:2e5, ], bw = 0.25, precision = "single")
  between <- (centres[1:19, ] + centres[2:20, ]) / 2
  q <- rbind(centres, between)[rep(1:39, length.out = 5300), ] +
    matrix(rnorm(10600, sd = 0.5), ncol = 2)
  got <- predict(single, q, log = TRUE)
  expect_lt(summary(single)$pairs_share, 0.2)
  rows <- c(1:20, 21:39, 4001:4039)
  expect_log_density_equal(got[rows], exact_gaussian_log_density(x[1:2e5, ], q[rows, ], 0.25),
                           tol = 2e-5, label = "clustered, more blocks, single")
})

test_that("CUDA: a few queries against 3e5 points (a plan in chunks) match the reference within the tolerance", {
  skip_without_gpu()
  x <- ref_data(3e5, 3, seed = 920)
  # near the data, between, and far from it (few units visited)
  q_all <- rbind(ref_queries(x, 90, seed = 921), colMeans(x) + c(8, 0, 0),
                 colMeans(x) + c(40, 40, 40), matrix(rnorm(8 * 3, sd = 6), 8))
  for (prec in c("double", "single")) {
    for (k in c("gaussian", "exponential", "epanechnikov")) {
      fit <- kde_gpu(x, kernel = k, backend = "cuda", precision = prec)
      for (m in c(1, 10, 100)) {
        q <- q_all[seq_len(m), , drop = FALSE]
        ref <- ref_log_density(x, q, fit$H, k)
        lab <- sprintf("%s %s m = %d", prec, k, m)
        expect_log_density_equal(predict(fit, q, log = TRUE), ref,
                                 tol = if (prec == "double") 1e-12 else 1e-5, label = lab)
        # a loose tolerance skips more and stays within it, never above,
        # beside the precision's rounding of the exponent (in single about
        # 6e-8 D^2 at D bandwidths: the far queries)
        loose <- predict(fit, q, log = TRUE, tolerance = 1e-3)
        ok <- is.finite(ref)
        rounding <- (if (prec == "double") 1e-12 else 1e-5) * pmax(1, abs(ref[ok]))
        expect_true(all(loose[ok] <= ref[ok] + rounding), label = lab)
        expect_true(all(-expm1(loose[ok] - ref[ok]) <= 1e-3 + rounding), label = lab)
      }
    }
  }
})

test_that("CUDA: batches of many query blocks (refined in one kernel) keep the guarantee: densities and gradients, clustered data", {
  skip_without_gpu()
  # a batch refines in one kernel from 1024 query blocks (131,072 queries)
  # on; an evaluation takes about 16 batches: 3e6 queries make batches of
  # about 1,460 blocks
  set.seed(930)
  centres <- matrix(runif(8 * 3, -30, 30), 8)
  x <- centres[sample.int(8, 2e5, replace = TRUE), ] + matrix(rnorm(6e5), ncol = 3)
  m <- 3e6
  near <- x[sample.int(nrow(x), m / 2, replace = TRUE), ] + matrix(rnorm(3 * m / 2, sd = 0.3), ncol = 3)
  q <- rbind(near, matrix(runif(3 * m / 2, -40, 40), ncol = 3))
  for (prec in c("double", "single")) {
    fit <- kde_gpu(x, backend = "cuda", precision = prec, bw = 0.4)
    full <- predict(fit, q, log = TRUE, tolerance = 0)
    # the same pairs' values summed over fewer of them: the sums' rounding,
    # and far out the exponents' (each relative to a running max that
    # depends on which tiles came first: a few eps |log f|; in single 8e-4
    # at log f = -5,800 here)
    eps <- if (prec == "double") 2^-53 else 2^-24
    rounding <- (if (prec == "double") 1e-11 else 2e-5) + 8 * eps * abs(full)
    for (tol in c(NA, 1e-3)) {
      lab <- sprintf("%s, tolerance %s", prec, tol)
      pruned <- if (is.na(tol)) predict(fit, q, log = TRUE)
                else predict(fit, q, log = TRUE, tolerance = tol)
      allowed <- if (is.na(tol)) default_tolerance[[prec]] else tol
      # never above the full sum; a looser tolerance also admits the
      # faster forms, whose rounding (data 75 bandwidths from the origin)
      # it bounds as well where the queries lie within the data's extent
      # (below it, the near half: the expanded form's rounding grows with
      # |q|^2, and far queries lie beyond the data's R)
      above <- if (is.na(tol)) 0 else log1p(tol)
      expect_true(all(pruned <= full + above + rounding), label = lab)
      checked <- if (is.na(tol)) seq_len(m) else seq_len(m / 2)
      expect_true(all(-expm1(pruned[checked] - full[checked]) <= allowed + rounding[checked]),
                  label = lab)
      expect_lt(summary(fit)$pairs_share, 0.5)
    }
    if (prec == "double") {
      rows <- seq(1, m, by = 7)
      g_full <- predict(fit, q[rows, ], type = "gradient", log = TRUE, tolerance = 0)
      g <- predict(fit, q, type = "gradient", log = TRUE)[rows, ]
      scale <- pmax(1, sqrt(rowSums(g_full^2)))
      expect_lt(max(abs(g - g_full) / scale), 1e-9)
    }
  }
})

test_that("CUDA: a block's groups of 32 queries evaluate only the units they need: sparse and between-cluster queries, three kernels, d = 1..4", {
  skip_without_gpu()
  # 20 clusters: queries near points and scattered between the clusters,
  # 3,000 in all (24 query blocks: refined by the few blocks' kernels),
  # whose blocks' groups of 32 need different units (kernel_small.cuh's
  # masked_tile)
  for (d in 1:4) {
    set.seed(970 + d)
    centres <- matrix(runif(20 * d, 0, 400), 20)
    x <- centres[sample.int(20, 4e4, replace = TRUE), , drop = FALSE] +
      matrix(rnorm(4e4 * d), ncol = d)
    q <- rbind(x[sample.int(4e4, 1500), , drop = FALSE] + rnorm(1500 * d, sd = 0.5),
               centres[sample.int(20, 1500, replace = TRUE), , drop = FALSE] +
                 matrix(rnorm(1500 * d, sd = 30), ncol = d))
    for (k in c("gaussian", "exponential", "epanechnikov")) {
      for (prec in c("double", "single")) {
        lab <- sprintf("d = %d, %s, %s", d, k, prec)
        fit <- kde_gpu(x, bw = 0.3, kernel = k, backend = "cuda", precision = prec)
        full <- predict(fit, q, log = TRUE, tolerance = 0)
        got <- predict(fit, q, log = TRUE)
        expect_lt(summary(fit)$pairs_share, 0.5, label = lab)
        expect_identical(got == -Inf, full == -Inf, label = paste(lab, "zeros"))
        ok <- is.finite(full)
        eps <- if (prec == "double") 2^-53 else 2^-24
        # the same pairs' values summed over fewer of them (compact
        # kernels: the same pairs), each relative to a running max that
        # depends on which tiles came first
        rounding <- (if (prec == "double") 1e-11 else 2e-5) + 8 * eps * abs(full[ok])
        allowed <- if (k == "epanechnikov") 0 else default_tolerance[[prec]]
        expect_true(all(got[ok] <= full[ok] + rounding), label = paste(lab, "above"))
        expect_true(all(-expm1(got[ok] - full[ok]) <= allowed + rounding),
                    label = paste(lab, "below"))
      }
    }
  }
})

test_that("data offset by 1e6 bandwidths evaluate as at the origin", {
  for (be in eval_backends()) {
    for (d in c(1, 3)) {
      set.seed(930 + d)
      x <- matrix(rnorm(4000 * d), ncol = d)
      q <- rbind(x[1:50, , drop = FALSE], matrix(rnorm(50 * d), ncol = d))
      bw <- 0.2
      shift <- 1e6 * bw
      # the shifted values are rounded (to 3e-11 here): the reference takes
      # the same rounded points, their differences exact
      xs <- x + shift
      qs <- q + shift
      got <- predict(kde_on(be, xs, bw = bw), qs, log = TRUE)
      expect_log_density_equal(got, exact_gaussian_log_density(xs, qs, bw), tol = be$tol,
                               label = be_label(be, sprintf("d = %d offset 1e6 bw", d)))
    }
  }
})

# log sum_j w_j K_H(q - x_j) with the differences taken first in the data's
# own coordinates, then whitened (ref_log_density whitens the points
# first, which loses eps |z| of each coordinate far from the origin);
# leave_out: each query is the training point of its row, left out.
exact_log_density <- function(x, q, H, kernel, leave_out = FALSE) {
  d <- ncol(x)
  R_inverse <- backsolve(chol(H), diag(d))
  cst <- ref_constants(kernel, d)
  vapply(seq_len(nrow(q)), function(i) {
    z <- sweep(x, 2, q[i, ]) %*% R_inverse
    terms <- ref_log_profile(kernel, sqrt(rowSums(z^2)) / cst$a)
    if (leave_out) terms <- terms[-i]
    ref_log_sum_exp(terms) - log(length(terms))
  }, 0) + cst$log_c - sum(log(diag(chol(H))))
}

# The backends that compute in double: the CPU, and the CUDA backend's
# double precision where a GPU is usable.
double_backends <- function() Filter(function(be) be$precision == "double", eval_backends())

test_that("data thousands of bandwidths from their centre keep double's digits on both backends, leaving one out too", {
  # The whitened points keep eps |z| of each coordinate: 1-2e-13 of a
  # density here on both backends before each took what the whitening
  # lost: the CPU's offset mode (src/cpu_offsets.c) forms each block's
  # pairs relative to one of its queries from both sides' residuals, the
  # GPU stores its points relative to their runs' anchors from the same
  # residuals (src/cuda/model.cu) and whitens queries to twice double's
  # precision. What the GPU keeps is then eps times a point's offset from
  # its run's anchor: 2e-14 where runs are compact, but the sparse
  # GPS-like set's runs of 64 points span ~500 bandwidths (4,000 points
  # over 4,000 x 4,000), and there 4e-13 (`gpu_tol`).
  set.seed(960)
  centres <- as.matrix(expand.grid(200 * (0:4), 200 * (0:3)))
  clustered <- centres[sample.int(20, 4000, replace = TRUE), ] + matrix(rnorm(8000), ncol = 2)
  gps <- matrix(runif(2 * 4000, 0, 4000), ncol = 2)
  gps[1:2000, ] <- gps[2001:4000, ] + matrix(rnorm(4000, sd = 2), ncol = 2)
  one_far <- rbind(matrix(rnorm(3000 * 3), ncol = 3) + 1e5, matrix(rnorm(30), ncol = 3) - 1e5)
  H_full <- matrix(c(1, 0.3, 0.2, 0.3, 0.5, 0.1, 0.2, 0.1, 0.8), 3) * 0.04
  cases <- list(
    list(x = clustered, H = diag(0.25^2, 2), kernel = "gaussian", label = "20 clusters"),
    list(x = clustered, H = diag(0.25^2, 2), kernel = "epanechnikov", label = "20 clusters"),
    list(x = gps, H = diag(2), kernel = "gaussian", label = "GPS-like", gpu_tol = 1e-12),
    list(x = one_far, H = H_full, kernel = "gaussian", label = "a cluster 5e5 bandwidths out, full H"))
  for (cs in cases) {
    x <- cs$x
    q <- x[1:150, ] + matrix(rnorm(150 * ncol(x), sd = 0.3), ncol = ncol(x))
    ref <- exact_log_density(x, q, cs$H, cs$kernel)
    at <- 1:150
    ref_loo <- exact_log_density(x, x, cs$H, cs$kernel, leave_out = TRUE)[at]
    ref_own <- exact_log_density(x, x[at, ], cs$H, cs$kernel)
    for (be in double_backends()) {
      fit <- kde_on(be, x, H = cs$H, kernel = cs$kernel)
      lab <- be_label(be, cs$label, cs$kernel)
      worst <- if (be$backend == "cuda" && !is.null(cs$gpu_tol)) cs$gpu_tol else 2e-14
      for (tol in c(0, 1e-14)) {
        got <- predict(fit, q, log = TRUE, tolerance = tol)
        ok <- is.finite(ref)
        expect_identical(is.finite(got), ok, label = paste(lab, "support"))
        expect_lte(max(abs(expm1(got[ok] - ref[ok]))), worst + tol, label = lab)
      }
      # at the training points and leaving each out (the bandwidth searches)
      loo <- predict(fit, log = TRUE, leave_one_out = TRUE)[at]
      ok <- is.finite(ref_loo)
      expect_identical(is.finite(loo), ok, label = paste(lab, "leave-one-out support"))
      expect_lte(max(abs(expm1(loo[ok] - ref_loo[ok]))), worst,
                 label = paste(lab, "leave-one-out"))
      own <- predict(fit, log = TRUE)[at]
      expect_lte(max(abs(expm1(own - ref_own))), worst, label = paste(lab, "at the points"))
    }
  }
})

test_that("double's digits far out hold where a whitened coordinate cancels (full H) and at a compact kernel's edge, on both backends", {
  # A full H's whitening sums terms that can cancel: 500 points whose
  # second whitened coordinate is near 0, 5,000-15,000 bandwidths out, keep
  # only the terms' rounding; the mode's check of the points allows that
  # (it turned the mode off for the whole fit: 2.2e-12).
  set.seed(970)
  H <- matrix(c(1, 0.6, 0.6, 1), 2)
  base <- matrix(runif(2e4 * 2, 0, 4e4), ncol = 2)
  probe <- kde_gpu(base, H = H, backend = "cpu")
  centre <- probe$center
  u <- runif(500, 5000, 15000)
  jitter <- runif(500, -0.5, 0.5)
  for (it in 1:30) {
    band <- cbind(centre[1] + u, centre[2] - u * probe$transform[1, 2] / probe$transform[2, 2] + jitter)
    centre <- colMeans(rbind(base, band))
  }
  x <- rbind(base, band)
  q <- base[1:100, ] + matrix(rnorm(200, sd = 0.3), ncol = 2)
  ref <- exact_log_density(x, q, H, "gaussian")
  for (be in double_backends()) {
    fit <- kde_on(be, x, H = H)
    expect_lt(min(abs(fit$z[fit$order > nrow(base), 2])), 0.01) # the cancellation is there
    # the GPU: eps times the offsets from the anchors of units that span
    # thousands of bandwidths here (3e-13)
    expect_lte(max(abs(expm1(predict(fit, q, log = TRUE, tolerance = 0) - ref))),
               if (be$backend == "cuda") 1e-12 else 2e-14,
               label = be_label(be, "cancelling coordinate"))
  }

  # Epanechnikov, points 4e7 apart: queries just inside the support of the
  # corner point whose rounded whitening lies outside it by more than the
  # skipping's margin; the skipping's boxes cover the residuals, so one
  # query alone keeps the pair as it does in a batch (it was skipped:
  # -Inf). Its value, 1 - s^2 of about 1e-11, keeps only a few digits of
  # s^2's rounding, which differs with the block's anchor.
  set.seed(971)
  grid <- as.matrix(expand.grid(0:99, 0:99)) * 6
  x <- rbind(grid + runif(2e4), 4e7 + grid + runif(2e4))
  corner <- nrow(x)
  x[corner, ] <- 4e7 + 99 * 6 + 2
  for (be in double_backends()) {
    fit <- kde_on(be, x, H = diag(2), kernel = "epanechnikov")
    angle <- runif(2e5, 0.1, pi / 2 - 0.1)
    r <- (1 - runif(2e5, 0, 4e-9)) / fit$transform[1, 1]
    q <- cbind(x[corner, 1] + r * cos(angle), x[corner, 2] + r * sin(angle))
    s2 <- rowSums((sweep(q, 2, x[corner, ]) %*% fit$transform)^2)
    z_corner <- fit$z[fit$order == corner, ]
    rounded_s2 <- rowSums(sweep(kdegpu:::whiten(fit, q), 2, z_corner)^2)
    edge <- head(which(s2 < 1 - 1e-12 & rounded_s2 > 1 + 1e-9), 6)
    expect_gt(length(edge), 0)
    together <- predict(fit, q[edge, , drop = FALSE], log = TRUE)
    alone <- vapply(edge, function(i) predict(fit, q[i, , drop = FALSE], log = TRUE), 0)
    lab <- be_label(be, "support edge 4e7 out")
    expect_true(all(is.finite(together)), label = lab)
    expect_true(all(is.finite(alone)), label = lab)
    expect_equal(alone, together, tolerance = 1e-6, label = lab)
  }
})

test_that("gradients and Hessians keep double's digits on data far from their centre, on both backends", {
  # The derivative sums take the same residuals as the densities (each
  # difference from both sides' rounding): 1.4e-12 of a gradient on the
  # GPS-like set before. Gaussian: the CPU's moment engine; biweight: its
  # per-pair loop, against its score from the formula (k = (1 - s^2)^2).
  # A query on a training point lands on it (the exponential's cusp: no
  # direction, a zero gradient term).
  set.seed(980)
  gps <- matrix(runif(2 * 6000, 0, 4000), ncol = 2)
  gps[1:3000, ] <- gps[3001:6000, ] + matrix(rnorm(6000, sd = 1), ncol = 2)
  H <- matrix(c(1, 0.3, 0.3, 0.6), 2)
  q <- gps[1:40, ] + matrix(rnorm(80, sd = 0.4), ncol = 2)
  ref <- dd_gauss_ref(gps, q, H)
  a <- ref_constants("biweight", 2)$a
  H_inverse <- solve(H)
  score <- t(vapply(seq_len(nrow(q)), function(i) {
    v <- -sweep(gps, 2, q[i, ]) # rows (q - x_j)'
    s2 <- rowSums((v %*% H_inverse) * v) / a^2
    inside <- s2 < 1
    k <- (1 - s2[inside])^2
    colSums(-4 / a^2 * (1 - s2[inside]) * (v[inside, , drop = FALSE] %*% H_inverse)) / sum(k)
  }, numeric(2)))
  for (be in double_backends()) {
    # the GPU: eps times the offsets from the anchors of units ~1,000
    # bandwidths wide (6,000 points over 4,000 x 4,000): 1e-13 to 8e-13
    worst <- if (be$backend == "cuda") 2e-12 else 2e-14
    fit <- kde_on(be, gps, H = H)
    dd_expect_close(predict(fit, q, type = "gradient"), ref$grad, worst,
                    be_label(be, "far gradient"))
    dd_expect_close(predict(fit, q, type = "hessian"), ref$hess, worst,
                    be_label(be, "far Hessian"))
    fit_b <- kde_on(be, gps, H = H, kernel = "biweight")
    dd_expect_close(predict(fit_b, q, type = "gradient", log = TRUE), score, worst,
                    be_label(be, "far biweight score"))
  }
  # compact units (20 clusters over 3,200 bandwidths): double's digits on
  # both backends
  centres <- as.matrix(expand.grid(200 * (0:4), 200 * (0:3)))
  clustered <- centres[sample.int(20, 4000, replace = TRUE), ] + matrix(rnorm(8000), ncol = 2)
  qc <- clustered[1:40, ] + matrix(rnorm(80, sd = 0.1), ncol = 2)
  Hc <- H / 16
  refc <- dd_gauss_ref(clustered, qc, Hc)
  for (be in double_backends()) {
    fit <- kde_on(be, clustered, H = Hc)
    dd_expect_close(predict(fit, qc, type = "gradient"), refc$grad, 2e-14,
                    be_label(be, "clustered gradient"))
    dd_expect_close(predict(fit, qc, type = "hessian"), refc$hess, 2e-14,
                    be_label(be, "clustered Hessian"))
  }
  # at training points the exponential's own term has no direction: the
  # GPU's query must land on its point exactly, as the CPU's does
  if (has_gpu()) {
    at <- gps[1:5, ]
    gpu <- predict(kde_gpu(gps, H = H, kernel = "exponential", backend = "cuda",
                           precision = "double"), at, type = "gradient")
    cpu <- predict(kde_gpu(gps, H = H, kernel = "exponential", backend = "cpu"), at,
                   type = "gradient")
    dd_expect_close(gpu, cpu, 1e-12, "exponential at its points, CUDA against the CPU")
  }
})

test_that("CUDA: double precision keeps its digits on clustered data spanning ~3,000 bandwidths (d = 3)", {
  skip_without_gpu()
  set.seed(940)
  centres <- cbind(as.matrix(expand.grid(200 * (0:4), 200 * (0:3))), 0)
  x <- centres[sample.int(20, 2e4, replace = TRUE), ] + matrix(rnorm(6e4), ncol = 3)
  q <- rbind(x[1:100, ] + matrix(rnorm(300, sd = 0.3), ncol = 3),
             (centres[1:19, ] + centres[2:20, ]) / 2)
  bw <- 0.25
  ref <- exact_gaussian_log_density(x, q, bw)
  fit <- kde_gpu(x, bw = bw, backend = "cuda", precision = "double")
  got <- predict(fit, q, log = TRUE)
  # the default tolerance keeps the difference form (the expanded form
  # would round by ~1e-9 here)
  expect_output(print(fit), "(difference form)", fixed = TRUE)
  # near the data, densities to 1e-11 (coordinates global to the fit keep
  # eps x 2,000 bandwidths of each difference); between the clusters, 400
  # bandwidths out, log-densities to 1e-12 of their size
  near <- 1:100
  expect_lte(max(abs(expm1(got[near] - ref[near]))), 1e-11)
  expect_log_density_equal(got, ref, tol = 1e-12, label = "clustered, double")
  # tolerance = 1e-4 admits the expanded form and stays within it near the
  # data (its rounding grows with D^2 further out)
  loose <- predict(fit, q, log = TRUE, tolerance = 1e-4)
  expect_lte(max(abs(expm1(loose[near] - ref[near]))), 1e-4)
  expect_log_density_equal(loose, ref, tol = 1e-4, label = "clustered, double, 1e-4")
})

test_that("CUDA: both precisions keep their digits wherever the data sit (clustered d = 3, GPS-like d = 2)", {
  skip_without_gpu()
  # Points are stored relative to their run's anchor and queries carry a
  # hi and lo part (src/cuda/pack.cu), so a pair's difference rounds
  # relative to its distance and its run's size, not to the data's extent
  # (~3,000 and ~4,000 bandwidths here). What remains in single precision
  # is eps times the exponent (a query D bandwidths from its nearest points
  # keeps about eps D^2 of log f, and the running max keeps the terms that
  # matter within 16 of it) and times the size of sparse runs. One H200:
  # single 1.2e-7 and 1.9e-7 of log f, densities within 1.1e-6 and 2.9e-6
  # (5.8e-6 on GPS-like data with runs of 256 and the max up to 60 below
  # the terms); double 3.8e-16 and 4.9e-16, densities 2.7e-15 and 7.1e-15.
  # With global coordinates single lost 1e-5 of log f here.
  set.seed(950)
  centres <- cbind(as.matrix(expand.grid(200 * (0:4), 200 * (0:3))), 0)
  x3 <- centres[sample.int(20, 2e4, replace = TRUE), ] + matrix(rnorm(6e4), ncol = 3)
  q3 <- x3[1:100, ] + matrix(rnorm(300, sd = 0.3), ncol = 3)
  x2 <- matrix(runif(2e5 * 2, 0, 4000), ncol = 2)
  q2 <- x2[1:100, ] + matrix(rnorm(200, sd = 0.5), ncol = 2)
  cases <- list(list(x = x3, q = q3, bw = 0.25, label = "clustered d = 3"),
                list(x = x2, q = q2, bw = 1, label = "GPS-like d = 2"))
  for (cs in cases) {
    ref <- exact_gaussian_log_density(cs$x, cs$q, cs$bw)
    for (prec in c("single", "double")) {
      fit <- kde_gpu(cs$x, bw = cs$bw, backend = "cuda", precision = prec)
      lab <- paste(cs$label, prec)
      got <- predict(fit, cs$q, log = TRUE)
      expect_log_density_equal(got, ref, tol = if (prec == "single") 1e-6 else 1e-14,
                               label = lab)
      expect_lte(max(abs(expm1(got - ref))), if (prec == "single") 5e-6 else 2e-14,
                 label = paste(lab, "largest relative error of a density"))
      # tolerance = 1e-3 skips more and admits forms that round within it
      expect_log_density_equal(predict(fit, cs$q, log = TRUE, tolerance = 1e-3), ref,
                               tol = 2e-3, label = paste(lab, "tolerance 1e-3"))
    }
  }
})

test_that("CUDA: single precision keeps densities to 1e-5 near clustered data, leaving one out too (d = 2, 3)", {
  skip_without_gpu()
  # 20 clusters 800 bandwidths apart: the k-d order's runs of 256 points
  # that span a gap get split into units of their own (src/unit_spread.h),
  # so that no point is stored relative to an anchor hundreds of
  # bandwidths away (3e-5 to 6.6e-5 of a density before); leave-one-out
  # then runs over that layout's positions (src/cuda/spread.cu)
  for (d in 2:3) {
    set.seed(960 + d)
    centres <- cbind(as.matrix(expand.grid(200 * (0:4), 200 * (0:3))), matrix(0, 20, d - 2))
    x <- centres[sample.int(20, 2e4, replace = TRUE), ] + matrix(rnorm(2e4 * d), ncol = d)
    q <- x[1:200, ] + matrix(rnorm(200 * d, sd = 0.3), ncol = d)
    ref <- exact_gaussian_log_density(x, q, 0.25)
    loo_ref <- predict(kde_gpu(x, bw = 0.25, backend = "cpu"), log = TRUE, leave_one_out = TRUE)
    for (prec in c("single", "double")) {
      fit <- kde_gpu(x, bw = 0.25, backend = "cuda", precision = prec)
      lab <- sprintf("d = %d, %s", d, prec)
      worst <- if (prec == "single") 1e-5 else 1e-12
      expect_lte(max(abs(expm1(predict(fit, q, log = TRUE) - ref))), worst, label = lab)
      loo <- predict(fit, log = TRUE, leave_one_out = TRUE)
      expect_lte(max(abs(expm1(loo - loo_ref))), worst, label = paste(lab, "leave-one-out"))
    }
  }
})

test_that("every kernel, d = 1, 2, 3, 5: sparse, between-cluster and far queries on clustered data keep the default's and tolerance = 1e-3's guarantees", {
  # 12 tight clusters 30 bandwidths apart; queries at a few scattered
  # points (sparse), midway between clusters and far outside
  for (d in c(1, 2, 3, 5)) {
    set.seed(950 + d)
    centres <- matrix(runif(12 * d, 0, 60), 12)
    x <- centres[rep(1:12, length.out = 6000), , drop = FALSE] + matrix(rnorm(6000 * d), ncol = d)
    q <- rbind(x[sample.int(6000, 40), , drop = FALSE] + rnorm(40 * d, sd = 0.5),
               (centres[1:6, , drop = FALSE] + centres[7:12, , drop = FALSE]) / 2,
               matrix(200 + runif(3 * d, 0, 50), 3))
    H <- diag(0.5^2, d)
    for (k in kernel_names) {
      ref <- ref_log_density(x, q, H, k)
      # each log-density's sensitivity to a relative change of its pairs'
      # squared distances (H times 1 + h): rounding a distance in the
      # backend's precision (about d eps, relative) moves log f by that
      # times this. Near a compact kernel's edge it is large (a query whose
      # density comes from a few points at the cosine's edge: ~7e3 at
      # d = 5, where coordinates rounded to float alone move log f by 7e-3)
      # Both ways: rounding moves a distance either way, and a discontinuous
      # kernel (the rectangular) flips a point just inside its edge only
      # when the distance grows (d = 3 has one 5e-8 inside)
      h <- 1e-7
      up <- ref_log_density(x, q, H * (1 + h), k)
      down <- ref_log_density(x, q, H * (1 - h), k)
      sensitivity <- ifelse(is.finite(ref) & is.finite(up) & is.finite(down),
                            pmax(abs(up - ref), abs(down - ref)) / h, 0)
      ok <- is.finite(ref)
      for (be in eval_backends()) {
        fit <- kde_on(be, x, H = H, kernel = k)
        lab <- be_label(be, k, sprintf("d = %d", d))
        eps <- if (be$precision == "single") 2^-24 else 2^-53
        allowed <- (be$tol * pmax(1, abs(ref)) + 8 * d * eps * sensitivity)[ok]
        got <- predict(fit, q, log = TRUE)
        expect_identical(got == -Inf, ref == -Inf, label = paste(lab, "zeros"))
        expect_lte(max((abs(got - ref)[ok]) / allowed), 1, label = paste(lab, "default"))
        # within 1e-3 of the full sum and never above it, to rounding: on
        # the GPU, tolerance = 1e-3 admits the Gaussian's expanded form
        # where its predicted rounding (the model's) is within it, and that
        # rounding goes either way
        loose <- predict(fit, q, log = TRUE, tolerance = 1e-3)
        expect_identical(loose == -Inf, ref == -Inf, label = paste(lab, "1e-3 zeros"))
        gap <- loose[ok] - ref[ok]
        form_rounding <- 0
        if (be$backend == "cuda") {
          predicted <- attr(kdegpu:::cuda_model(fit, 1e-3), "rounding")
          if (isTRUE(predicted <= 1e-3)) form_rounding <- predicted
        }
        expect_lte(max((gap - form_rounding) / allowed), 1, label = paste(lab, "1e-3 above"))
        expect_gte(min((gap - log1p(-1e-3) + form_rounding) / allowed), -1,
                   label = paste(lab, "1e-3 below"))
      }
    }
  }
})

test_that("CPU: sparse queries' blocks split into k-d halves with their own plans: exact, thread-independent, and fewer pairs", {
  # 2,000 queries (125 blocks: past the few-blocks path) scattered over 12
  # clusters 40 bandwidths apart, between them and far away
  set.seed(960)
  centres <- matrix(runif(24, 0, 80), 12)
  x <- centres[rep(1:12, length.out = 2e4), ] + matrix(rnorm(4e4), ncol = 2)
  q <- rbind(x[sample.int(2e4, 1000), ] + rnorm(2000, sd = 0.5),
             matrix(runif(1600, -20, 100), ncol = 2),
             matrix(runif(400, 200, 400), ncol = 2))
  fit <- kde_gpu(x, H = diag(0.5^2, 2), backend = "cpu")
  by_threads <- lapply(1:2, function(t) {
    with_kde_options(list(kdegpu.threads = t), predict(fit, q, log = TRUE))
  })
  expect_identical(by_threads[[2]], by_threads[[1]])
  expect_log_density_equal(by_threads[[1]], ref_log_density(x, q, fit$H, "gaussian"),
                           tol = 1e-12, label = "sparse queries, clustered fit")
  # blocks as wide as the data's box would keep every pair; each query
  # needs about its nearest cluster, a twelfth of them
  expect_lt(summary(fit)$pairs_share, 0.25)
})
