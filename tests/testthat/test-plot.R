# plot() of a fit: 1-D curves with shaded highest-density regions, 2-D
# probability contours over an image with a key, the matrix of margins in
# d > 2; `...` routed without warnings; what is drawn, read back from the
# device's display list.

# Runs `code` on a null PDF device and returns what it drew: a list of
# list(name = the graphics routine, e.g. "C_contour", args = its arguments).
drawn <- function(code) {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  grDevices::dev.control("enable")
  force(code)
  lapply(grDevices::recordPlot()[[1]], function(entry) {
    routine <- entry[[2]][[1]]
    list(name = if (is.list(routine)) routine$name else "", args = entry[[2]][-1])
  })
}

calls_named <- function(calls, name) Filter(function(call) call$name == name, calls)

# A plot drawn on a null device, for expectations about warnings and par.
on_null_device <- function(code) {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  force(code)
}

test_that("2-D: contours at the probability levels, labelled, over an image with a key", {
  fit <- kde_gpu(faithful, backend = "cpu")
  calls <- drawn(plot(fit))
  contours <- calls_named(calls, "C_contour")
  expect_length(contours, 1)
  levels <- contour_levels(fit)
  expect_equal(contours[[1]]$args[[4]], sort(unname(levels)))
  expect_equal(contours[[1]]$args[[5]], c("75%", "50%", "25%"))
  expect_length(calls_named(calls, "C_raster"), 1)
  # the key: its colour bar's cells, beside the plot
  expect_gte(length(calls_named(calls, "C_rect")), 1)
  calls_plain <- drawn(plot(fit, prob = c(0.5, 0.9), image = FALSE))
  expect_length(calls_named(calls_plain, "C_raster"), 0)
  expect_length(calls_named(calls_plain, "C_rect"), 0)
  expect_equal(calls_named(calls_plain, "C_contour")[[1]]$args[[5]], c("90%", "50%"))
  expect_length(calls_named(drawn(plot(fit, prob = NULL)), "C_contour"), 0)
})

test_that("2-D: `...` reaches the contours and the frame without warnings", {
  fit <- kde_gpu(faithful, kernel = "epanechnikov", backend = "cpu")
  on_null_device({
    expect_no_warning(plot(fit, col = "blue", lwd = 2))
    expect_no_warning(plot(fit, col = "blue", lty = 2, labcex = 1, las = 1, cex.axis = 0.8,
                           sub = "faithful", font.main = 1, drawlabels = FALSE))
    expect_no_warning(plot(fit, image = FALSE, col = 3, axes = FALSE))
    expect_no_warning(plot(fit, xlim = c(1, 6), ylim = c(40, 100)))
  })
  contour_call <- calls_named(drawn(plot(fit, col = "blue", lwd = 2)), "C_contour")[[1]]
  expect_true(all(c("blue", 2) %in% unlist(contour_call$args)))
})

test_that("2-D: the plot's coordinates are the grid's, so points() lands; par comes back", {
  fit <- kde_gpu(faithful, backend = "cpu")
  on_null_device({
    mar <- graphics::par("mar")
    out <- withVisible(plot(fit, xlim = c(1, 6), ylim = c(40, 100)))
    expect_false(out$visible)
    expect_identical(out$value, fit)
    expect_equal(graphics::par("usr"), c(1, 6, 40, 100))
    expect_equal(graphics::par("mar"), mar)
    expect_no_warning(graphics::points(faithful))
  })
})

