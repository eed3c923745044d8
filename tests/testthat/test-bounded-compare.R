# Bounded support compared with other packages' boundary estimators (issue
# 17): ks::kde.boundary, ks::kde.truncate and stats::density(from =).
#
# What ks 1.14.0 computes (read from its source):
# - kde.boundary() has no reflection. Its default boundary.kernel = "beta"
#   (d = 1, 2, 3) rescales the box [xmin, xmax] to [0, 1]^d and gives every
#   point within boundary.supp (default 10) bandwidths of a face a beta
#   kernel (Chen's modified one, b = (2 h / (xmax - xmin))^2) instead of the
#   normal one; "linear" boundary kernels exist for d = 2 only. It evaluates
#   on its own grid only (eval.points: "Not yet implemented").
# - kde.truncate() (d = 2 only, a polygon through mgcv::in.out) sets a
#   gridded estimate to 0 outside the polygon and rescales it by the ratio
#   of two grid quadratures, which estimates 1 / P(support).
# So no ks estimator equals the reflection estimator. What holds exactly is
# checked exactly: the reflection estimator is ks::kde()'s unbounded
# estimate summed over the mirror images of the query, and kde.truncate()
# is that unbounded estimate over its mass on the support. What holds only
# approximately (the beta kernel estimate, ks's quadrature of the mass) is
# checked where it must hold: far from the bound, integrals, and accuracy
# near the bound on data of known density.

# Trapezoid rule of f on the grid g.
trapezoid <- function(f, g) sum((f[-1] + f[-length(f)]) / 2 * diff(g))

test_that("1-D: the reflection estimate is ks::kde()'s unbounded one plus its mirror image", {
  skip_if_not_installed("ks")
  # For lower = 0, f_refl(q) = f(q) + f(-q) (q >= 0): the images 2L - x_j of
  # the data seen from q are the data seen from the mirrored query.
  set.seed(1)
  cases <- list(exponential = rexp(500), precip = precip, rivers = rivers)
  for (name in names(cases)) {
    x <- cases[[name]]
    h <- bw.nrd0(x)
    w <- runif(length(x))
    q <- seq(0, max(x) + 4 * h, length.out = 301)
    # ks's weights sum to n
    f_ks <- ks::kde(x, h = h, eval.points = c(q, -q), w = length(x) * w / sum(w),
                    binned = FALSE)$estimate
    expected <- f_ks[seq_along(q)] + f_ks[length(q) + seq_along(q)]
    for (be in eval_backends()) {
      fit <- kde_on(be, x, bw = h, weights = w, lower = 0)
      expect_log_density_equal(predict(fit, q, log = TRUE), log(expected), be$tol,
                               label = be_label(be, name))
      expect_identical(predict(fit, c(-h, -1e-9)), c(0, 0))
    }
  }
})

test_that("1-D: ks::kde.boundary (beta kernels) agrees far from the bound; both beat the plain KDE near it", {
  skip_if_not_installed("ks")
  set.seed(1)
  cases <- list(exponential = rexp(2000), precip = precip, rivers = rivers)
  supp_b <- 10  # kde.boundary's boundary.supp for beta kernels
  for (name in names(cases)) {
    x <- cases[[name]]
    h <- bw.nrd0(x)
    # xmax well beyond the data, so no point gets a beta kernel at the top
    kb <- ks::kde.boundary(x, h = h, xmin = 0, xmax = max(x) + 15 * h, gridsize = 2001L,
                           binned = FALSE, compute.cont = FALSE, boundary.kernel = "beta",
                           boundary.supp = supp_b)
    g <- kb$eval.points
    refl <- predict(kde_gpu(x, bw = h, lower = 0, backend = "cpu"), g)
    free <- predict(kde_gpu(x, bw = h, backend = "cpu"), g)
    # Beyond supp_b + 8 bandwidths ks has only normal kernels of points that
    # are themselves past the beta zone, and no image reaches: all three are
    # the unbounded estimate (for precip only its upper tail is that far).
    far <- g >= (supp_b + 8) * h
    expect_lt(max(abs(kb$estimate[far] / free[far] - 1)), 1e-10, label = paste(name, "ks far"))
    expect_lt(max(abs(refl[far] / kb$estimate[far] - 1)), 1e-10, label = paste(name, "refl far"))
    expect_lt(max(abs(refl[g >= 8 * h] / free[g >= 8 * h] - 1)), 1e-12, label = name)
    # Both corrected estimates integrate to 1 on [0, xmax]; the plain one
    # to 1 - P(X < 0) = 1 - mean(pnorm(-x / h)) (a check of the quadrature).
    # ks's beta kernels are narrow at the bound, so its trapezoid sum is
    # only good to ~2e-3 on this grid; the reflection estimate is flat at
    # the bound and smooth, so the trapezoid rule is nearly exact.
    expect_equal(trapezoid(kb$estimate, g), 1, tolerance = 5e-3, label = paste(name, "ks mass"))
    expect_equal(trapezoid(refl, g), 1, tolerance = 1e-6, label = paste(name, "refl mass"))
    lost <- mean(pnorm(-x / h))
    expect_equal(trapezoid(free, g), 1 - lost, tolerance = 1e-5, label = paste(name, "free mass"))
    if (name == "exponential") {
      expect_gt(lost, 0.05)
      # Near the bound both corrections are much closer to the true
      # density than the unbounded estimate. ks's beta estimate is 0 at the
      # bound itself (shape1 > 1 there), so g = 0 is left out.
      near <- g > 0 & g <= 2 * h
      err <- function(f) mean((f[near] - dexp(g[near]))^2)
      expect_lt(err(refl), 0.25 * err(free))
      expect_lt(err(kb$estimate), 0.25 * err(free))
    }
  }
})

