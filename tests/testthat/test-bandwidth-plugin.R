# The Gaussian moment-sum engine (moments.R, src/moments.c, src/cuda/
# moments.cu) against direct double loops, and the plug-in selectors built
# on it against stats::bw.SJ(), a plain-R unbinned Sheather-Jones, and ks.

# Relative tolerance of the moment sums on a backend: the CPU computes in
# double; the GPU takes 2^f in single precision (about 2e-7 per term).
moment_tol <- function(backend) if (backend == "cpu") 1e-12 else 1e-5

# Direct loops: log scale and moment sums for every query (moments.h).
ref_moments <- function(train, w, query, index, pairs = "all") {
  out <- matrix(0, nrow(query), nrow(index))
  scale <- numeric(nrow(query))
  for (i in seq_len(nrow(query))) {
    u <- sweep(train, 2L, query[i, ])
    e <- log(w) - rowSums(u^2) / 2
    if (pairs == "leave_one_out") e[i] <- -Inf
    if (pairs == "above") e[seq_len(i)] <- -Inf
    scale[i] <- max(e)
    if (scale[i] == -Inf) next
    for (m in seq_len(nrow(index))) {
      mono <- apply(u^matrix(index[m, ], nrow(u), ncol(u), byrow = TRUE), 1L, prod)
      out[i, m] <- sum(exp(e - scale[i]) * mono)
    }
  }
  list(log_scale = scale, sums = out)
}

test_that("moment sums equal direct loops (d = 1..3, degree <= 4, weights, pairs)", {
  set.seed(11)
  for (backend in test_backends()) {
    for (d in 1:3) {
      n <- 70
      train <- matrix(rnorm(n * d), n, d)
      w <- runif(n)
      w[c(3, 40)] <- 0
      index <- kdegpu:::moment_index(d, 4L)
      query <- matrix(rnorm(9 * d), 9, d)
      got <- kdegpu:::gaussian_moments(train, w, query, 4L, "all", backend)
      ref <- ref_moments(train, w, query, index)
      expect_equal(got$log_scale, ref$log_scale, tolerance = 1e-14, info = backend)
      expect_equal(got$sums, ref$sums, tolerance = moment_tol(backend), info = paste(backend, d))
      for (pairs in c("leave_one_out", "above")) {
        got <- kdegpu:::gaussian_moments(train, w, train, 3L, pairs, backend)
        ref <- ref_moments(train, w, train, kdegpu:::moment_index(d, 3L), pairs)
        expect_equal(got$log_scale, ref$log_scale, tolerance = 1e-14, info = pairs)
        expect_equal(got$sums, ref$sums, tolerance = moment_tol(backend),
                     info = paste(backend, d, pairs))
      }
    }
    # degree 6 in 1-D, and 5-D (the GPU's generic kernel)
    train <- matrix(rnorm(50), 50)
    got <- kdegpu:::gaussian_moments(train, rep(1, 50), train[1:5, , drop = FALSE], 6L,
                                     backend = backend)
    ref <- ref_moments(train, rep(1, 50), train[1:5, , drop = FALSE], kdegpu:::moment_index(1, 6L))
    expect_equal(got$sums, ref$sums, tolerance = moment_tol(backend))
    train <- matrix(rnorm(300), 60, 5)
    got <- kdegpu:::gaussian_moments(train, rep(1, 60), train, 2L, "leave_one_out", backend)
    ref <- ref_moments(train, rep(1, 60), train, kdegpu:::moment_index(5, 2L), "leave_one_out")
    expect_equal(got$sums, ref$sums, tolerance = moment_tol(backend))
  }
})

