# Skipping what provably cannot matter (src/prune.c): every density within
# relative `tolerance` of the full sum and never above it; compact kernels
# skip only exact zeros; results in the user's order.

# log f(full) - log f(pruned) must lie in [0, -log(1 - tolerance)], up to
# the rounding of the two sums: a few ulps of the log-density in double;
# in single precision the two summation orders differ by about 1e-6, so
# there the check is agreement at single precision (the bound itself is
# checked in double, on both backends).
expect_within_tolerance <- function(pruned, full, tolerance, label, rounding = 1e-13) {
  finite <- is.finite(full)
  expect_identical(is.finite(pruned), finite, label = label)
  gap <- full[finite] - pruned[finite]
  slack <- rounding * pmax(1, abs(full[finite]))
  expect_true(all(gap >= -slack), label = paste(label, "never above the full sum"))
  expect_true(all(gap <= -log1p(-tolerance) + slack),
              label = paste(label, "within the tolerance"))
}

clustered_data <- function(n, d, seed) {
  set.seed(seed)
  centres <- matrix(rnorm(5 * d, sd = 20), 5, d)
  x <- centres[sample.int(5, n, replace = TRUE), , drop = FALSE] + matrix(rnorm(n * d), n, d)
  x[1:3, ] <- x[1:3, ] + 1e3 # far outliers
  x
}

test_that("Gaussian and exponential results stay within the tolerance of the full sum", {
  for (be in eval_backends()) {
    for (d in c(1L, 2L, 3L, 5L)) {
      x <- clustered_data(3000, d, seed = 10 + d)
      q <- rbind(clustered_data(700, d, seed = 20 + d), matrix(1e4, 1, d))
      w <- runif(nrow(x))
      for (kernel in c("gaussian", "exponential")) {
        fit <- kde_on(be, x, kernel = kernel, weights = w)
        full <- predict(fit, q, log = TRUE, tolerance = 0)
        rounding <- if (be$precision == "single") be$tol else 1e-13
        for (tol in c(1e-2, 1e-6)) {
          label <- be_label(be, kernel, "d =", d, "tolerance", tol)
          expect_within_tolerance(predict(fit, q, log = TRUE, tolerance = tol), full, tol, label,
                                  rounding)
          loo_full <- predict(fit, leave_one_out = TRUE, log = TRUE, tolerance = 0)
          expect_within_tolerance(predict(fit, leave_one_out = TRUE, log = TRUE, tolerance = tol),
                                  loo_full, tol, paste(label, "leave-one-out"), rounding)
        }
      }
    }
  }
})

test_that("a large tolerance does skip tiles, and only as far as the bound allows", {
  x <- clustered_data(5000, 2, seed = 3)
  fit <- kde_gpu(x, backend = "cpu")
  q <- clustered_data(500, 2, seed = 4)
  full <- predict(fit, q, log = TRUE, tolerance = 0)
  loose <- predict(fit, q, log = TRUE, tolerance = 0.5)
  expect_gt(max(full - loose), 1e-6) # something was skipped
  expect_within_tolerance(loose, full, 0.5, "tolerance 0.5")
})

test_that("the default tolerance agrees with the plain-R reference at working precision", {
  x <- clustered_data(1500, 3, seed = 5)
  q <- clustered_data(300, 3, seed = 6)
  H <- kde_gpu(x, backend = "cpu")$H
  for (be in eval_backends()) {
    for (kernel in c("gaussian", "exponential", "epanechnikov", "biweight")) {
      fit <- kde_on(be, x, kernel = kernel, H = H)
      ref <- ref_log_density(x, q, H, kernel)
      expect_log_density_equal(predict(fit, q, log = TRUE), ref, be$tol,
                               label = be_label(be, kernel, "default tolerance"))
    }
  }
})

