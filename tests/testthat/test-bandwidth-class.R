# Every selector returns a kdegpu_bandwidth: its value in the shape's
# parametrisation (sd or sds where H is diagonal, H where it is full),
# H as an attribute, and kde_gpu() takes it as `bw` or `H` alike.

x1 <- faithful$eruptions
x2 <- as.matrix(faithful[1:120, ])

selections_1d <- list(
  SJ = function() bw_sj(x1, backend = "cpu"),
  `sj-dpi` = function() bw_sj(x1, "dpi", backend = "cpu"),
  plugin = function() bw_plugin(x1, backend = "cpu"),
  lscv = function() bw_lscv(x1, backend = "cpu"),
  mlcv = function() bw_mlcv(x1, backend = "cpu")
)
selections_2d <- list(
  plugin = function() bw_plugin(x2, backend = "cpu"),
  `plugin-diagonal` = function() bw_plugin(x2, "diagonal", backend = "cpu"),
  scv = function() bw_scv(x2, backend = "cpu"),
  `scv-diagonal` = function() bw_scv(x2, "diagonal", backend = "cpu"),
  lscv = function() bw_lscv(x2, "full", backend = "cpu"),
  `lscv-diagonal` = function() bw_lscv(x2, "diagonal", backend = "cpu"),
  `mlcv-scalar` = function() bw_mlcv(x2, "scalar", backend = "cpu")
)

check_selection <- function(b, name, x) {
  d <- NCOL(x)
  H <- attr(b, "H")
  shape <- attr(b, "shape")
  expect_s3_class(b, "kdegpu_bandwidth")
  expect_identical(attr(b, "method"), name)
  expect_identical(dim(H), c(d, d))
  # the value is the shape's parametrisation of H
  value <- unclass(b)
  attributes(value) <- attributes(value)[intersect(names(attributes(value)), c("dim", "names"))]
  switch(shape,
    scalar = {
      expect_length(value, 1L)
      expect_equal(H, diag(value^2, d), ignore_attr = TRUE)
    },
    diagonal = {
      expect_length(value, d)
      expect_equal(H, diag(value^2, d), ignore_attr = TRUE)
    },
    full = expect_equal(value, H, ignore_attr = TRUE)
  )
  # as `bw`, as `H` and by name, the same fit
  by_bw <- kde_gpu(x, bw = b, backend = "cpu")
  by_H <- kde_gpu(x, H = b, backend = "cpu")
  by_name <- kde_gpu(x, bw = name, backend = "cpu", weights = NULL)
  expect_equal(unname(by_bw$H), unname(H), tolerance = 1e-14, info = name)
  expect_equal(unname(by_H$H), unname(H), tolerance = 1e-14, info = name)
  expect_equal(unname(by_name$H), unname(H), tolerance = 1e-10, info = name)
  expect_identical(by_bw$bandwidth_type, shape)
  expect_identical(by_bw$bandwidth_method, name)
  expect_identical(by_name$bandwidth_method, name)
}

test_that("every selector returns the same kind of object, and kde_gpu() takes it as bw, H or name", {
  for (name in names(selections_1d)) {
    b <- selections_1d[[name]]()
    expect_identical(attr(b, "shape"), "scalar", info = name)
    check_selection(b, name, x1)
  }
  for (name in names(selections_2d)) {
    b <- selections_2d[[name]]()
    expect_identical(attr(b, "shape"), if (grepl("-", name)) sub(".*-", "", name) else "full",
                     info = name)
    check_selection(b, name, x2)
  }
  # names are case-insensitive and "ucv" is "lscv"
  expect_identical(kde_gpu(x1, bw = "LSCV", backend = "cpu")$H,
                   kde_gpu(x1, bw = "ucv", backend = "cpu")$H)
})

test_that("arithmetic acts on the printed value and keeps a usable bandwidth", {
  s <- bw_sj(x1, backend = "cpu")
  doubled <- 2 * s
  expect_s3_class(doubled, "kdegpu_bandwidth")
  expect_equal(as.numeric(doubled), 2 * as.numeric(s))
  expect_equal(attr(doubled, "H"), 4 * attr(s, "H"), ignore_attr = TRUE)
  expect_null(attr(doubled, "criterion"))
  expect_identical(attr(doubled, "method"), "derived from SJ")
  # the sd, not the variance, whether it goes in as bw or as H
  expect_equal(kde_gpu(x1, H = doubled, backend = "cpu")$bw, 2 * as.numeric(s))
  H <- bw_plugin(x2, backend = "cpu")
  half <- H / 2
  expect_equal(unclass(half), unclass(H) / 2, ignore_attr = TRUE)
  expect_equal(kde_gpu(x2, bw = half, backend = "cpu")$H, attr(H, "H") / 2, ignore_attr = TRUE)
  expect_equal(H + H, 2 * H)
  D <- bw_plugin(x2, "diagonal", backend = "cpu")
  expect_equal(kde_gpu(x2, H = D * c(1, 3), backend = "cpu")$bw, as.numeric(D) * c(1, 3),
               ignore_attr = TRUE)
  # comparisons and results that are no bandwidth are plain values
  expect_identical(s > 0, TRUE)
  expect_false(inherits(s - 10, "kdegpu_bandwidth"))
  expect_error(kde_gpu(x1, bw = s - 10, backend = "cpu"), "`bw` must be positive and finite")
  # an edit of the value is what the fit gets
  e <- D
  e[2] <- 5
  expect_equal(kde_gpu(x2, bw = e, backend = "cpu")$bw, c(as.numeric(D)[1], 5), ignore_attr = TRUE)
})

test_that("a selection prints its shape, method and search", {
  expect_output(print(bw_sj(x1, backend = "cpu")),
                "kdegpu bandwidth, SJ (scalar: the kernel's standard deviation)", fixed = TRUE)
  expect_output(print(bw_plugin(x2, backend = "cpu")),
                "plugin (full: the kernel's covariance matrix H)", fixed = TRUE)
  expect_output(print(bw_lscv(x1, backend = "cpu")), "criterion at the optimum")
})

test_that("damaged or mismatched selections are refused, naming the argument", {
  D <- bw_plugin(x2, "diagonal", backend = "cpu")
  expect_error(kde_gpu(cbind(x2, 1:120), bw = D, backend = "cpu"),
               "`bw` is a diagonal bandwidth selection of 2 values, which does not fit data with 3 columns")
  H <- bw_plugin(x2, backend = "cpu")
  expect_error(kde_gpu(cbind(x2, 1:120), H = H, backend = "cpu"), "`H` must be a 3 x 3 matrix")
  damaged <- D
  attr(damaged, "shape") <- "round"
  expect_error(kde_gpu(x2, bw = damaged, backend = "cpu"), "`bw` is a damaged bandwidth selection")
  expect_error(kde_gpu(x2, bw = "plugin-scalar", backend = "cpu"),
               "`bw` = \"plugin-scalar\" names no selector")
  expect_error(kde_gpu(x2, bw = "lscv-round", backend = "cpu"), "`bw` names an unknown rule")
  expect_error(kde_test(x2[1:60, ], x2[61:120, ], H1 = D[1], backend = "cpu"), "`H1`")
})
