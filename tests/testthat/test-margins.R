# Marginal densities (kde_grid(margin = ), the matrix of margins in plot()):
# the margin of a radially symmetric d-dimensional kernel, tabulated by
# numerical integration, against closed forms and against the fit's own
# density integrated over the columns left out.

test_that("the tabulated margin of the Gaussian kernel is the Gaussian", {
  r <- seq(0, 9, by = 0.05)
  for (d in c(3, 4)) for (k in 1:2) {
    profile <- kdegpu:::margin_profile("gaussian", d, k)
    expect_equal(profile(r), (2 * pi)^(-k / 2) * exp(-r^2 / 2), tolerance = 1e-8)
  }
})

test_that("every kernel's margin integrates to 1 with unit variance", {
  for (kernel in ref_kernels) for (k in 1:2) {
    d <- 3
    profile <- kdegpu:::margin_profile(kernel, d, k)
    upper <- if (kernel %in% ref_compact) ref_constants(kernel, d)$a else Inf
    area <- exp(ref_log_sphere_area(k)) # of the unit sphere in k dimensions
    moment <- function(p) {
      integrate(function(r) r^p * profile(r), 0, upper, rel.tol = 1e-10,
                subdivisions = 1000L)$value
    }
    expect_equal(area * moment(k - 1), 1, tolerance = 1e-7, label = paste(kernel, k, "mass"))
    expect_equal(area * moment(k + 1) / k, 1, tolerance = 1e-7,
                 label = paste(kernel, k, "variance"))
    # The margin of a kernel with a radial profile is not that profile:
    # for the rectangular kernel, the 1-D margin of the 3-D ball is a
    # parabola, 3/4 (1 - s^2) / a on |s| < 1 (s = r / a).
    if (kernel == "rectangular" && k == 1) {
      a <- ref_constants(kernel, d)$a
      s <- seq(0, 0.99, by = 0.03)
      expect_equal(profile(s * a), 3 / 4 * (1 - s^2) / a, tolerance = 1e-8)
    }
  }
})

# Gauss-Legendre nodes and weights on [-1, 1] (Golub-Welsch).
gauss_legendre <- function(m) {
  k <- seq_len(m - 1)
  J <- matrix(0, m, m)
  J[cbind(k, k + 1)] <- J[cbind(k + 1, k)] <- k / sqrt(4 * k^2 - 1)
  e <- eigen(J, symmetric = TRUE)
  list(nodes = e$values, weights = 2 * e$vectors[1, ]^2)
}

# The marginal density of a fit at `u` (values of the kept columns): the
# fit's density integrated over the one column left out, by 16-point
# Gauss-Legendre on short pieces whose ends include every point where the
# integrand is not smooth, all in one predict() call.
integrated_margin <- function(fit, keep, u) {
  drop <- setdiff(seq_len(fit$d), keep)
  stopifnot(length(drop) == 1)
  sd <- sqrt(fit$H[drop, drop])
  reach <- sd * if (fit$kernel == "exponential") 60 else 5
  lower <- min(fit$x[, drop]) - reach
  upper <- max(fit$x[, drop]) + reach
  # (Where the line passes through a training point, the exponential
  # kernel's cusp: pieces end at the training points' coordinates too.)
  breaks <- c(seq(lower, upper, by = sd / 4), fit$x[, drop])
  # A compact kernel's integrand has a kink (or a jump) where the line
  # enters or leaves a training point's support, the ellipsoid
  # (p - x_j)' H^-1 (p - x_j) = a^2: pieces end there too.
  if (fit$kernel %in% ref_compact) {
    Q <- solve(fit$H)
    a <- ref_constants(fit$kernel, fit$d)$a
    for (j in seq_len(fit$n)) {
      offset <- numeric(fit$d)
      offset[keep] <- u - fit$x[j, keep]
      qa <- Q[drop, drop]
      qb <- 2 * sum(Q[drop, ] * offset)
      qc <- sum(offset * (Q %*% offset)) - a^2
      disc <- qb^2 - 4 * qa * qc
      if (disc > 0) {
        breaks <- c(breaks, fit$x[j, drop] + (-qb + c(-1, 1) * sqrt(disc)) / (2 * qa))
      }
    }
  }
  breaks <- sort(unique(pmin(pmax(breaks, lower), upper)))
  rule <- gauss_legendre(16)
  half <- diff(breaks) / 2
  mid <- (breaks[-1] + breaks[-length(breaks)]) / 2
  t <- as.vector(outer(rule$nodes, half) + rep(mid, each = 16))
  points <- matrix(0, length(t), fit$d)
  points[, keep] <- rep(u, each = length(t))
  points[, drop] <- t
  sum(predict(fit, points) * rep(rule$weights, length(half)) * rep(half, each = 16))
}

