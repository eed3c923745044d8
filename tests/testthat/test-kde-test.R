# kde_test() against the Duong-Goud-Schauer statistic written out in plain
# R (the n x n kernel matrices formed here, small n only) and against
# ks::kde.test(binned = FALSE).

# Gaussian kernel with covariance H between the rows of a and b (na x nb).
ref_kernel_matrix <- function(a, b, H) {
  d <- ncol(a)
  Hinv <- solve(H)
  out <- matrix(0, nrow(a), nrow(b))
  for (j in seq_len(nrow(b))) {
    u <- sweep(a, 2L, b[j, ])
    out[, j] <- exp(-rowSums((u %*% Hinv) * u) / 2)
  }
  out * (2 * pi)^(-d / 2) / sqrt(det(H))
}

# v = grad f(mean)' S grad f(mean) with H = Hns(deriv.order = 1), the
# gradient summed directly: grad K_H(q - x_i) = -H^-1 (q - x_i) K_H(q - x_i).
ref_var_fhat <- function(x) {
  n <- nrow(x)
  d <- ncol(x)
  S <- var(x)
  H <- (4 / (n * (d + 4)))^(2 / (d + 6)) * S
  q <- matrix(colMeans(x), 1L)
  k <- drop(ref_kernel_matrix(x, q, H))
  u <- sweep(x, 2L, q) # x_i - q
  g <- colSums((u %*% solve(H)) * k) / n
  drop(t(g) %*% S %*% g)
}

ref_dgs <- function(x1, x2, H1, H2) {
  n1 <- nrow(x1)
  n2 <- nrow(x2)
  d <- ncol(x1)
  T_hat <- mean(ref_kernel_matrix(x1, x1, H1)) + mean(ref_kernel_matrix(x2, x2, H2)) -
    mean(ref_kernel_matrix(x1, x2, H1)) - mean(ref_kernel_matrix(x2, x1, H2))
  mu <- (1 / (n1 * sqrt(det(H1))) + 1 / (n2 * sqrt(det(H2)))) * (2 * pi)^(-d / 2)
  v <- c(ref_var_fhat(x1), ref_var_fhat(x2))
  s2 <- 3 * (n1 * v[1] + n2 * v[2]) / (n1 + n2) * (1 / n1 + 1 / n2)
  z <- (T_hat - mu) / sqrt(s2)
  list(T = T_hat, z = z, p = pnorm(z, lower.tail = FALSE), v = v)
}

dgs_samples <- function(d, n1, n2, shift = 0.3, seed = 1) {
  set.seed(seed)
  x1 <- matrix(rnorm(n1 * d), ncol = d)
  x2 <- matrix(rnorm(n2 * d, mean = shift), ncol = d) %*% diag(c(1.2, 1, 0.8)[seq_len(d)], d)
  list(x1 = x1, x2 = x2)
}

test_that("kde_test() is the DGS statistic written out in plain R (d = 1, 2, 3)", {
  for (backend in test_backends()) {
    for (d in 1:3) {
      s <- dgs_samples(d, 60 + d, 45)
      H1 <- diag(0.3, d) + 0.05
      H2 <- diag(0.4, d)
      r <- kde_test(s$x1, s$x2, H1, H2, backend = backend)
      ref <- ref_dgs(s$x1, s$x2, H1, H2)
      lab <- paste(backend, "d =", d)
      expect_s3_class(r, "htest")
      expect_equal(unname(r$estimate), ref$T, tolerance = 1e-10, info = lab)
      expect_equal(unname(r$statistic), ref$z, tolerance = 1e-10, info = lab)
      expect_equal(r$p.value, ref$p, tolerance = 1e-10, info = lab)
      expect_equal(unname(r$var.fhat), ref$v, tolerance = 1e-10, info = lab)
    }
  }
})

