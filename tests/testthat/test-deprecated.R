# Renamed arguments keep working for one release: the same answer as the
# new name, with a warning that names the new one; both at once is an error.

x1 <- faithful$eruptions
x2 <- as.matrix(faithful[1:120, ])

test_that("bandwidth selectors: type is shape, tol is reltol", {
  expect_warning(a <- bw_plugin(x2, type = "diagonal", backend = "cpu"),
                 "bw_plugin(): `type` is deprecated; use `shape`", fixed = TRUE)
  expect_identical(a, bw_plugin(x2, shape = "diagonal", backend = "cpu"))
  expect_warning(a <- bw_scv(x2, type = "diagonal", backend = "cpu"),
                 "bw_scv(): `type` is deprecated; use `shape`", fixed = TRUE)
  expect_identical(a, bw_scv(x2, shape = "diagonal", backend = "cpu"))
  expect_warning(b <- bw_lscv(x1, tol = 1e-4, grid = 9, backend = "cpu"),
                 "bw_lscv(): `tol` is deprecated; use `reltol`", fixed = TRUE)
  expect_identical(b, bw_lscv(x1, reltol = 1e-4, grid = 9, backend = "cpu"))
  expect_warning(b <- bw_mlcv(x2, type = "diagonal", grid = 5, backend = "cpu"),
                 "bw_mlcv(): `type` is deprecated; use `shape`", fixed = TRUE)
  expect_identical(b, bw_mlcv(x2, shape = "diagonal", grid = 5, backend = "cpu"))
  expect_error(suppressWarnings(bw_scv(x2, shape = "full", type = "full", backend = "cpu")),
               "`shape` is given twice, also under its old name `type`")
})

test_that("kde_modes(tol =) is step_tol, loo_error(object =) is fit", {
  fit <- kde_gpu(x2, backend = "cpu")
  expect_warning(m <- kde_modes(fit, tol = 1e-2), "`tol` is deprecated; use `step_tol`")
  expect_identical(m, kde_modes(fit, step_tol = 1e-2))
  cl <- kde_classifier(iris[, 1:2], iris$Species, bw = 0.3, backend = "cpu")
  expect_warning(e <- loo_error(object = cl), "`object` is deprecated; use `fit`")
  expect_identical(e, loo_error(cl))
})

test_that("as.density(from =, to =) is lims", {
  fit <- kde_gpu(x1, backend = "cpu")
  expect_warning(d <- as.density(fit, from = 1, to = 6), "use `lims = c(from, to)`", fixed = TRUE)
  expect_identical(d$x, as.density(fit, lims = c(1, 6))$x)
  expect_warning(d <- as.density(fit, to = 6), "deprecated")
  expect_identical(d$x, as.density(fit, lims = c(NA, 6))$x)
  expect_error(suppressWarnings(as.density(fit, lims = c(1, 6), from = 1)),
               "`lims` is given together with its old spelling")
  expect_error(as.density(fit, lims = c(6, 1)), "`lims` must be c(from, to)", fixed = TRUE)
})
