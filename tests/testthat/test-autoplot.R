# ggplot2::autoplot(): the 1-D curve (with shaded highest-density regions)
# and the 2-D probability contours, from kde_grid() and contour_levels().

test_that("autoplot() of a 1-D fit draws its curve and shaded regions", {
  skip_if_not_installed("ggplot2")
  fit <- kde_gpu(faithful$eruptions, backend = "cpu")
  plot <- ggplot2::autoplot(fit, n = 200)
  expect_s3_class(plot, "ggplot")
  built <- expect_no_warning(ggplot2::ggplot_build(plot))
  curve <- built$data[[length(built$data)]]
  expect_equal(curve$y, predict(fit, curve$x), tolerance = 1e-13)
  expect_equal(nrow(curve), 200)
  shaded <- ggplot2::ggplot_build(ggplot2::autoplot(fit, prob = c(0.25, 0.5), n = 200))
  ribbons <- shaded$data[[1]]
  # one stretch for 25% (the higher mode), two for 50%
  expect_equal(length(unique(ribbons$group)), 3)
  levels <- contour_levels(fit, c(0.25, 0.5))
  expect_gte(min(ribbons$ymax), min(levels) * (1 - 1e-12))
})

test_that("autoplot() of a 2-D fit draws contours at the probability levels", {
  skip_if_not_installed("ggplot2")
  fit <- kde_gpu(faithful, backend = "cpu")
  plot <- ggplot2::autoplot(fit, n = 60)
  built <- expect_no_warning(ggplot2::ggplot_build(plot))
  raster <- built$data[[1]]
  expect_equal(nrow(raster), 3600)
  contours <- built$data[[2]]
  expect_equal(sort(unique(contours$level)), sort(unname(contour_levels(fit))))
  # The legend names each line by its share of probability.
  expect_setequal(as.character(unique(contours$linetype)), c("solid", "dashed", "dotted"))
  expect_equal(built$plot$scales$get_scales("linetype")$get_labels(), c("25%", "50%", "75%"))
  expect_equal(plot$labels$x, "eruptions")
  expect_equal(plot$labels$y, "waiting")
})

test_that("autoplot() draws margins of larger fits", {
  skip_if_not_installed("ggplot2")
  fit <- kde_gpu(quakes[1:200, c("lat", "long", "depth")], kernel = "epanechnikov",
                 backend = "cpu")
  built <- expect_no_warning(ggplot2::ggplot_build(
    ggplot2::autoplot(fit, margin = c("long", "lat"), n = 30)))
  expect_equal(nrow(built$data[[1]]), 900)
  expect_equal(length(unique(built$data[[2]]$level)), 3)
  one <- ggplot2::ggplot_build(ggplot2::autoplot(fit, margin = "depth", prob = 0.5, n = 50))
  expect_equal(nrow(one$data[[length(one$data)]]), 50)
})

test_that("autoplot() rejects bad input, naming the argument", {
  skip_if_not_installed("ggplot2")
  fit <- kde_gpu(quakes[1:100, c("lat", "long", "depth")], backend = "cpu")
  expect_error(ggplot2::autoplot(fit), "`object` has 3 dimensions.*`margin`")
  expect_error(ggplot2::autoplot(fit, margin = 1:3), "`margin`")
  expect_error(ggplot2::autoplot(fit, margin = 1:2, prob = 7), "`prob`")
  expect_error(ggplot2::autoplot(fit, margin = 1:2, n = 1), "`n`")
  expect_error(ggplot2::autoplot(fit, margin = 1:2, colour = "red"), "`colour`")
})