test_that("compact kernels skip only tiles that add exactly 0, at any tolerance", {
  x <- clustered_data(4000, 2, seed = 7)
  q <- rbind(clustered_data(600, 2, seed = 8), c(1e3, 1e3))
  for (be in eval_backends()) {
    for (kernel in c("epanechnikov", "rectangular", "triangular", "biweight", "cosine",
                     "optcosine")) {
      fit <- kde_on(be, x, kernel = kernel)
      ref <- ref_log_density(x, q, fit$H, kernel)
      for (tol in c(0, 1e-3)) {
        label <- be_label(be, kernel, "tolerance", tol)
        out <- predict(fit, q, log = TRUE, tolerance = tol)
        # single precision may round a pair at the support's edge either way
        if (be$precision == "double") {
          expect_identical(is.finite(out), is.finite(ref), label = label)
        }
        both <- is.finite(ref) & is.finite(out)
        expect_equal(out[both], ref[both], tolerance = max(be$tol, 1e-12) * 10, label = label)
        loo <- predict(fit, leave_one_out = TRUE, log = TRUE, tolerance = tol)
        loo_full <- predict(fit, leave_one_out = TRUE, log = TRUE, tolerance = 0)
        expect_identical(is.finite(loo), is.finite(loo_full), label = paste(label, "loo"))
        expect_equal(loo[is.finite(loo)], loo_full[is.finite(loo)], tolerance = 1e-12,
                     label = paste(label, "loo"))
      }
    }
  }
})

test_that("hard shapes keep the guarantee: ties, offsets, tiny and ragged sizes", {
  set.seed(9)
  shapes <- list(
    ties = cbind(rep(1:4, 300), rep(c(0, 0, 0, 5), 300)) + 0,
    offset = matrix(rnorm(2000), ncol = 2) + 1e4,
    tiny = matrix(rnorm(30), ncol = 3),
    ragged = matrix(rnorm(3 * 1031), ncol = 3),
    line = cbind(seq(0, 100, length.out = 1500), 0.001 * rnorm(1500))
  )
  for (name in names(shapes)) {
    x <- shapes[[name]]
    fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
    q <- x[seq(1, nrow(x), by = 7), , drop = FALSE] + 0.05
    ref <- ref_log_density(x, q, fit$H, "gaussian")
    expect_equal(predict(fit, q, log = TRUE), ref, tolerance = 1e-12, label = name)
    full <- predict(fit, q, log = TRUE, tolerance = 0)
    expect_within_tolerance(predict(fit, q, log = TRUE, tolerance = 1e-3), full, 1e-3, name)
  }
})

test_that("the spatial order is a permutation, the same for any thread count", {
  set.seed(12)
  z <- matrix(rnorm(3 * 5000), ncol = 3)
  one <- .Call(kdegpu:::C_kdegpu_spatial_order, z, 1L)
  two <- .Call(kdegpu:::C_kdegpu_spatial_order, z, 2L)
  expect_identical(one, two)
  expect_identical(sort(one), as.double(seq_len(5000)))
  # its tiles of 256 points are compact: much smaller boxes than the data's
  tiles <- split(seq_len(5000), (seq_len(5000) - 1) %/% 256)
  extent <- vapply(tiles, function(rows) {
    prod(apply(z[one[rows], , drop = FALSE], 2, function(v) diff(range(v))))
  }, 0)
  expect_lt(max(extent[-length(extent)]), prod(apply(z, 2, function(v) diff(range(v)))) / 4)
  expect_error(.Call(kdegpu:::C_kdegpu_spatial_order, z, -1L), "`threads`")
})

test_that("above 2^17 rows the order's partitions run in parallel, with the same result for any thread count", {
  # src/spatial.c's partition_parallel: ties (rounded data) and a constant
  # column included; each split puts a whole number of tiles of 256 rows
  # before it, none of whose split coordinates exceeds one after it
  set.seed(13)
  n <- 3e5
  z <- cbind(round(rnorm(n), 1) * 3, rnorm(n), 1)
  one <- .Call(kdegpu:::C_kdegpu_spatial_order, z, 1L)
  two <- .Call(kdegpu:::C_kdegpu_spatial_order, z, 2L)
  expect_identical(one, two)
  expect_identical(sort(one), as.double(seq_len(n)))
  mid <- (ceiling(n / 256) %/% 2) * 256
  expect_lte(max(z[one[seq_len(mid)], 1]), min(z[one[-seq_len(mid)], 1]))
})