test_that("margins equal the fit's density integrated over the other column", {
  x3 <- ref_data(12, 3, seed = 520)
  set.seed(521)
  w <- rexp(12)
  H3 <- ref_full_H(3, 0.8, seed = 522)
  queries <- rbind(colMeans(x3[, 1:2]), x3[3, 1:2], x3[7, 1:2] + c(0.3, -0.2))
  for (kernel in c("epanechnikov", "triangular", "cosine", "exponential")) {
    fit <- kde_gpu(x3, H = H3, kernel = kernel, weights = w, backend = "cpu")
    grid <- kde_grid(fit, margin = c(1, 2), lims = c(-1, 1, 0, 1), n = 3)
    # Among 900 other queries, so that the compact kernels' tiles apply.
    others <- as.matrix(expand.grid(seq(-3, 3, length.out = 30), seq(-2, 4, length.out = 30)))
    got <- kdegpu:::margin_density(fit, 1:2, rbind(queries, others))[1:3]
    want <- apply(queries, 1, function(u) integrated_margin(fit, 1:2, u))
    expect_equal(got, want, tolerance = 1e-6, label = paste(kernel, "2-D margin of 3-D"))
    # The grid holds the same values.
    expect_equal(grid$density, kdegpu:::margin_density(fit, 1:2, as.matrix(grid[, 1:2])),
                 tolerance = 1e-14)
  }
  # A 1-D margin of a 2-D fit.
  x2 <- ref_data(10, 2, seed = 523)
  H2 <- ref_full_H(2, 0.7, seed = 524)
  for (kernel in c("rectangular", "biweight", "optcosine", "exponential")) {
    fit <- kde_gpu(x2, H = H2, kernel = kernel, backend = "cpu")
    u <- c(min(x2[, 2]), median(x2[, 2]), max(x2[, 2]) + 0.5)
    got <- kde_grid(fit, margin = 2, lims = range(u), n = 2)$density
    want <- vapply(range(u), function(v) integrated_margin(fit, 2, v), 0)
    expect_equal(got, want, tolerance = 1e-6, label = paste(kernel, "1-D margin of 2-D"))
  }
})

test_that("a 1-D margin of a 3-D fit integrates its 2-D margin", {
  x3 <- ref_data(15, 3, seed = 525)
  fit <- kde_gpu(x3, kernel = "biweight", backend = "cpu")
  u <- median(x3[, 3])
  one <- kdegpu:::margin_density(fit, 3, matrix(u))
  bounds <- range(x3[, 1]) + c(-1, 1) * 3 * sqrt(fit$H[1, 1])
  two <- integrate(function(t) kdegpu:::margin_density(fit, c(3, 1), cbind(u, t)),
                   bounds[1], bounds[2], rel.tol = 1e-9, subdivisions = 1000L)$value
  expect_equal(one, two, tolerance = 1e-6)
})

test_that("Gaussian margins are the Gaussian fit of the columns with H's block", {
  x <- as.matrix(quakes[1:200, c("lat", "long", "depth")])
  fit <- kde_gpu(x, backend = "cpu")
  grid <- kde_grid(fit, margin = c("depth", "lat"), n = c(7, 5))
  expect_named(grid, c("depth", "lat", "density"))
  want <- ref_density(x[, c(3, 1)], as.matrix(grid[, 1:2]), fit$H[c(3, 1), c(3, 1)], "gaussian")
  expect_equal(grid$density, want, tolerance = 1e-12)
})

test_that("compact margins summed by tiles equal the plain sum over all pairs", {
  x <- ref_data(400, 3, seed = 526)
  fit <- kde_gpu(x, kernel = "epanechnikov", backend = "cpu")
  R <- chol(fit$H[1:2, 1:2])
  whiten <- function(p) p %*% backsolve(R, diag(2))
  query <- whiten(as.matrix(expand.grid(seq(-6, 6, length.out = 40), seq(-5, 7, length.out = 35))))
  train <- whiten(x[, 1:2])
  profile <- kdegpu:::margin_profile("epanechnikov", 3, 2)
  reach <- ref_constants("epanechnikov", 3)$a
  w <- rep(1 / 400, 400)
  tiled <- kdegpu:::compact_margin_sum(query, train, w, profile, reach)
  plain <- kdegpu:::margin_sum(query, train, w, profile)
  expect_equal(tiled, plain, tolerance = 1e-13)
  expect_gt(sum(tiled == 0), 0)
  expect_gt(sum(tiled > 0), 100)
  # One axis (a 1-D margin), where the tiles are intervals.
  profile1 <- kdegpu:::margin_profile("epanechnikov", 3, 1)
  q1 <- matrix(seq(-8, 8, length.out = 700))
  t1 <- matrix(x[, 1] / sqrt(fit$H[1, 1]))
  expect_equal(kdegpu:::compact_margin_sum(q1, t1, w, profile1, reach),
               kdegpu:::margin_sum(q1, t1, w, profile1), tolerance = 1e-13)
})
