# kde_modes() (mean shift), against ks::kms() and Newton's method on
# predict()'s gradient and Hessian (helpers in helper-derivatives.R).

test_that("kde_modes() gives ks::kms()'s modal clusters of faithful", {
  skip_if_not_installed("ks")
  H <- ks::Hpi(faithful, deriv.order = 1)
  km <- ks::kms(faithful, H = H)
  fit <- kde_gpu(faithful, H = H, backend = "cpu")
  m <- kde_modes(fit)
  # the default tolerances are ks's: 0.001 x the smallest and 0.01 x the
  # largest interquartile range
  expect_equal(c(m$tol, m$merge_tol), c(km$tol.iter, km$tol.clust), tolerance = 1e-14)
  expect_true(all(m$converged))
  expect_equal(nrow(m$modes), nrow(km$mode))
  # the same partition up to relabelling: every cluster of one is a
  # cluster of the other
  tab <- table(km$label, m$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "kde_modes() and ks::kms() partition faithful alike")
  # the matched modes are one mode at the merge resolution (ks iterates
  # every point until the slowest converges, kde_modes() stops each point
  # on its own, so ks's modes are closer to the exact ones)
  matched <- apply(tab, 1L, which.max)
  gap <- sqrt(rowSums((unname(as.matrix(km$mode)) - m$modes[matched, ])^2))
  expect_lt(max(gap), m$merge_tol)
  # densities at the modes, decreasing, from predict()
  expect_equal(unname(m$density), unname(predict(fit, m$modes)), tolerance = 1e-14)
  expect_true(all(diff(m$density) < 0))
  # mean shift and its default tolerances scale with the data: faithful
  # in units 1000 times larger has the same clusters (the ascent's
  # Euclidean steps are equivariant under a uniform scaling only)
  m_scaled <- kde_modes(kde_gpu(faithful / 1000, H = H / 1e6, backend = "cpu"))
  expect_identical(m_scaled$label, m$label)
  expect_equal(m_scaled$modes, m$modes / 1000, tolerance = 1e-10)
})

test_that("kde_modes() merges small clusters as ks::kms() does (min_size)", {
  skip_if_not_installed("ks")
  set.seed(21)
  centres <- rbind(c(0, 0), c(4, 0), c(2, 3.5))
  x <- centres[rep(1:3, c(120, 90, 60)), ] + matrix(rnorm(540, sd = 0.6), ncol = 2)
  x <- rbind(x, c(9, 9), c(-6, 7)) # two lone points: clusters of one
  H <- ks::Hpi(x, deriv.order = 1)
  fit <- kde_gpu(x, H = H, backend = "cpu")
  kept <- kde_modes(fit, min_size = 0)
  merged <- kde_modes(fit) # default: round(0.01 * 272) = 3, as ks
  expect_identical(merged$min_size, 3L)
  sizes <- tabulate(kept$label)
  expect_true(sum(sizes == 1) >= 2, label = "the lone points are modes of their own")
  expect_equal(nrow(merged$modes), sum(sizes > 3))
  expect_true(all(tabulate(merged$label) > 3))
  # every big cluster is kept whole, and its mode with it
  big <- which(sizes > 3)
  for (k in big) {
    expect_length(unique(merged$label[kept$label == k]), 1L)
  }
  expect_equal(merged$modes, kept$modes[big, , drop = FALSE])
  # a lone point joins the cluster of the mode nearest to its own mode
  lone <- which(kept$label == which(sizes == 1)[1])
  nearest <- big[which.min(colSums((t(kept$modes[big, ]) - kept$modes[kept$label[lone], ])^2))]
  expect_identical(merged$label[lone], match(nearest, big))
  # and the partition is ks's
  km <- ks::kms(x, H = H)
  tab <- table(km$label, merged$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "kde_modes() and ks::kms() partition the mixture alike")
  expect_error(kde_modes(fit, min_size = -1), "`min_size` must be one non-negative whole number")
})