test_that("the spatial order splits at the gaps between clusters, not through them", {
  # 20 clusters 800 apart: median splits cut clusters and left 77 of 782
  # leaves of 256 points holding two or more of them; splits at the gaps
  # leave about one per cluster boundary
  set.seed(16)
  n <- 2e5
  cluster <- sample.int(20, n, replace = TRUE)
  centres <- as.matrix(expand.grid(800 * (0:4), 800 * (0:3)))
  z <- centres[cluster, ] + matrix(rnorm(2 * n, sd = 4), ncol = 2)
  order <- .Call(kdegpu:::C_kdegpu_spatial_order, z, 2L)
  leaf <- (seq_len(n) - 1) %/% 256
  mixed <- tapply(cluster[order], leaf, function(k) length(unique(k)) > 1)
  expect_lte(sum(mixed), 40)
  # and a normal cloud keeps the median's order: its leaves as compact
  zn <- matrix(rnorm(2 * n), ncol = 2)
  on <- .Call(kdegpu:::C_kdegpu_spatial_order, zn, 2L)
  widths <- tapply(seq_len(n), leaf, function(i) max(apply(zn[on[i], ], 2, function(v) diff(range(v)))))
  expect_lt(max(widths[-length(widths)]), 3)
})

test_that("the CUDA layout splits the order's runs that span gaps, and only those (src/unit_spread.c)", {
  spread <- function(z, width = 32, growth = 0.25) {
    .Call(kdegpu:::C_kdegpu_unit_spread, z, width, growth, 2L)
  }
  in_order <- function(z) z[.Call(kdegpu:::C_kdegpu_spatial_order, z, 2L), , drop = FALSE]
  # 20 clusters 800 bandwidths apart (as whitened coordinates are)
  set.seed(15)
  n <- 5e4
  centres <- cbind(as.matrix(expand.grid(800 * (0:4), 800 * (0:3))), 0)
  z <- in_order(centres[sample.int(20, n, replace = TRUE), ] +
                  matrix(rnorm(3 * n, sd = 4), ncol = 3))
  s <- spread(z)
  runs <- ceiling(n / 256)
  expect_identical(s$width, 32)
  expect_identical(s$n_positions %% 256, 0)
  expect_gt(s$n_positions, runs * 256)
  expect_lte(s$n_positions / 256, runs * 1.25 + 64)
  # each point at a position of its own
  expect_identical(anyDuplicated(s$position), 0L)
  expect_true(all(s$position >= 1 & s$position <= s$n_positions))
  # every unit at most 32 wide, made of one run of the order, in its order
  unit <- (s$position - 1) %/% 256
  expect_lte(max(apply(z, 2, function(v) tapply(v, unit, function(u) diff(range(u))))), 32)
  expect_true(all(tapply((seq_len(n) - 1) %/% 256, unit, function(r) length(unique(r))) == 1))
  by_position <- order(s$position)
  expect_true(all(tapply(by_position, unit[by_position], function(i) !is.unsorted(i))))
  # normal data at Scott's bandwidth: nothing to split
  expect_identical(spread(in_order(matrix(rnorm(3 * n), ncol = 3) / n^(-1 / 7)))$n_positions, 0)
  # sparse data whose every run is wide (points ~40 bandwidths apart): no
  # width up to 8 x 32 within the growth, the plain layout
  sparse <- spread(in_order(matrix(runif(2 * n, 0, 1e4), ncol = 2)))
  expect_identical(sparse$n_positions, 0)
  expect_null(sparse$position)
})

test_that("queries whose whitening overflows to NaN over half a large range still get ordered", {
  # a narrow fit (whitening multiplies by ~1e6 along one direction) and 2^19
  # finite queries of which three quarters whiten to +-Inf - Inf: the
  # parallel partition once looped on a range of NaN keys
  set.seed(14)
  x <- matrix(rnorm(2000), ncol = 2)
  x[, 2] <- x[, 1] + 1e-3 * x[, 2]
  fit <- kde_gpu(x * 1e-3, backend = "cpu")
  q <- matrix(1e303, 2^19, 2)
  f <- seq(1, 2^19, 4)
  q[f, 1] <- 0
  q[f, 2] <- rep(c(-1e301, 1e301), length.out = length(f))
  out <- predict(fit, q)
  expect_length(out, 2^19)
  expect_true(all(out == 0)) # every query is far from the data
})

