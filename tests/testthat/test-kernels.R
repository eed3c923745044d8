# The kernel profiles of inst/include/kdegpu/kernels.h against references
# computed independently of their formulas.

test_that("the cosine profiles keep their relative accuracy at the support's edge", {
  entry <- kdegpu:::C_kdegpu_log_density_cpu
  # one training point at 0 and queries at s = 1 - 2^-k (exact, and so is
  # s^2 for k <= 26): the CPU entry point returns log k(s) itself
  k <- c(8, 12, 16, 20, 24, 26)
  t <- 2^-k
  s <- 1 - t
  profile <- function(kernel) {
    exp(as.vector(.Call(entry, matrix(0), 1, NULL, 0L, matrix(s), NULL, NULL,
                        kernel, 0, FALSE, 0, 1L, -1)))
  }
  # references as series in y = pi t / 2 (no cancellation, no pi rounding
  # beyond its relative 4e-17): sin y = y (1 - y^2/6 + y^4/120 - y^6/5040)
  y <- pi * t / 2
  sin_y <- y * (1 - y^2 / 6 + y^4 / 120 - y^6 / 5040 + y^8 / 362880)
  expect_equal(profile(5L), sin_y^2, tolerance = 1e-14)     # cosine: (1 + cos(pi s)) / 2
  expect_equal(profile(6L), sin_y, tolerance = 1e-14)       # optcosine: cos(pi s / 2)
  # and the margins' R profile (R/margins.R) agrees
  expect_equal(kdegpu:::kernel_profile("cosine")(s), sin_y^2, tolerance = 1e-14)
  expect_equal(kdegpu:::kernel_profile("optcosine")(s), sin_y, tolerance = 1e-14)
  # and away from the edge, the plain definitions
  mid <- c(0, 0.1, 0.5, 0.9)
  expect_equal(kdegpu:::kernel_profile("cosine")(mid), (1 + cos(pi * mid)) / 2, tolerance = 1e-15)
})