test_that("CUDA: moment sums on several GPUs are one GPU's bits", {
  skip_without_gpu()
  all_gpus <- several_gpus()
  set.seed(13)
  moments <- function(devices, budget, ...) {
    with_kde_options(list(kdegpu.devices = devices, kdegpu.gpu_memory = budget),
                     kdegpu:::gaussian_moments(...))
  }
  for (d in c(2L, 5L)) { # the small kernel, the generic one
    train <- matrix(rnorm(3000 * d), ncol = d)
    query <- matrix(rnorm(2000 * d), ncol = d)
    for (pairs in c("all", "above")) {
      q <- if (pairs == "all") query else train
      lab <- paste("d =", d, pairs)
      w <- runif(3000)
      one <- moments(0L, NULL, train, w, q, 2L, pairs, "cuda")
      # a share of the queries on each device, in one batch or (a small
      # budget) in batches of a few hundred rows
      expect_identical(moments(all_gpus, NULL, train, w, q, 2L, pairs, "cuda"), one,
                       label = lab)
      expect_identical(moments(all_gpus, 2^18, train, w, q, 2L, pairs, "cuda"), one,
                       label = paste(lab, "small budget"))
      cpu <- kdegpu:::gaussian_moments(train, w, q, 2L, pairs, "cpu")
      expect_equal(one$sums, cpu$sums, tolerance = moment_tol("cuda"), label = lab)
    }
  }
})

test_that("the multi-indices come in the documented order", {
  expect_equal(kdegpu:::moment_index(2, 2L),
               rbind(c(0, 0), c(1, 0), c(0, 1), c(2, 0), c(1, 1), c(0, 2)),
               ignore_attr = TRUE)
  expect_equal(nrow(kdegpu:::moment_index(3, 6L)), choose(9, 3))
  expect_error(kdegpu:::moment_index(2, 7L), "`degree` must be in 0..6")
})

test_that("the moment-index entry point refuses a huge order at once", {
  # choose(dim + degree, dim) used to loop dim times before the bound check
  entry <- kdegpu:::C_kdegpu_moment_index
  for (p in c(0L, 1L, 6L)) {
    took <- system.time(
      expect_error(.Call(entry, .Machine$integer.max, p), "more than 100000 moment sums")
    )[["elapsed"]]
    expect_lt(took, 0.5)
  }
  expect_error(.Call(entry, 1e5L, 2L), "more than 100000 moment sums")
  expect_equal(nrow(.Call(entry, 3L, 6L)), choose(9, 3))
})

test_that("the score S_1 / S_0 is finite and right far from the data", {
  train <- matrix(c(0, 1, 2), 3)
  for (backend in test_backends()) {
    got <- kdegpu:::gaussian_moments(train, rep(1, 3), matrix(c(-60, 80)), 1L, backend = backend)
    score <- got$sums[, 2] / got$sums[, 1]
    expect_true(all(is.finite(score)))
    # far away, the nearest point dominates: u = x_nearest - q
    expect_equal(score, c(60, -78), tolerance = 1e-10)
    expect_equal(got$log_scale, c(-60^2 / 2, -78^2 / 2))
  }
})

test_that("integer weights give the pair sums of duplicated points", {
  set.seed(12)
  x <- matrix(rnorm(40), 20)
  k <- rep(1:4, 5)
  dup <- x[rep(seq_len(20), k), , drop = FALSE]
  for (backend in test_backends()) {
    a <- kdegpu:::gaussian_moments(x, k, x, 2L, backend = backend)
    b <- kdegpu:::gaussian_moments(dup, rep(1, nrow(dup)), x, 2L, backend = backend)
    expect_equal(exp(a$log_scale) * a$sums, exp(b$log_scale) * b$sums,
                 tolerance = moment_tol(backend))
    # psi functionals: sum_ij w_i w_j over distinct points = over duplicates
    pa <- kdegpu:::pair_derivative_sums(x / 0.4, k / sum(k), 4L, backend)
    pb <- kdegpu:::pair_derivative_sums(dup / 0.4, rep(1 / nrow(dup), nrow(dup)), 4L, backend)
    expect_equal(pa$value, pb$value, tolerance = moment_tol(backend))
  }
})