test_that("1-D: the curve of density(), with the highest-density regions shaded", {
  x <- faithful$eruptions
  fit <- kde_gpu(x, backend = "cpu")
  calls <- drawn(plot(fit))
  curve <- calls_named(calls, "C_plotXY")[[1]]$args[[1]]
  expect_equal(curve$y, predict(fit, curve$x), tolerance = 1e-13)
  expect_length(calls_named(calls, "C_polygon"), 0)
  # 50%: one region around each mode; 10%: only around the higher mode.
  shaded <- drawn(plot(fit, prob = c(0.1, 0.5), col = "red"))
  polygons <- calls_named(shaded, "C_polygon")
  expect_length(polygons, 3)
  level <- contour_levels(fit, 0.5)
  for (polygon in polygons[1:2]) {
    # The region's ends sit on the curve at the level, between grid points.
    ends <- polygon$args[[1]][c(2, length(polygon$args[[1]]) - 1)]
    expect_equal(predict(fit, ends), rep(unname(level), 2), tolerance = 1e-3)
  }
  on_null_device({
    expect_no_warning(plot(fit, prob = 0.5, col = "blue", lwd = 2, xlim = c(0, 7), las = 1))
    expect_no_warning(plot(fit, prob = c(0.5, 0.9), fill = c("grey80", "grey60"), key = FALSE))
  })
  expect_equal(range(calls_named(drawn(plot(fit, xlim = c(0, 7))), "C_plotXY")[[1]]$args[[1]]$x),
               c(0, 7))
})

test_that("d > 2: a matrix of margins, every kernel, with axes and the columns' names", {
  x <- quakes[1:300, c("lat", "long", "depth")]
  for (kernel in c("gaussian", "epanechnikov")) {
    fit <- kde_gpu(x, kernel = kernel, backend = "cpu")
    calls <- drawn(plot(fit, n = 20))
    expect_length(calls_named(calls, "C_contour"), 6)
    expect_length(calls_named(calls, "C_raster"), 6)
    texts <- unlist(lapply(c(calls_named(calls, "C_text"), calls_named(calls, "C_mtext")),
                           function(call) call$args[[1]]))
    expect_true(all(c("lat", "long", "depth") %in% texts))
    expect_gte(length(calls_named(calls, "C_axis")), 4)
  }
  on_null_device({
    expect_no_warning(plot(kde_gpu(iris[1:4], kernel = "biweight", backend = "cpu"), n = 15,
                           col = "blue", lwd = 2, cex.axis = 0.7))
    expect_equal(graphics::par("mfrow"), c(1, 1))
  })
})

test_that("a margin's contour levels from its grid are close to the exact ones", {
  x <- as.matrix(quakes[, c("lat", "long", "depth")])
  fit <- kde_gpu(x, backend = "cpu")
  axes <- kdegpu:::grid_axes(fit, c(2, 1), 64, NULL, 3)
  z <- matrix(kde_grid(fit, n = 64, margin = c(2, 1))$density, 64)
  # For the Gaussian the margin is the fit of those columns with H's block.
  margin <- kde_gpu(x[, c(2, 1)], H = fit$H[c(2, 1), c(2, 1)], backend = "cpu")
  for (coverage in c("estimate", "data")) {
    approximate <- kdegpu:::grid_levels(fit, c(2, 1), axes, z, c(0.25, 0.5, 0.75), coverage)
    exact <- contour_levels(margin, coverage = coverage)
    expect_equal(approximate, exact, tolerance = 0.02, ignore_attr = "se")
  }
})

test_that("plot() rejects bad input, naming the argument", {
  fit <- kde_gpu(faithful, backend = "cpu")
  on_null_device({
    expect_error(plot(fit, prob = 2), "`prob`")
    expect_error(plot(fit, image = "yes"), "`image`")
    expect_error(plot(fit, key = NA), "`key`")
    expect_error(plot(fit, fill = "not a colour"), "`fill`")
    expect_error(plot(fit, n = 1), "`n`")
    expect_error(plot(fit, levels = 0.01), "`levels`.*`prob`")
    expect_error(plot(fit, nlevels = 5), "`nlevels`")
    expect_error(plot(fit, add = TRUE), "`add`")
    expect_error(plot(fit, xlim = "a"), "`xlim`")
    expect_error(plot(fit, ylim = c(1, 1)), "`ylim`")
    expect_error(plot(fit, NULL, 100, TRUE, TRUE, NULL, "m", "x", "y", "extra"), "by name")
    expect_error(plot(kde_gpu(faithful$waiting, backend = "cpu"), xlim = 1), "`xlim`")
    expect_error(plot(kde_gpu(quakes[1:50, 1:3], backend = "cpu"), ylim = c(1, 2)), "`ylim`")
    expect_error(plot(structure(list(), class = "kde_gpu")), "`x`")
  })
})
