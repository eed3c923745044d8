# Checks of the plain-R reference in helper-reference.R itself, so that the
# package is compared against something known to be right.

test_that("numerical profile moments match their closed forms", {
  for (p in 0:6) {
    expect_equal(ref_moment("gaussian", p), 2^((p - 1) / 2) * gamma((p + 1) / 2),
                 tolerance = 1e-12)
    expect_equal(ref_moment("exponential", p), factorial(p), tolerance = 1e-12)
    expect_equal(ref_moment("rectangular", p), 1 / (p + 1), tolerance = 1e-12)
    expect_equal(ref_moment("triangular", p), 1 / (p + 1) - 1 / (p + 2),
                 tolerance = 1e-12)
    expect_equal(ref_moment("epanechnikov", p), 1 / (p + 1) - 1 / (p + 3),
                 tolerance = 1e-12)
    expect_equal(ref_moment("biweight", p), 8 / ((p + 1) * (p + 3) * (p + 5)),
                 tolerance = 1e-12)
  }
  # Cosine profiles: two low moments by hand.
  expect_equal(ref_moment("cosine", 0), 1 / 2, tolerance = 1e-12)
  expect_equal(ref_moment("cosine", 2), 1 / 6 - 1 / pi^2, tolerance = 1e-12)
  expect_equal(ref_moment("optcosine", 0), 2 / pi, tolerance = 1e-12)
  expect_equal(ref_moment("optcosine", 2), 2 / pi - 16 / pi^3, tolerance = 1e-12)
})

test_that("1-D reference kernels equal stats::density()'s closed forms", {
  s <- seq(-6, 6, by = 0.01)
  for (bw in c(0.3, 1, 2.5)) {
    for (k in ref_kernels) {
      got <- ref_density(0, s, bw^2, k)
      want <- ref_density_kernel_1d(k, s, bw)
      # 1e-11: near the support's edge both sides cancel (1 - s^2).
      expect_density_equal(got, want, tol = 1e-11, label = paste(k, bw))
    }
  }
  # A shifted, weighted mixture is the weighted sum of shifted kernels.
  x <- c(-1, 0.2, 3)
  w <- c(1, 2, 5)
  for (k in ref_kernels) {
    want <- colSums(w / sum(w) * t(outer(s, x, function(a, b)
      ref_density_kernel_1d(k, a - b, 0.8))))
    # 1e-11: stats' (1 + cos(pi x / a)) cancels near the support's edge
    expect_density_equal(ref_density(x, s, 0.64, k, w), want, tol = 1e-11,
                         label = k)
  }
})

test_that("the reference's gaussian is the multivariate normal density", {
  for (d in c(2, 3, 5)) {
    H <- ref_full_H(d, 0.6, d)
    x <- ref_data(30, d, d + 1)
    q <- ref_queries(x, 20, d + 2)
    want <- apply(q, 1, function(qq) {
      v <- -d / 2 * log(2 * pi) - 0.5 * c(determinant(H)$modulus) -
        0.5 * mahalanobis(x, qq, H)
      ref_log_sum_exp(v) - log(nrow(x))
    })
    expect_log_density_equal(ref_log_density(x, q, H, "gaussian"), want,
                             tol = 1e-12, label = paste("d =", d))
  }
})

test_that("1-D reference kernels integrate to 1 with variance bw^2", {
  for (k in ref_kernels) {
    f <- function(t) ref_density(0, t, 0.49, k)
    lim <- if (k %in% ref_compact) ref_constants(k, 1)$a * 0.7 else Inf
    expect_equal(integrate(f, -lim, lim, rel.tol = 1e-11)$value, 1,
                 tolerance = 1e-9, label = k)
    expect_equal(integrate(function(t) t^2 * f(t), -lim, lim,
                           rel.tol = 1e-11)$value, 0.49,
                 tolerance = 1e-9, label = k)
  }
})