test_that("kde_modes() ends near local maxima of the estimate", {
  for (case in list(list(kernel = "gaussian", d = 2), list(kernel = "biweight", d = 2),
                    list(kernel = "gaussian", d = 3), list(kernel = "faithful", d = 2))) {
    lab <- paste(case$kernel, "d =", case$d)
    d <- case$d
    fit <- if (case$kernel == "faithful") {
      kde_gpu(faithful, bw = "plugin", backend = "cpu")
    } else {
      set.seed(600 + d)
      x <- rbind(matrix(rnorm(60 * d), ncol = d), matrix(rnorm(40 * d, mean = 4), ncol = d))
      kde_gpu(x, kernel = case$kernel, backend = "cpu")
    }
    m <- kde_modes(fit, min_size = 0) # every mode, however few points climb to it
    expect_true(all(m$converged), label = lab)
    for (k in seq_len(nrow(m$modes))) {
      lab_k <- paste(lab, "mode", k)
      exact <- dd_newton(fit, m$modes[k, ])
      expect_lt(sqrt(sum(predict(fit, exact, type = "gradient")^2)),
                1e-10 * predict(fit, exact) / sqrt(min(diag(fit$H))),
                label = paste(lab_k, "Newton converged"))
      # a maximum: the Hessian is negative definite
      hess <- predict(fit, exact, type = "hessian")[1L, , ]
      expect_true(all(eigen(hess, symmetric = TRUE, only.values = TRUE)$values < 0),
                  label = paste(lab_k, "negative definite Hessian"))
      # the mode found is that maximum at the merge resolution
      gap <- sqrt(sum((m$modes[k, ] - exact)^2))
      expect_lt(gap, m$merge_tol, label = paste(lab_k, "distance to the exact mode"))
      if (case$kernel != "biweight") {
        # Gaussian mean shift: the next step would be s = H score, shorter
        # than `tol`; linearised at the mode, s = H Hess(log f) (x - mode),
        # so |x - mode| <= |s| / sigma_min(H Hess(log f)) (1.5: slack for
        # the linearisation)
        score <- predict(fit, m$modes[k, , drop = FALSE], type = "gradient", log = TRUE)
        s <- drop(fit$H %*% score[1L, ])
        expect_lt(sqrt(sum(s^2)), m$tol, label = paste(lab_k, "next mean-shift step"))
        hess_log <- predict(fit, exact, type = "hessian", log = TRUE)[1L, , ]
        bound <- sqrt(sum(s^2)) / min(svd(fit$H %*% hess_log)$d)
        expect_lte(gap, 1.5 * bound, label = paste(lab_k, "distance vs the linearised bound"))
      }
    }
    # the start points all ended within merge_tol of their mode
    gap <- sqrt(rowSums((m$end_points - m$modes[m$label, , drop = FALSE])^2))
    expect_lt(max(gap), m$merge_tol, label = lab)
  }
})

test_that("kde_modes() ascents end within tol of their mode where mean shift converges slowly", {
  # Many points and a narrow bandwidth: near a mode each step is ~0.97 of
  # the one before, so stopping at the first step below `tol` would leave
  # ascents up to ~100 tol short, and three modes counted as eight.
  set.seed(41)
  centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
  x <- centres[sample(3, 2e4, TRUE), ] + matrix(rnorm(4e4), ncol = 2)
  fit <- kde_gpu(x, backend = "cpu", adjust = 0.5)
  m <- kde_modes(fit, start = x[1:150, ], min_size = 0)
  expect_true(all(m$converged))
  expect_equal(nrow(m$modes), 3L)
  # the same ascents continued with a 1000 times smaller tol
  far <- kde_modes(fit, start = m$end_points, step_tol = 1e-3 * m$tol, min_size = 0)
  gap <- sqrt(rowSums((m$end_points - far$end_points)^2))
  expect_lt(max(gap), 3 * m$tol)
  expect_identical(far$label, m$label)
})

