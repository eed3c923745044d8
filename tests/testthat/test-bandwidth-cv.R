# Cross-validation bandwidth selectors against plain-R criteria, stats::bw.ucv
# and ks::Hlscv.

# Exact LSCV and leave-one-out log-likelihood in plain R (Gaussian, full H),
# written from the definitions with the n x n matrix, for small n.
ref_gauss_matrix <- function(x, H) {
  d <- ncol(x)
  Hinv <- solve(H)
  diffs <- lapply(seq_len(d), function(k) outer(x[, k], x[, k], "-"))
  q <- Reduce(`+`, lapply(seq_len(d), function(a) Reduce(`+`, lapply(seq_len(d), function(b) {
    Hinv[a, b] * diffs[[a]] * diffs[[b]]
  }))))
  exp(-q / 2) / sqrt((2 * pi)^d * det(H))
}

ref_lscv <- function(x, H, w = rep(1 / nrow(x), nrow(x))) {
  K2 <- ref_gauss_matrix(x, 2 * H)
  K <- ref_gauss_matrix(x, H)
  diag(K) <- 0
  loo <- as.vector(K %*% w) / (1 - w)
  sum(w * (K2 %*% w)) - 2 * sum(w * loo)
}

ref_mlcv <- function(x, H, w = rep(1 / nrow(x), nrow(x))) {
  K <- ref_gauss_matrix(x, H)
  diag(K) <- 0
  sum(nrow(x) * w * log(as.vector(K %*% w) / (1 - w)))
}

criterion <- function(x, H, w, which) {
  kdegpu:::cv_criterion(x, w, H, "gaussian", "cpu", "double", which)
}

test_that("LSCV and MLCV criteria equal plain-R references to 1e-10", {
  set.seed(11)
  for (d in 1:3) {
    x <- matrix(rnorm(60 * d), 60, d)
    H <- crossprod(matrix(rnorm(d * d), d)) / 10 + diag(0.05, d)
    w <- runif(60)
    w <- w / sum(w)
    for (weights in list(rep(1 / 60, 60), w)) {
      expect_lt(abs(criterion(x, H, weights, "lscv") / ref_lscv(x, H, weights) - 1), 1e-10)
      expect_lt(abs(criterion(x, H, weights, "mlcv") / ref_mlcv(x, H, weights) - 1), 1e-10)
    }
  }
})

test_that("leave-one-out excludes exactly the self term, also for duplicated points", {
  x <- matrix(c(0, 0, 1, 3), ncol = 1) # a duplicated point
  H <- matrix(0.5)
  expect_lt(abs(criterion(x, H, rep(0.25, 4), "mlcv") / ref_mlcv(x, H) - 1), 1e-12)
  fit <- kde_gpu(x, H = H, backend = "cpu")
  expect_equal(as.numeric(logLik(fit)), ref_mlcv(x, H), tolerance = 1e-12)
})

test_that("bw_lscv matches stats::bw.ucv on its criterion and interval", {
  set.seed(2)
  x <- c(rnorm(150), rnorm(100, 4, 0.5))
  ours <- bw_lscv(x, backend = "cpu")
  theirs <- stats::bw.ucv(x, nb = 100000L)
  # bw.ucv bins the pairwise distances and uses 1/n^2 for the leave-one-out
  # term, so the two optima agree to the binning's accuracy.
  expect_equal(as.numeric(ours), theirs, tolerance = 0.02)
  # The optimum is a minimum of the exact criterion.
  h <- as.numeric(ours)
  value <- function(h) ref_lscv(matrix(x), matrix(h^2))
  expect_equal(attr(ours, "criterion"), value(h), tolerance = 1e-10)
  expect_lte(value(h), value(h * 1.01))
  expect_lte(value(h), value(h * 0.99))
})

test_that("bw_lscv full H matches ks::Hlscv in 2-D", {
  skip_if_not_installed("ks")
  set.seed(3)
  x <- matrix(rnorm(400), 200) %*% matrix(c(1, 0.5, 0, 1), 2)
  ours <- bw_lscv(x, shape = "full", backend = "cpu")
  theirs <- suppressWarnings(ks::Hlscv(x))
  expect_equal(unname(unclass(ours)[1:2, 1:2]), unname(theirs), tolerance = 0.01)
  # and it is at least as good on the exact criterion
  expect_lte(criterion(x, attr(ours, "H"), rep(1 / 200, 200), "lscv"),
             criterion(x, theirs, rep(1 / 200, 200), "lscv") + 1e-9)
})

test_that("bw_mlcv matches a plain-R optimiser, scalar and diagonal", {
  set.seed(4)
  x <- matrix(c(rnorm(120), rnorm(120, sd = 3)), ncol = 2)
  scalar <- bw_mlcv(x[, 1], backend = "cpu")
  ref <- optimize(function(h) ref_mlcv(x[, 1, drop = FALSE], matrix(h^2)),
                  c(0.05, 2), maximum = TRUE, tol = 1e-8)$maximum
  expect_equal(as.numeric(scalar), ref, tolerance = 1e-4)
  diagonal <- bw_mlcv(x, shape = "diagonal", backend = "cpu")
  ref2 <- optim(log(c(0.3, 1)), function(p) -ref_mlcv(x, diag(exp(2 * p))),
                control = list(reltol = 1e-12))$par
  expect_equal(unname(as.numeric(diagonal)), exp(ref2), tolerance = 1e-3)
})

