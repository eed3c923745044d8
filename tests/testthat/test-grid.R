# kde_grid() and as.data.frame(): regular grids in up to 3 dimensions, long
# data frames, against stats::density() and plain-R sums.

test_that("a 1-D grid has density()'s limits and the plain-R density", {
  x <- faithful$eruptions
  fit <- kde_gpu(x, backend = "cpu")
  grid <- kde_grid(fit)
  expect_s3_class(grid, "data.frame")
  expect_named(grid, c("x", "density"))
  expect_equal(nrow(grid), 512)
  reference <- stats::density(x, n = 512)
  # The same grid as density()'s (cut = 3 bandwidths beyond the data) ...
  expect_equal(grid$x, reference$x, tolerance = 1e-14)
  # ... the exact density there, which density()'s binned FFT approximates.
  expect_equal(grid$density, ref_density(x, grid$x, fit$H, "gaussian"), tolerance = 1e-12)
  expect_lte(max(abs(grid$density - reference$y)) / max(reference$y), 2e-3)
  # Another kernel, limits and size.
  fit_e <- kde_gpu(x, bw = 0.3, kernel = "epanechnikov", backend = "cpu")
  grid_e <- kde_grid(fit_e, n = 101, lims = c(1, 6))
  expect_equal(grid_e$x, seq(1, 6, length.out = 101))
  expect_equal(grid_e$density, ref_density(x, grid_e$x, 0.09, "epanechnikov"), tolerance = 1e-12)
  expect_equal(kde_grid(fit_e, cut = 1)$x[1], min(x) - 0.3, tolerance = 1e-14)
  # A named column names the grid's axis.
  expect_named(kde_grid(kde_gpu(faithful["waiting"], backend = "cpu"), n = 5),
               c("waiting", "density"))
})

test_that("2-D and 3-D grids are long, first axis fastest, with the exact density", {
  x <- as.matrix(faithful)
  set.seed(530)
  w <- runif(nrow(x))
  fit <- kde_gpu(x, kernel = "biweight", weights = w, backend = "cpu")
  grid <- kde_grid(fit, n = c(6, 4))
  expect_named(grid, c("eruptions", "waiting", "density"))
  expect_equal(nrow(grid), 24)
  expect_equal(grid$eruptions[1:6], unique(grid$eruptions))
  expect_equal(range(grid$waiting), range(x[, 2]) + c(-3, 3) * sqrt(fit$H[2, 2]),
               tolerance = 1e-14)
  expect_equal(grid$density, ref_density(x, as.matrix(grid[, 1:2]), fit$H, "biweight", w),
               tolerance = 1e-12)
  # as image() takes it
  z <- matrix(grid$density, 6)
  expect_equal(z[2, 3], grid$density[grid$eruptions == unique(grid$eruptions)[2] &
                                       grid$waiting == unique(grid$waiting)[3]])
  grid_l <- kde_grid(fit, n = 3, lims = c(1, 5, 40, 100))
  expect_equal(unique(grid_l$eruptions), c(1, 3, 5))
  expect_equal(unique(grid_l$waiting), c(40, 70, 100))

  x3 <- ref_data(40, 3, seed = 531)
  fit3 <- kde_gpu(x3, kernel = "triangular", backend = "cpu")
  grid3 <- kde_grid(fit3, n = 5)
  expect_named(grid3, c("x1", "x2", "x3", "density"))
  expect_equal(nrow(grid3), 125)
  expect_equal(grid3$density, ref_density(x3, as.matrix(grid3[, 1:3]), fit3$H, "triangular"),
               tolerance = 1e-12)
  expect_equal(nrow(kde_grid(kde_gpu(x3, backend = "cpu"))), 51^3)
})

test_that("as.data.frame() of a fit is its grid", {
  fit <- kde_gpu(faithful, backend = "cpu")
  expect_identical(as.data.frame(fit, n = 7), kde_grid(fit, n = 7))
  expect_identical(as.data.frame(fit, n = 4, lims = c(40, 90), margin = "waiting"),
                   kde_grid(fit, n = 4, lims = c(40, 90), margin = "waiting"))
  expect_equal(nrow(as.data.frame(fit)), 151^2)
  expect_identical(row.names(as.data.frame(fit, row.names = letters[1:4], n = 2)),
                   letters[1:4])
  expect_error(as.data.frame(fit, n = 2, row.names = "a"), "`row.names`")
  expect_error(as.data.frame(fit, nn = 2), "`nn`.*Did you mean `n`")
})

test_that("grids of 4-D fits take a margin; a column called density is renamed", {
  fit <- kde_gpu(iris[1:4], backend = "cpu")
  expect_error(kde_grid(fit), "`fit` has 4 dimensions.*`margin`")
  grid <- kde_grid(fit, n = 5, margin = c("Petal.Width", "Sepal.Length"))
  expect_named(grid, c("Petal.Width", "Sepal.Length", "density"))
  expect_identical(kde_grid(fit, n = 5, margin = c(4, 1)), grid)
  x <- data.frame(density = faithful$eruptions, waiting = faithful$waiting)
  expect_named(kde_grid(kde_gpu(x, backend = "cpu"), n = 3),
               c("density.1", "waiting", "density"))
})

test_that("kde_grid() rejects bad input, naming the argument", {
  fit <- kde_gpu(faithful, backend = "cpu")
  expect_error(kde_grid(faithful), "`fit`")
  for (bad in list(1, 0, NA, "a", 2.5, c(3, 4, 5), Inf)) {
    expect_error(kde_grid(fit, n = bad), "`n`")
  }
  for (bad in list(c(1, 2), c(1, 5, 90, 40), c(1, NA, 40, 90), "a", c(1, 5, 40, Inf))) {
    expect_error(kde_grid(fit, lims = bad), "`lims`")
  }
  for (bad in list(-1, NA, c(1, 2), "3")) expect_error(kde_grid(fit, cut = bad), "`cut`")
  for (bad in list("speed", 3, 0, c(1, 1), 1.5, TRUE, c(1, 2, 1, 2))) {
    expect_error(kde_grid(fit, margin = bad), "`margin`")
  }
})