test_that("kde_modes() climbs a bounded fit's reflection estimate, modes on a bound too", {
  set.seed(31)
  # 1-D, lower = 0: the reflection estimate of exponential data peaks at 0
  x <- rexp(400)
  for (be in test_backends()) {
    fit <- kde_gpu(x, lower = 0, backend = be, precision = "double")
    m <- kde_modes(fit, min_size = 0)
    expect_true(all(m$converged), label = be)
    expect_true(all(m$end_points >= 0))
    top <- which.max(m$density)
    expect_lt(abs(m$modes[top, 1]), 5 * m$tol, label = paste(be, "mode at the bound"))
    grid <- seq(0, 5, by = 1e-3)
    expect_gte(m$density[top], max(predict(fit, grid)) * (1 - 1e-5))
  }
  # 2-D, a blob against the lower bound of the first coordinate and one inside
  x2 <- rbind(cbind(abs(rnorm(200, sd = 0.5)), rnorm(200)), cbind(rnorm(200, 4), rnorm(200, 3)))
  fit <- kde_gpu(x2, lower = c(0, -Inf), backend = "cpu")
  m <- kde_modes(fit)
  expect_true(all(m$end_points[, 1] >= 0))
  for (k in seq_len(nrow(m$modes))) {
    # a maximum of predict() in the box, refined by a bounded optimiser
    best <- stats::optim(m$modes[k, ], function(p) -predict(fit, rbind(p)), method = "L-BFGS-B",
                         lower = c(0, -Inf), control = list(factr = 1e3))
    expect_lt(sqrt(sum((best$par - m$modes[k, ])^2)), 10 * m$tol, label = paste("mode", k))
  }
  # the blob against the bound climbs to one mode, on the bound
  blob <- rep(1:2, each = 200)
  expect_length(unique(m$label[blob == 1]), 1L)
  expect_lte(sum(m$label[blob == 2] == m$label[[1]]), 10)
  expect_lt(m$modes[m$label[[1]], 1], 5 * m$tol)
})

test_that("one mean-shift step is the kernel-derivative-weighted mean, from training points too", {
  # g_j = -k1(t_j), k1 = dk/dt, t = s^2, written here from k(s): dk/dt = k'(s) / (2s)
  ref_g <- function(kernel, s) {
    switch(kernel,
      gaussian     = exp(-s^2 / 2) / 2,
      epanechnikov = ifelse(s < 1, 1, 0),
      biweight     = ifelse(s < 1, 2 * (1 - s^2), 0),
      cosine       = ifelse(s < 1, ifelse(s == 0, pi^2 / 4, pi * sin(pi * s) / (4 * s)), 0),
      optcosine    = ifelse(s < 1, ifelse(s == 0, pi^2 / 8, pi * sin(pi * s / 2) / (4 * s)), 0)
    )
  }
  for (d in 1:2) {
    x <- ref_data(40, d, seed = 700 + d)
    H <- ref_full_H(d, 0.8, seed = 710 + d)
    set.seed(720 + d)
    w <- runif(40)
    start <- rbind(x[1:5, , drop = FALSE], x[6:10, , drop = FALSE] + 0.2)
    Rinv <- backsolve(chol(H), diag(d))
    for (kernel in c("gaussian", "epanechnikov", "biweight", "cosine", "optcosine")) {
      a <- ref_constants(kernel, d)$a
      expected <- t(apply(start, 1L, function(p) {
        s <- sqrt(rowSums((sweep(x, 2, p) %*% Rinv)^2)) / a
        g <- w * ref_g(kernel, s)
        colSums(g * x) / sum(g)
      }))
      if (d == 1) expected <- t(expected)
      fit <- kde_gpu(x, H = H, kernel = kernel, weights = w, backend = "cpu")
      one <- kde_modes(fit, start = start, max_iter = 1)
      dd_expect_close(one$end_points - start, expected - start, 1e-12,
                      sprintf("%s d=%d one mean-shift step", kernel, d))
    }
  }
})

test_that("kde_modes() checks its arguments", {
  x <- faithful
  for (kernel in c("triangular", "exponential", "rectangular")) {
    expect_error(kde_modes(kde_gpu(x, kernel = kernel, backend = "cpu")),
                 sprintf("`fit` has the %s kernel; mean shift needs the gaussian", kernel))
  }
  expect_error(kde_modes(kde_gpu(x, lower = 0, backend = "cpu"), start = c(-1, 2)),
               "`start` has points outside the fit's `lower`/`upper` bounds")
  fit <- kde_gpu(x, backend = "cpu")
  expect_error(kde_modes(fit, step_tol = 0), "`step_tol` must be one positive number")
  expect_error(kde_modes(fit, step_tol = c(1, 2)), "`step_tol` must be one positive number")
  expect_error(kde_modes(fit, merge_tol = -1), "`merge_tol` must be one positive number")
  expect_error(kde_modes(fit, merge_tol = NA_real_), "`merge_tol` must be one positive number")
  expect_error(kde_modes(fit, max_iter = 2.5), "`max_iter` must be one non-negative whole number")
  expect_error(kde_modes(fit, start = c(1, 2, 3)), "`start`")
  expect_error(kde_modes(fit, H = diag(2)), "kde_modes\\(\\) got unknown argument `H`")
  expect_error(kde_modes(faithful), "`fit`")
})