# stats::bw.SJ() with its binned pair sums replaced by sums over every pair,
# written out with outer(): the reference for the exact SJ.
ref_sj <- function(x, method) {
  n <- length(x)
  diffs <- outer(x, x, "-")
  SDh <- function(h) {
    u <- diffs / h
    sum(exp(-u^2 / 2) * (u^4 - 6 * u^2 + 3)) / (n * (n - 1) * h^5 * sqrt(2 * pi))
  }
  TDh <- function(h) {
    u <- diffs / h
    sum(exp(-u^2 / 2) * (u^6 - 15 * u^4 + 45 * u^2 - 15)) / (n * (n - 1) * h^7 * sqrt(2 * pi))
  }
  scale <- min(sd(x), IQR(x) / 1.349)
  a <- 1.24 * scale * n^(-1 / 7)
  b <- 1.23 * scale * n^(-1 / 9)
  c1 <- 1 / (2 * sqrt(pi) * n)
  TD <- -TDh(b)
  if (method == "dpi") return((c1 / SDh((2.394 / (n * TD))^(1 / 7)))^(1 / 5))
  upper <- 1.144 * scale * n^(-1 / 5)
  lower <- 0.1 * upper
  alph2 <- 1.357 * (SDh(a) / TD)^(1 / 7)
  fSD <- function(h) (c1 / SDh(alph2 * h^(5 / 7)))^(1 / 5) - h
  itry <- 1L
  while (fSD(lower) * fSD(upper) > 0) {
    if (itry %% 2) upper <- upper * 1.2 else lower <- lower / 1.2
    itry <- itry + 1L
  }
  uniroot(fSD, c(lower, upper), tol = 0.1 * lower)$root
}

test_that("SJ equals bw.SJ(nb = 1e5) within 1% and the unbinned formulas within 1e-8", {
  set.seed(13)
  data <- list(faithful$eruptions, precip, rnorm(500), c(rnorm(300), rnorm(200, 4, 0.3)))
  for (backend in test_backends()) {
    exact_tol <- if (backend == "cpu") 1e-8 else 1e-5
    for (x in data) {
      for (method in c("ste", "dpi")) {
        got <- as.numeric(bw_sj(x, method, backend = backend))
        expect_equal(got, stats::bw.SJ(x, nb = 1e5, method = method), tolerance = 0.01)
        expect_equal(got, ref_sj(x, method), tolerance = exact_tol)
      }
    }
  }
  x <- faithful$eruptions
  ste <- as.numeric(bw_sj(x, backend = "cpu"))
  dpi <- as.numeric(bw_sj(x, "dpi", backend = "cpu"))
  expect_equal(kde_gpu(x, bw = "SJ", backend = "cpu")$bw, ste)
  expect_equal(kde_gpu(x, bw = "sj-ste", backend = "cpu")$bw, ste)
  expect_equal(kde_gpu(x, bw = "sj-dpi", adjust = 0.5, backend = "cpu")$bw, 0.5 * dpi)
  expect_equal(kde_gpu(x, bw = "plugin", backend = "cpu")$bw, dpi)
})

test_that("bw_plugin() equals ks::Hpi() and Hpi.diag() (binned = FALSE)", {
  skip_if_not_installed("ks")
  set.seed(14)
  x2 <- as.matrix(faithful)
  x3 <- cbind(rnorm(200), rnorm(200) + rexp(200), rnorm(200))
  x3[, 3] <- x3[, 3] + 0.5 * x3[, 1]
  for (backend in test_backends()) {
    for (x in list(x2, x3)) {
      full <- attr(bw_plugin(x, backend = backend), "H")
      expect_equal(full, ks::Hpi(x, binned = FALSE), tolerance = 0.02, ignore_attr = TRUE)
      diagonal <- attr(bw_plugin(x, "diagonal", backend = backend), "H")
      expect_equal(diag(diagonal), diag(ks::Hpi.diag(x, binned = FALSE)), tolerance = 0.02,
                   ignore_attr = TRUE)
      expect_equal(diagonal[upper.tri(diagonal)], rep(0, ncol(x) * (ncol(x) - 1) / 2))
      if (backend == "cpu") {
        # the same formulas: equal to rounding
        expect_equal(full, ks::Hpi(x, binned = FALSE), tolerance = 1e-8, ignore_attr = TRUE)
      }
    }
  }
  fit <- kde_gpu(faithful, bw = "plugin", adjust = 2, backend = "cpu")
  expect_equal(fit$H, 4 * attr(bw_plugin(faithful, backend = "cpu"), "H"), ignore_attr = TRUE)
  expect_equal(fit$bandwidth_method, "plugin")
})