test_that("bw = 'lscv', 'ucv' and 'mlcv' in kde_gpu() use the selectors", {
  x <- faithful$eruptions
  h <- as.numeric(bw_lscv(x, backend = "cpu"))
  expect_equal(kde_gpu(x, bw = "ucv", backend = "cpu")$bw, h)
  expect_equal(kde_gpu(x, bw = "lscv", backend = "cpu")$bw, h)
  fit <- kde_gpu(x, bw = "mlcv", kernel = "epanechnikov", backend = "cpu")
  expect_equal(fit$bw, as.numeric(bw_mlcv(x, kernel = "epanechnikov", backend = "cpu")))
})

test_that("a boundary optimum warns, as bw.ucv does", {
  set.seed(5)
  x <- rnorm(100)
  expect_warning(bw_lscv(x, range = c(2, 3), backend = "cpu"), "end of the search range")
})

test_that("bad input to the selectors errors naming the argument", {
  expect_error(bw_lscv(1:2, backend = "cpu"), "`x`")
  expect_error(bw_lscv(rnorm(20), kernel = "epanechnikov", backend = "cpu"), "`kernel`")
  expect_error(bw_lscv(rnorm(20), range = c(-1, 2), backend = "cpu"), "`range`")
  expect_error(bw_lscv(rnorm(20), range = c(2, 1), backend = "cpu"), "`range`")
  expect_error(bw_mlcv(rnorm(20), shape = "nope", backend = "cpu"), "`shape`")
  expect_error(bw_mlcv(rnorm(20), grid = 1, backend = "cpu"), "`grid`")
  expect_error(bw_mlcv(cbind(1:10, 1:10), backend = "cpu"), "`x`")
})

test_that("the local search finds a known optimum, also past invalid bandwidths", {
  target <- matrix(c(2, 0.5, 0.5, 1), 2)
  f <- function(H) sum((H - target)^2) - 1
  H <- kdegpu:::local_search(f, diag(2), f(diag(2)), "full", 1e-10, 12L)
  expect_equal(H, target, tolerance = 1e-5)
  D <- kdegpu:::local_search(f, diag(2), f(diag(2)), "diagonal", 1e-10, 12L)
  expect_equal(D, diag(c(2, 1)), tolerance = 1e-5)
  # where the criterion cannot be computed (NA, as safe_objective's callers
  # never pass but nlm must survive): the optimum on the edge of the rest
  g <- function(H) if (H[1L, 1L] > 1.5) NA_real_ else f(H)
  H2 <- kdegpu:::local_search(g, diag(2), g(diag(2)), "full", 1e-10, 12L)
  expect_equal(H2, matrix(c(1.5, 0.5, 0.5, 1), 2), tolerance = 1e-4)
})

test_that("a kinked criterion (compact kernel) is searched to a plain optimiser's optimum", {
  # epanechnikov's MLCV has kinks where pairs cross the support's edge: a
  # Newton-type search stalls there (0.03 below in log-likelihood here)
  x <- as.matrix(faithful)
  w <- rep(1 / nrow(x), nrow(x))
  minus_mlcv <- function(p) {
    -kdegpu:::cv_criterion(x, w, diag(exp(2 * p)), "epanechnikov", "cpu", "double", "mlcv")
  }
  plain <- optim(log(apply(x, 2, sd) * nrow(x)^(-1 / 6)), minus_mlcv,
                 control = list(reltol = 1e-10))
  ours <- bw_mlcv(x, shape = "diagonal", kernel = "epanechnikov", backend = "cpu")
  expect_gte(attr(ours, "criterion"), -plain$value - 1e-4)
})

test_that("bw_mlcv's scalar search reaches a brute-force grid's best, for kinked and step criteria", {
  # The leave-one-out log-likelihood in plain R, vectorised over pairs, on
  # 3000 bandwidths inside the selector's range. Epanechnikov's criterion
  # has kinks and rectangular's is a sawtooth: the 25-point grid with
  # optimize() stopped 0.005 and 1.2 below this grid's best.
  loo_grid <- function(x, hs, kernel) {
    n <- length(x)
    D <- abs(outer(x, x, "-"))
    constants <- ref_constants(kernel, 1)
    profile <- ref_profile(kernel)
    vapply(hs, function(h) {
      K <- profile(D / (constants$a * h))
      diag(K) <- 0
      sum(log(rowSums(K) / (n - 1))) + n * (constants$log_c - log(h))
    }, 0)
  }
  for (seed in c(4, 6)) {
    set.seed(seed)
    x <- round(rnorm(60), 3)
    reference <- 1.06 * sd(x) * 60^(-1 / 5)
    hs <- exp(seq(log(0.2 * reference), log(1.5 * reference), length.out = 3000))
    for (kernel in c("gaussian", "epanechnikov", "triangular", "rectangular")) {
      best <- max(loo_grid(x, hs, kernel))
      ours <- bw_mlcv(x, kernel = kernel, backend = "cpu")
      expect_gte(attr(ours, "criterion"), best - 1e-6)
      # the criterion reported is the one at the bandwidth returned
      expect_equal(attr(ours, "criterion"), loo_grid(x, as.numeric(ours), kernel),
                   tolerance = 1e-10)
    }
  }
})

test_that("the exact step search equals the criterion just above its pair distance", {
  set.seed(12)
  x <- matrix(rnorm(80), 40)
  w <- runif(40)
  w <- w / sum(w)
  shape <- crossprod(matrix(c(1, 0.3, 0, 0.8), 2)) / 10
  c_best <- kdegpu:::step_criterion_maximum(x, w, shape, "rectangular", c(0.3, 3))
  value <- function(f) {
    kdegpu:::cv_criterion(x, w, f^2 * shape, "rectangular", "cpu", "double", "mlcv")
  }
  # no factor on a fine grid of the range does better
  grid <- exp(seq(log(0.3), log(3), length.out = 2000))
  expect_gte(value(c_best), max(vapply(grid, value, 0)) - 1e-9)
})