test_that("2-D reference kernels with full H integrate to 1 with covariance H", {
  H <- matrix(c(0.8, 0.3, 0.3, 0.5), 2, 2)
  P <- solve(H)
  center <- c(0.4, -1)
  for (k in ref_kernels) {
    a <- ref_constants(k, 2)$a
    # Support (compact) or effective support (unbounded): the ellipse
    # (z' P z) <= r^2; integrate y over its chord at each x so that the
    # integrand is smooth on every inner interval.
    r <- if (k %in% ref_compact) a else 15
    chord <- function(z1) {
      disc <- pmax(P[1, 2]^2 * z1^2 - P[2, 2] * (P[1, 1] * z1^2 - r^2), 0)
      (-P[1, 2] * z1 + c(-1, 1) * sqrt(disc)) / P[2, 2]
    }
    x1max <- r * sqrt(H[1, 1])
    moment <- function(g) {
      inner <- function(z1) vapply(z1, function(u) {
        ch <- chord(u)
        integrate(function(z2) {
          q <- cbind(center[1] + u, center[2] + z2)
          g(u, z2) * ref_density(matrix(center, 1), q, H, k)
        }, ch[1], ch[2], rel.tol = 1e-9, stop.on.error = FALSE)$value
      }, numeric(1))
      integrate(inner, -x1max, x1max, rel.tol = 1e-9)$value
    }
    expect_equal(moment(function(u, v) 1), 1, tolerance = 1e-6, label = k)
    expect_equal(moment(function(u, v) u^2), H[1, 1], tolerance = 1e-6,
                 label = k)
    expect_equal(moment(function(u, v) u * v), H[1, 2], tolerance = 1e-6,
                 label = k)
  }
})

test_that("reference kernels in d = 3, 5 have mass 1 and E|z|^2 = d", {
  # Radial integration of the reference evaluated along a ray (H = I).
  for (d in c(3, 5)) {
    for (k in ref_kernels) {
      a <- ref_constants(k, d)$a
      top <- if (k %in% ref_compact) a else Inf
      g <- function(r) {
        ref_density(matrix(0, 1, d), cbind(r, matrix(0, length(r), d - 1)),
                    diag(d), k)
      }
      area <- exp(ref_log_sphere_area(d))
      mass <- integrate(function(r) area * r^(d - 1) * g(r), 0, top,
                        rel.tol = 1e-11)$value
      m2 <- integrate(function(r) area * r^(d + 1) * g(r), 0, top,
                      rel.tol = 1e-11)$value
      expect_equal(mass, 1, tolerance = 1e-9, label = paste(k, d))
      expect_equal(m2, d, tolerance = 1e-9, label = paste(k, d))
    }
  }
})

test_that("the reference is finite far from the data for unbounded kernels", {
  bw <- 0.3
  expect_equal(ref_log_density(0, 1e3, bw^2, "gaussian"),
               -0.5 * 1e6 / bw^2 - log(sqrt(2 * pi) * bw), tolerance = 1e-14)
  expect_equal(ref_log_density(0, -1e3, bw^2, "exponential"),
               -log(sqrt(2) * bw) - sqrt(2) * 1e3 / bw, tolerance = 1e-14)
  for (k in ref_compact) {
    expect_identical(ref_log_density(0, 1e3, bw^2, k), -Inf)
  }
})

test_that("the reference's constants in d = 67 and 137 match their closed forms", {
  # The wide cases of test-evaluation.R: s^(d-1) k(s) is a narrow bump far
  # from 0 there, and overflows a double beyond it.
  for (d in c(67, 137)) {
    log_area <- ref_log_sphere_area(d)
    g <- ref_constants("gaussian", d)
    expect_equal(g$a, 1, tolerance = 1e-13)
    expect_equal(g$log_c, -d / 2 * log(2 * pi), tolerance = 1e-13)
    # Exponential: M_p = p!, so a = 1 / sqrt(d + 1), C = 1 / (area a^d (d-1)!).
    e <- ref_constants("exponential", d)
    expect_equal(e$a, 1 / sqrt(d + 1), tolerance = 1e-13)
    expect_equal(e$log_c, -log_area - d * log(e$a) - lgamma(d), tolerance = 1e-13)
    # Epanechnikov: M_p = 2 / ((p + 1)(p + 3)), so a = sqrt(d + 4).
    ep <- ref_constants("epanechnikov", d)
    expect_equal(ep$a, sqrt(d + 4), tolerance = 1e-13)
    expect_equal(ep$log_c, -log_area - d * log(ep$a) - log(2 / (d * (d + 2))),
                 tolerance = 1e-13)
  }
})