test_that("bw_scv() equals ks::Hscv() and Hscv.diag() (binned = FALSE)", {
  skip_if_not_installed("ks")
  set.seed(15)
  x3 <- cbind(rnorm(150), rnorm(150) + rexp(150), rnorm(150))
  for (backend in test_backends()) {
    expect_equal(attr(bw_scv(faithful, backend = backend), "H"), ks::Hscv(as.matrix(faithful), binned = FALSE),
                 tolerance = 0.02, ignore_attr = TRUE)
    expect_equal(diag(attr(bw_scv(faithful, "diagonal", backend = backend), "H")),
                 diag(ks::Hscv.diag(as.matrix(faithful), binned = FALSE)), tolerance = 0.02,
                 ignore_attr = TRUE)
    expect_equal(attr(bw_scv(x3, backend = backend), "H"), ks::Hscv(x3, binned = FALSE),
                 tolerance = 0.02, ignore_attr = TRUE)
  }
})

test_that("the selectors honour weights", {
  set.seed(16)
  x <- as.matrix(faithful[1:150, ])
  # equal weights: the unweighted selectors
  expect_equal(bw_plugin(x, weights = rep(3, 150), backend = "cpu"), bw_plugin(x, backend = "cpu"))
  expect_equal(bw_scv(x, weights = rep(3, 150), backend = "cpu"), bw_scv(x, backend = "cpu"))
  expect_equal(bw_sj(x[, 1], weights = rep(3, 150), backend = "cpu"), bw_sj(x[, 1], backend = "cpu"))
  # unequal weights change them; zero weights drop points from the pair sums
  w <- runif(150)
  expect_false(isTRUE(all.equal(bw_plugin(x, weights = w, backend = "cpu"),
                                bw_plugin(x, backend = "cpu"))))
  w0 <- c(rep(1, 100), rep(0, 50))
  expect_equal(bw_sj(x[, 1], weights = w0, backend = "cpu"), bw_sj(x[1:100, 1], backend = "cpu"))
  expect_equal(bw_plugin(x, weights = w0, backend = "cpu"), bw_plugin(x[1:100, ], backend = "cpu"))
  expect_equal(kde_gpu(x[, 1], bw = "SJ", weights = w, backend = "cpu")$bw,
               as.numeric(bw_sj(x[, 1], weights = w, backend = "cpu")))
})

test_that("bad arguments to the plug-in selectors are errors that name them", {
  x <- as.matrix(faithful)
  expect_error(bw_plugin(x, shape = "scalar"), "`shape` must be one of \"full\", \"diagonal\"")
  expect_error(bw_plugin(x, shpae = "full"), "unknown argument `shpae`.*Did you mean `shape`")
  expect_error(bw_plugin(x, backend = "gpu"), "`backend` must be one of")
  expect_error(bw_plugin(x, weights = -(1:272)), "`weights` must be non-negative")
  expect_error(bw_plugin(x, weights = 1:3), "`weights` must have one value per point")
  expect_error(bw_plugin(cbind(1:10, 2 * (1:10)), backend = "cpu"), "`x` has collinear columns")
  expect_error(bw_plugin("a"), "`x` must be numeric")
  expect_error(bw_scv(x[, 1], backend = "cpu"), "`x` must have at least 2 columns")
  expect_error(bw_scv(x, shape = "full", method = 1), "unknown argument `method`")
  expect_error(bw_sj(x, backend = "cpu"), "`x` must be one-dimensional")
  expect_error(bw_sj(x[, 1], method = "solve"), "`method` must be one of \"ste\", \"dpi\"")
  expect_error(bw_sj(rep(1, 10), backend = "cpu"), "`x` has no spread")
  expect_error(bw_sj(x[, 1], nb = 1000), "unknown argument `nb`")
  expect_error(kde_gpu(x, bw = "SJ", backend = "cpu"), "`bw` \"SJ\" is a 1-D rule")
  expect_error(kde_gpu(x[, 1], bw = "sj-foo", backend = "cpu"), "`bw` names an unknown rule")
})

test_that("kde_gpu(bw = \"scv\") takes bw_scv()'s H, and says where it serves", {
  x <- as.matrix(faithful[1:120, ])
  fit <- kde_gpu(x, bw = "scv", backend = "cpu")
  expect_equal(unname(fit$H), unname(attr(bw_scv(x, backend = "cpu"), "H")), tolerance = 1e-12)
  expect_output(print(fit), "smoothed cross-validation", fixed = TRUE)
  expect_error(kde_gpu(faithful$eruptions, bw = "scv", backend = "cpu"),
               "`bw` \"scv\" needs at least 2 columns", fixed = TRUE)
})