test_that("2-D: ks::kde.truncate is the unbounded estimate over its mass on the support", {
  skip_if_not_installed("ks")
  set.seed(7)
  n <- 300
  x <- cbind(rexp(n), rgamma(n, 2))
  hs <- c(0.25, 0.35)
  H <- diag(hs^2)
  # A grid of step s with the bound 0 halfway between two grid lines, so
  # that kde.truncate's cell-midpoint quadrature of the support is second
  # order; supp = 10 keeps ks's per-kernel cut-off below 1e-20.
  s <- 0.1
  lo <- -20.5 * s
  gs <- ceiling((max(x) + 12 * max(hs) - lo) / s) + 1
  hi <- lo + (gs - 1) * s
  fk <- ks::kde(x, H = H, binned = FALSE, supp = 10, gridsize = c(gs, gs), xmin = c(lo, lo),
                xmax = c(hi, hi), compute.cont = FALSE)
  box <- rbind(c(0, 0), c(hi + 1, 0), c(hi + 1, hi + 1), c(0, hi + 1))
  ft <- ks::kde.truncate(fk, box)
  g <- as.matrix(expand.grid(fk$eval.points))
  inside <- g[, 1] >= 0 & g[, 2] >= 0
  free <- predict(kde_gpu(x, H = H, backend = "cpu"), g)
  refl <- predict(kde_gpu(x, H = H, lower = c(0, 0), backend = "cpu"), g)
  # Where ks's cut-off kernels are exact to double precision.
  ok <- free > 1e-10 * max(free)
  # Truncation: 0 outside, and inside exactly the unbounded estimate times
  # one constant, which is 1 / P(support); P(support) is exact here (a
  # Gaussian with diagonal H on a quadrant), ks's constant a grid quadrature.
  expect_true(all(ft$estimate[!inside] == 0))
  expect_true(all(refl[!inside] == 0))
  ratio <- ft$estimate[inside & ok] / free[inside & ok]
  expect_lt(diff(range(ratio)) / mean(ratio), 1e-10)
  mass <- mean(pnorm(x[, 1] / hs[1]) * pnorm(x[, 2] / hs[2]))
  expect_lt(mass, 0.95)
  expect_equal(1 / mean(ratio), mass, tolerance = 2e-3)
  # Far from both bounds reflection adds nothing, so there it equals the
  # truncated estimate times P(support); near them it adds the mirrored
  # mass locally where truncation rescales everywhere.
  far <- inside & ok & g[, 1] > 8 * hs[1] & g[, 2] > 8 * hs[2]
  expect_lt(max(abs(refl[far] / (mass * ft$estimate[far]) - 1)), 2e-3)
  # Reflection, exactly: the sum of ks::kde()'s unbounded estimate over the
  # query's images S q, S = diag(+-1, +-1), also for a full H (whose images
  # carry S H S, i.e. K_SHS(q - S x) = K_H(S q - x)). On the grid points
  # near the corner and a spread of the others.
  near_corner <- which(inside & g[, 1] < 1 & g[, 2] < 1)
  q <- g[sort(c(near_corner, which(inside & ok)[seq(1, sum(inside & ok), by = 60)])), ]
  signs <- as.matrix(expand.grid(c(1, -1), c(1, -1)))
  images <- do.call(rbind, lapply(1:4, function(r) sweep(q, 2, signs[r, ], "*")))
  H_full <- matrix(c(0.0625, 0.04, 0.04, 0.1225), 2)
  for (HH in list(H, H_full)) {
    expected <- rowSums(matrix(ks::kde(x, H = HH, eval.points = images, binned = FALSE)$estimate,
                               nrow(q)))
    for (be in eval_backends()) {
      fit <- kde_on(be, x, H = HH, lower = c(0, 0))
      expect_log_density_equal(predict(fit, q, log = TRUE), log(expected), be$tol,
                               label = be_label(be, "2-D images"))
    }
  }
})

test_that("1-D: the reflection estimate is density() of the data and their mirror image, doubled", {
  # density(c(x, -x), from = 0) * 2 is the textbook way to reflect with
  # stats; it bins and convolves by FFT, so agreement is to ~2e-4 of the
  # peak. The mirrored mass is ~2% of the peak for these data, so an
  # estimate without it (the unbounded one) fails the same check.
  for (x in list(precip, rivers)) {
    h <- bw.nrd0(x)
    d <- stats::density(c(x, -x), bw = h, from = 0, to = max(x) + 3 * h, n = 2048)
    reference <- 2 * d$y
    refl <- predict(kde_gpu(x, bw = h, lower = 0, backend = "cpu"), d$x)
    free <- predict(kde_gpu(x, bw = h, backend = "cpu"), d$x)
    expect_lt(max(abs(refl - reference)) / max(reference), 1e-3)
    expect_gt(max(abs(free - reference)) / max(reference), 1e-2)
  }
})