test_that("tolerance is checked, taken from the option, and honoured by logLik and CV", {
  fit <- kde_gpu(faithful, backend = "cpu")
  expect_error(predict(fit, faithful[1:3, ], tolerance = 1), "`tolerance` must be one number in \\[0, 1\\)")
  expect_error(predict(fit, faithful[1:3, ], tolerance = -0.1), "`tolerance`")
  expect_error(predict(fit, faithful[1:3, ], tolerance = "a"), "`tolerance`")
  expect_error(logLik(fit, tolerance = NA), "`tolerance`")
  expect_error(bw_mlcv(faithful$eruptions, backend = "cpu", tolerance = 2), "`tolerance`")
  old <- options(kdegpu.tolerance = 0.4)
  on.exit(options(old))
  loose <- predict(fit, faithful[1:50, ], log = TRUE)
  options(kdegpu.tolerance = NULL)
  full <- predict(fit, faithful[1:50, ], log = TRUE, tolerance = 0)
  expect_within_tolerance(loose, full, 0.4, "from the option")
  expect_equal(as.numeric(logLik(fit, tolerance = 0)), as.numeric(logLik(fit)), tolerance = 1e-13)
  x <- faithful$eruptions
  expect_equal(as.numeric(bw_mlcv(x, backend = "cpu", tolerance = 0)),
               as.numeric(bw_mlcv(x, backend = "cpu")), tolerance = 1e-8)
  expect_identical(default_tolerance[["double"]], 1e-14)
})

test_that("print() and summary() report the share of pairs the last evaluation computed", {
  set.seed(31)
  x <- runif(20000, 0, 1000)
  q <- runif(3000, 0, 1000)
  # KDEGPU_DEVICE_PLAN=0 (the host plan, for A/B timings): the GPU's
  # single-precision Gaussian sweeps every tile
  host_plan <- identical(Sys.getenv("KDEGPU_DEVICE_PLAN"), "0")
  for (be in eval_backends()) {
    fit <- kde_on(be, x, bw = 0.5, kernel = "epanechnikov")
    expect_true(is.na(summary(fit)$pairs_share))
    out <- predict(fit, q)
    expect_null(attr(out, "pairs_share"))
    # the statistic is kept beside the fit: after its first evaluation (which
    # makes the backend's model, a cache), another with a different share
    # leaves the object as it was
    if (be$backend == "cpu") {
      before <- serialize(fit, NULL)
      invisible(predict(fit, q[1:10]))
      expect_identical(serialize(fit, NULL), before)
      invisible(predict(fit, q))
    }
    share <- summary(fit)$pairs_share
    # a block of nearby queries meets a few tiles of the 79
    expect_true(share > 0 && share < 0.1, label = be_label(be, "compact kernel: share", share))
    expect_output(print(fit), "last evaluation: [0-9.e+-]+% of the query x training pairs")
    gauss <- kde_on(be, x, bw = 0.5)
    invisible(predict(gauss, q, tolerance = 0))
    expect_equal(summary(gauss)$pairs_share, 1, label = be_label(be, "Gaussian, tolerance 0"))
    invisible(predict(gauss, q, tolerance = 1e-3))
    if (!(be$backend == "cuda" && be$precision == "single" && host_plan))
      expect_lt(summary(gauss)$pairs_share, 0.5, label = be_label(be, "Gaussian, tolerance 1e-3"))
    invisible(predict(gauss, leave_one_out = TRUE, tolerance = 1e-3))
    if (!(be$backend == "cuda" && be$precision == "single" && host_plan))
      expect_lt(summary(gauss)$pairs_share, 0.5, label = be_label(be, "leave-one-out"))
  }
  old <- options(kdegpu.spatial = FALSE)
  on.exit(options(old))
  flat <- kde_gpu(x, bw = 0.5, kernel = "epanechnikov", backend = "cpu")
  invisible(predict(flat, q))
  expect_equal(summary(flat)$pairs_share, 1)
})