test_that("kde_test() agrees with ks::kde.test(binned = FALSE) given H (d = 1, 2, 3)", {
  skip_if_not_installed("ks")
  worst <- c(T = 0, z = 0, p = 0)
  for (d in 1:3) {
    s <- dgs_samples(d, 150, 120, shift = 0.15, seed = 2)
    H1 <- kdegpu:::kfe_bandwidth(s$x1, "cpu")
    H2 <- kdegpu:::kfe_bandwidth(s$x2, "cpu") * 1.3
    r <- kde_test(s$x1, s$x2, H1, H2, backend = "cpu")
    # ks interpolates the gradient behind var.fhat from a grid; kdegpu
    # evaluates it exactly, so ks gets kdegpu's values for the comparison
    k <- if (d == 1L) {
      ks::kde.test(s$x1[, 1], s$x2[, 1], h1 = sqrt(drop(H1)), h2 = sqrt(drop(H2)),
                   var.fhat1 = r$var.fhat[[1]], var.fhat2 = r$var.fhat[[2]], binned = FALSE)
    } else {
      ks::kde.test(s$x1, s$x2, H1 = H1, H2 = H2, var.fhat1 = r$var.fhat[[1]],
                   var.fhat2 = r$var.fhat[[2]], binned = FALSE)
    }
    rel <- c(T = unname(r$estimate) / k$Tstat - 1, z = unname(r$statistic) / k$zstat - 1,
             p = r$p.value / k$pvalue - 1)
    worst <- pmax(worst, abs(rel))
    expect_lt(max(abs(rel)), 1e-6)
    expect_equal(unname(r$psi), c(k$psi1, k$psi2, k$psi12, k$psi21), tolerance = 1e-10)
    expect_equal(r$null.mean, k$mean, tolerance = 1e-12)
  }
  # the default bandwidths are ks's Hpi.kfe() (hpi.kfe() in 1-D), unbinned
  # below ks's binning thresholds (500 points in 2-D, 1000 in 3-D)
  for (d in 1:3) {
    s <- dgs_samples(d, 150, 120, shift = 0.15, seed = 3)
    r <- kde_test(s$x1, s$x2, backend = "cpu")
    k <- if (d == 1L) {
      ks::kde.test(s$x1[, 1], s$x2[, 1], var.fhat1 = r$var.fhat[[1]],
                   var.fhat2 = r$var.fhat[[2]], binned = FALSE)
    } else {
      ks::kde.test(s$x1, s$x2, var.fhat1 = r$var.fhat[[1]], var.fhat2 = r$var.fhat[[2]],
                   binned = FALSE)
    }
    H1_ks <- if (d == 1L) k$h1^2 else k$H1
    expect_equal(unname(r$H1), unname(as.matrix(H1_ks)), tolerance = 1e-8, info = d)
    expect_lt(abs(unname(r$statistic) / k$zstat - 1), 1e-6)
    expect_lt(abs(r$p.value / k$pvalue - 1), 1e-6)
  }
})

test_that("ks's own var.fhat is a grid interpolation of the exact value", {
  skip_if_not_installed("ks")
  s <- dgs_samples(2, 150, 120, seed = 4)
  r <- kde_test(s$x1, s$x2, diag(0.2, 2), diag(0.2, 2), backend = "cpu")
  k <- ks::kde.test(s$x1, s$x2, H1 = diag(0.2, 2), H2 = diag(0.2, 2), binned = FALSE)
  expect_equal(unname(r$var.fhat), c(k$var.fhat1, k$var.fhat2), tolerance = 0.05)
  expect_equal(unname(r$var.fhat), c(ref_var_fhat(s$x1), ref_var_fhat(s$x2)), tolerance = 1e-10)
})

test_that("kde_test() behaves as a test: symmetric, calibrated direction, htest fields", {
  s <- dgs_samples(2, 80, 70, shift = 0)
  H <- diag(0.25, 2)
  r12 <- kde_test(s$x1, s$x2, H, H * 1.5, backend = "cpu")
  r21 <- kde_test(s$x2, s$x1, H * 1.5, H, backend = "cpu")
  expect_equal(unname(r12$statistic), unname(r21$statistic), tolerance = 1e-12)
  far <- kde_test(s$x1, s$x2 + 3, H, H, backend = "cpu")
  expect_lt(far$p.value, 1e-6)
  expect_gt(r12$p.value, far$p.value)
  expect_named(r12$statistic, "z")
  expect_identical(r12$alternative, "greater")
  expect_identical(r12$data.name, "s$x1 and s$x2")
  expect_output(print(r12), "Duong, Goud and Schauer")
  # 1-D: H as a number (the variance) or a 1 x 1 matrix; vectors or columns
  x <- faithful$eruptions
  a <- kde_test(x[1:100], x[101:272], 0.1, 0.12, backend = "cpu")
  b <- kde_test(matrix(x[1:100]), matrix(x[101:272]), matrix(0.1), matrix(0.12), backend = "cpu")
  expect_equal(a$statistic, b$statistic)
  # columns matched by name
  d1 <- data.frame(u = s$x1[, 1], v = s$x1[, 2])
  d2 <- data.frame(v = s$x2[, 2], u = s$x2[, 1])
  expect_equal(kde_test(d1, d2, H, H, backend = "cpu")$statistic,
               kde_test(s$x1, s$x2, H, H, backend = "cpu")$statistic)
})

test_that("kde_test() errors name the argument", {
  x <- matrix(rnorm(40), ncol = 2)
  expect_error(kde_test("a", x), "^`x1`")
  expect_error(kde_test(x, c(NA, 1)), "^`x2`")
  expect_error(kde_test(x, matrix(1:9, ncol = 3)), "^`x2` must have 2 columns")
  expect_error(kde_test(x, x[1, , drop = FALSE]), "^`x2` has 1 point")
  expect_error(kde_test(x, x, H1 = matrix(c(1, 2, 2, 1), 2)), "^`H1` must be positive definite")
  expect_error(kde_test(x, x, H2 = diag(3)), "^`H2` must be a 2 x 2 matrix")
  expect_error(kde_test(x, x, backend = "tpu"), "^`backend`")
  expect_error(kde_test(x, x, weights = rep(1, 20)), "`weights`.*unweighted")
  expect_error(kde_test(cbind(1:5, 1), x), "^`x1` has a singular covariance")
  expect_error(kde_test(x, x[1:2, ], H2 = diag(2)), "^`x2` has a singular covariance .*fewer than 3 points")
  expect_error(kde_test(data.frame(a = 1:5, b = 1:5 + 0.5 * (-1)^(1:5)),
                        data.frame(a = 1:5, c = 1:5)), "^`x2` has columns a, c")
})
