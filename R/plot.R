#' Plot a kernel density estimate
#'
#' Draws a [kde_gpu()] fit so that it reads at a glance:
#' * **1-D:** the density curve, as [stats::plot.density()] draws it, and
#'   with `prob` the highest-density regions shaded (the set where the
#'   density is at least [contour_levels()]`(x, prob, coverage)`), with a
#'   legend.
#' * **2-D:** contours at probability levels, labelled `"25%"`, `"50%"`,
#'   `"75%"` (by default the regions inside hold that share of the
#'   estimate's probability; see `coverage`), over
#'   an image of the density with a colour key in the right margin. The
#'   plot's coordinates stay set, so [points()] and [lines()] add to it.
#' * **More dimensions:** a matrix of the 2-D marginal densities of every
#'   pair of columns, as [pairs()] lays out scatter plots: the panel in row
#'   i and column j has column j on the horizontal axis and column i on the
#'   vertical one, the diagonal holds the 1-D marginal densities, and the
#'   columns' names stand in the diagonal panels. The margins are exact for
#'   every kernel (see [kde_grid()]'s `margin`); their probability contours
#'   use levels from the margin's grid interpolated at draws from the fit
#'   (`coverage = "estimate"`) or at the training points (`"data"`, as `ks`
#'   draws its contours).
#'
#' Arguments in `...` go where they apply: `col`, `lty`, `lwd`, `labcex`,
#' `drawlabels`, `method` and `vfont` to the contour lines ([contour()]) or
#' the 1-D curve, `xlim` and `ylim` set the grid's limits as well as the
#' plot's, and the others (`cex.axis`, `las`, `asp`, `sub`, ...) to the
#' plot frame ([plot.default()]) or, in the matrix of margins, the axes.
#'
#' @param x A [kde_gpu()] fit.
#' @param prob Shares of probability whose highest-density regions to draw
#'   (see [contour_levels()]): contours in 2-D and in the margins (default
#'   25%, 50%, 75%), shaded regions in 1-D (default none). `NULL` draws none.
#' @param coverage What `prob` is a share of (see [contour_levels()]):
#'   `"estimate"` (the default) draws the estimate's own highest-density
#'   regions, holding `prob` of its probability; `"data"` the regions
#'   holding `prob` of the training points, as `ks` draws them.
#' @param n Grid points per axis: by default 512 in 1-D, 100 in 2-D and 64
#'   in each margin of the matrix.
#' @param image Whether to draw the density as an image under the contours
#'   (2-D and the matrix of margins).
#' @param key Whether to draw a key: a colour bar for the image (2-D), a
#'   legend for the shaded regions (1-D).
#' @param fill Colours: the image's palette from low to high density (2-D
#'   and margins), or one colour per `prob` for the shaded regions (1-D).
#' @param main,xlab,ylab Title and axis labels; by default the call, and
#'   in 2-D the columns' names.
#' @param ... Graphical arguments, routed as described above.
#' @return `x`, invisibly.
#' @seealso [contour_levels()], [kde_grid()], and `autoplot()` for
#'   `ggplot2`.
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' plot(fit)
#' points(faithful, pch = 20, cex = 0.4)
#' plot(fit, prob = c(0.5, 0.9), image = FALSE, col = "blue", lwd = 2)
#'
#' # 1-D, with the 50% and 90% highest-density regions shaded
#' plot(kde_gpu(faithful$eruptions, backend = "cpu"), prob = c(0.5, 0.9))
#'
#' # 3-D: the 2-D and 1-D margins
#' plot(kde_gpu(quakes[, c("lat", "long", "depth")], backend = "cpu"))
#' @export
plot.kde_gpu <- function(x, prob = if (x$d == 1L) NULL else c(0.25, 0.5, 0.75), n = NULL,
                         image = TRUE, key = TRUE, fill = NULL, main = NULL, xlab = NULL,
                         ylab = NULL, ..., coverage = c("estimate", "data")) {
  check_fit(x, "x")
  if (!is.null(prob)) prob <- check_probabilities(prob, "prob")
  coverage <- match_choice(coverage, c("estimate", "data"), "coverage")
  if (!is.null(n)) n <- check_grid_size(n)
  check_flag(image, "image")
  check_flag(key, "key")
  if (!is.null(fill)) check_colours(fill, "fill")
  check_label(main, "main")
  check_label(xlab, "xlab")
  check_label(ylab, "ylab")
  dots <- list(...)
  check_plot_dots(dots)
  if (is.null(main)) main <- paste0("kde_gpu(", x$data.name, ")")
  if (x$d == 1L) {
    plot_density_1d(x, prob, if (is.null(n)) 512L else n, key, fill, main, xlab,
                    if (is.null(ylab)) "Density" else ylab, dots, coverage)
  } else if (x$d == 2L) {
    labels <- column_labels(x)
    plot_density_2d(x, prob, if (is.null(n)) 100L else n, image, key, fill, main,
                    if (is.null(xlab)) labels[1L] else xlab,
                    if (is.null(ylab)) labels[2L] else ylab, dots, coverage)
  } else {
    plot_margins(x, prob, if (is.null(n)) 64L else n, image, fill, main, dots, coverage)
  }
  invisible(x)
}

# Arguments of `...` that belong to the contour lines (or the 1-D curve).
line_arguments <- c("col", "lty", "lwd", "labcex", "drawlabels", "method", "vfont")

check_plot_dots <- function(dots) {
  given <- names(dots)
  if (length(dots) > 0L && (is.null(given) || any(!nzchar(given)))) {
    stop("plot() takes graphical arguments by name (e.g. col = \"blue\"), ",
         "not by position.", call. = FALSE)
  }
  for (name in intersect(c("levels", "nlevels"), given)) {
    stop_arg(name, "is not used: plot() draws the contours of `prob`; for contours at ",
             "densities of your own, give contour() a grid from kde_grid().")
  }
  for (name in intersect(c("add", "zlim"), given)) {
    stop_arg(name, "is not used by plot() of a kde_gpu() fit.")
  }
}

check_grid_size <- function(n) {
  if (!is.numeric(n) || length(n) != 1L || is.na(n) || !is.finite(n) || n < 2 ||
      n != round(n)) {
    stop_arg("n", "must be one whole number of at least 2 (grid points per axis).")
  }
  as.integer(n)
}

check_colours <- function(colours, arg) {
  ok <- length(colours) > 0L && !anyNA(colours) &&
    !inherits(tryCatch(grDevices::col2rgb(colours), error = identity), "error")
  if (!ok) stop_arg(arg, "must be colours (names, \"#RRGGBB\" or numbers).")
  invisible(colours)
}

# The image's palette: from white where the density is 0 through yellow to
# orange-red, light enough at the top for black contours and labels.
density_palette <- function(n = 64L) {
  grDevices::colorRampPalette(c("#FFFFFF", rev(grDevices::hcl.colors(6L, "YlOrRd"))[1:5]))(n)
}

# The density as an image: a smoothly interpolated raster where the device
# draws rasters (no seams between cells, no blocks at coarse grids), else
# image()'s rectangles. Cells are centred on the grid points, as in image().
draw_density_image <- function(u, v, z, palette, zlim) {
  raster_ok <- grDevices::dev.capabilities("rasterImage")$rasterImage %in% c("yes", "non-missing")
  if (!raster_ok) {
    graphics::image(u, v, z, col = palette, zlim = zlim, add = TRUE)
    return(invisible())
  }
  index <- pmin(length(palette), 1L + floor(length(palette) * (z - zlim[1L]) / diff(zlim)))
  colours <- matrix(palette[index], nrow(z))
  half_u <- (u[2L] - u[1L]) / 2
  half_v <- (v[2L] - v[1L]) / 2
  # A raster's first row is its top: the grid's last v.
  graphics::rasterImage(grDevices::as.raster(t(colours)[ncol(z):1L, , drop = FALSE]),
                        u[1L] - half_u, v[1L] - half_v, u[length(u)] + half_u,
                        v[length(v)] + half_v, interpolate = TRUE)
  invisible()
}

# ---- 1-D -------------------------------------------------------------------

plot_density_1d <- function(fit, prob, n, key, fill, main, xlab, ylab, dots,
                            coverage = "estimate") {
  xlim <- dots$xlim
  if (!is.null(xlim) && (!is.numeric(xlim) || length(xlim) != 2L || anyNA(xlim))) {
    stop_arg("xlim", "must be two numbers.")
  }
  dens <- as.density(fit, n = n, lims = if (!is.null(xlim)) range(xlim))
  do.call(graphics::plot, c(list(dens, main = main, xlab = xlab, ylab = ylab), dots))
  if (is.null(prob)) return(invisible())
  levels <- contour_levels(fit, prob, coverage)
  # Larger regions (lower levels) first, so that the inner ones lie on top.
  ordering <- order(prob, decreasing = TRUE)
  colours <- if (is.null(fill)) {
    region_colours(levels, max(dens$y))
  } else {
    rep_len(fill, length(prob))
  }
  for (i in ordering) shade_region(dens$x, dens$y, levels[[i]], colours[i])
  do.call(graphics::lines, c(list(dens$x, dens$y), dots[intersect(names(dots), c("col", "lty", "lwd"))]))
  if (key) {
    by_prob <- order(prob)
    legend_args <- list(fill = colours[by_prob], legend = names(levels)[by_prob],
                        title = "highest-density region", bty = "n", cex = 0.85)
    position <- free_corner(dens$x, dens$y, legend_args)
    do.call(graphics::legend, c(list(position), legend_args))
  }
  invisible()
}

# Colours for shaded regions: the 2-D image's colour at each region's
# level, so that the smaller (higher) regions are darker, as in 2-D.
region_colours <- function(levels, peak) {
  palette <- density_palette()
  palette[pmin(length(palette), 1L + floor(length(palette) * levels / peak))]
}

# Shades the area under the curve where y >= level.
shade_region <- function(x, y, level, colour) {
  for (run in runs_above(x, y, level)) {
    graphics::polygon(c(run$x[1L], run$x, run$x[length(run$x)]), c(0, run$y, 0),
                      col = colour, border = NA)
  }
  invisible()
}

# The stretches of the curve (x, y) where y >= level, each a list(x, y)
# with the crossings interpolated, so that a region's edges sit where the
# curve crosses the level, not at the nearest grid point.
runs_above <- function(x, y, level) {
  above <- y >= level
  if (!any(above)) return(list())
  runs <- rle(above)
  ends <- cumsum(runs$lengths)
  starts <- ends - runs$lengths + 1L
  crossing <- function(i, j) x[i] + (level - y[i]) / (y[j] - y[i]) * (x[j] - x[i])
  lapply(which(runs$values), function(r) {
    i <- starts[r]
    j <- ends[r]
    xs <- x[i:j]
    ys <- y[i:j]
    if (i > 1L) {
      xs <- c(crossing(i - 1L, i), xs)
      ys <- c(level, ys)
    }
    if (j < length(x)) {
      xs <- c(xs, crossing(j, j + 1L))
      ys <- c(ys, level)
    }
    list(x = xs, y = ys)
  })
}

# The top corner whose legend box covers the fewest points of the curve.
free_corner <- function(x, y, legend_args) {
  corners <- c("topright", "topleft", "top")
  covered <- vapply(corners, function(corner) {
    box <- do.call(graphics::legend, c(list(corner), legend_args, plot = FALSE))$rect
    sum(x >= box$left & x <= box$left + box$w & y >= box$top - box$h)
  }, 0)
  corners[which.min(covered)]
}

# ---- 2-D -------------------------------------------------------------------

plot_density_2d <- function(fit, prob, n, image, key, fill, main, xlab, ylab, dots,
                            coverage = "estimate") {
  lims <- plot_limits(dots, fit)
  grid <- evaluate_grid(fit, n, lims, 3, NULL)
  u <- grid$axes[[1L]]
  v <- grid$axes[[2L]]
  z <- grid$density
  levels <- if (!is.null(prob)) contour_levels(fit, prob, coverage)
  palette <- if (is.null(fill)) density_palette() else fill
  frame_args <- dots[setdiff(names(dots), c(line_arguments, "xlim", "ylim"))]
  line_args <- dots[intersect(names(dots), line_arguments)]
  if (image && key) {
    # Room for the colour key; the old margin comes back on exit, and the
    # plot's coordinates stay those drawn here, so points() still lands.
    old <- graphics::par(mar = pmax(graphics::par("mar"), c(0, 0, 0, 6.1)))
    on.exit(graphics::par(old), add = TRUE)
  }
  do.call(graphics::plot, c(list(range(u), range(v), type = "n", xaxs = "i", yaxs = "i",
                                 xlab = xlab, ylab = ylab, main = main), frame_args))
  zlim <- c(0, max(z))
  if (image) {
    draw_density_image(u, v, z, palette, zlim)
    if (!isFALSE(frame_args$axes) && !isFALSE(frame_args$frame.plot)) graphics::box()
  }
  if (!is.null(levels)) draw_contours(u, v, z, levels, line_args)
  if (image && key) draw_colour_key(zlim, palette, levels, line_args)
  invisible()
}

# Grid limits from xlim and ylim in `...`, where given.
plot_limits <- function(dots, fit) {
  if (is.null(dots$xlim) && is.null(dots$ylim)) return(NULL)
  default <- unlist(lapply(grid_axes(fit, 1:2, 2L, NULL, 3), range))
  for (arg in c("xlim", "ylim")) {
    value <- dots[[arg]]
    if (!is.null(value) && (!is.numeric(value) || length(value) != 2L || anyNA(value) ||
                            value[1L] == value[2L])) {
      stop_arg(arg, "must be two different numbers.")
    }
  }
  c(if (is.null(dots$xlim)) default[1:2] else sort(dots$xlim),
    if (is.null(dots$ylim)) default[3:4] else sort(dots$ylim))
}

# Contours at `levels` (named "25%", ...), lowest level first as contour()
# wants them, labelled with their share of probability.
draw_contours <- function(u, v, z, levels, line_args) {
  ordering <- order(levels)
  args <- utils::modifyList(list(labcex = 0.9), line_args)
  do.call(graphics::contour, c(list(u, v, z, levels = unname(levels[ordering]),
                                    labels = names(levels)[ordering], add = TRUE), args))
}

# A vertical colour bar in the right margin, in the plot's own coordinates
# (so nothing about the plot changes): density ticks on its right, and the
# contour levels marked across it.
draw_colour_key <- function(zlim, palette, levels, line_args) {
  usr <- graphics::par("usr")
  x_per_line <- diff(usr[1:2]) / graphics::par("pin")[1L] * graphics::par("csi")
  left <- usr[2L] + 0.8 * x_per_line
  right <- left + 0.9 * x_per_line
  to_y <- function(value) usr[3L] + (value - zlim[1L]) / diff(zlim) * diff(usr[3:4])
  breaks <- seq(zlim[1L], zlim[2L], length.out = length(palette) + 1L)
  graphics::rect(left, to_y(breaks[-length(breaks)]), right, to_y(breaks[-1L]),
                 col = palette, border = NA, xpd = NA)
  graphics::rect(left, usr[3L], right, usr[4L], xpd = NA)
  ticks <- pretty(zlim, n = 4L)
  ticks <- ticks[ticks >= zlim[1L] & ticks <= zlim[2L]]
  graphics::segments(right, to_y(ticks), right + 0.25 * x_per_line, to_y(ticks), xpd = NA)
  graphics::text(right + 0.4 * x_per_line, to_y(ticks), format(ticks), adj = c(0, 0.5),
                 cex = 0.75, xpd = NA)
  if (!is.null(levels)) {
    graphics::segments(left, to_y(levels), right, to_y(levels), xpd = NA,
                       col = if (is.null(line_args$col)) "black" else line_args$col,
                       lwd = if (is.null(line_args$lwd)) 1 else line_args$lwd)
  }
  graphics::text((left + right) / 2, usr[4L], "density", pos = 3, cex = 0.75, xpd = NA)
  invisible()
}

# ---- d > 2: the matrix of margins --------------------------------------------

plot_margins <- function(fit, prob, n, image, fill, main, dots, coverage = "estimate") {
  for (arg in intersect(c("xlim", "ylim"), names(dots))) {
    stop_arg(arg, "applies to plots of 1-D and 2-D fits; for a margin's limits use ",
             "kde_grid(fit, margin = , lims = ).")
  }
  d <- fit$d
  labels <- column_labels(fit)
  palette <- if (is.null(fill)) density_palette() else fill
  line_args <- dots[intersect(names(dots), line_arguments)]
  axis_args <- dots[setdiff(names(dots), line_arguments)]
  axes <- grid_axes(fit, seq_len(d), n, NULL, 3)
  # Each pair's margin once; the panel across the diagonal is its transpose.
  pairs_grid <- list()
  for (i in seq_len(d - 1L)) for (j in (i + 1L):d) {
    points <- as.matrix(expand.grid(axes[[j]], axes[[i]]))
    z <- matrix(margin_density(fit, c(j, i), points), n, n)
    pairs_grid[[paste(i, j)]] <- list(
      z = z,
      levels = if (!is.null(prob)) grid_levels(fit, c(j, i), axes[c(j, i)], z, prob, coverage)
    )
  }
  old <- graphics::par(mfrow = c(d, d), mar = rep(0.2, 4L), oma = c(3.5, 3.5, 4, 3.5),
                       mgp = c(2, 0.6, 0))
  on.exit(graphics::par(old), add = TRUE)
  for (i in seq_len(d)) for (j in seq_len(d)) {
    graphics::plot.new()
    if (i == j) {
      y <- margin_density(fit, i, matrix(axes[[i]]))
      graphics::plot.window(range(axes[[i]]), c(0, 1.25 * max(y)), xaxs = "i", yaxs = "i")
      graphics::polygon(c(axes[[i]][1L], axes[[i]], axes[[i]][n]), c(0, y, 0),
                        col = "grey90", border = NA)
      do.call(graphics::lines, c(list(axes[[i]], y), line_args[intersect(names(line_args),
                                                                        c("col", "lty", "lwd"))]))
      graphics::text(mean(range(axes[[i]])), 1.25 * max(y), labels[i], pos = 1, font = 2,
                     cex = 1.2)
    } else {
      grid <- pairs_grid[[paste(min(i, j), max(i, j))]]
      z <- if (i < j) grid$z else t(grid$z)
      graphics::plot.window(range(axes[[j]]), range(axes[[i]]), xaxs = "i", yaxs = "i")
      if (image) draw_density_image(axes[[j]], axes[[i]], z, palette, c(0, max(z)))
      if (!is.null(grid$levels)) {
        draw_contours(axes[[j]], axes[[i]], z, grid$levels,
                      utils::modifyList(list(labcex = 0.75), line_args))
      }
    }
    graphics::box()
    # Axes on the outside, where they belong to the row's or column's
    # variable: x at the bottom, y on the left (row 1's on the right, as
    # its left panel is the 1-D margin).
    if (i == d) do.call(graphics::axis, c(list(1), axis_args))
    if (j == 1L && i > 1L) do.call(graphics::axis, c(list(2), axis_args))
    if (i == 1L && j == d) do.call(graphics::axis, c(list(4), axis_args))
    if (i == d) graphics::mtext(labels[j], side = 1, line = 2, cex = 0.8)
    if (j == 1L && i > 1L) graphics::mtext(labels[i], side = 2, line = 2, cex = 0.8)
    if (i == 1L && j == d) graphics::mtext(labels[i], side = 4, line = 2, cex = 0.8)
  }
  graphics::mtext(main, side = 3, outer = TRUE, line = 1.5, font = 2, cex = 1.2)
  invisible()
}

# Levels of a margin's highest-density regions from its grid: the grid
# interpolated (bilinearly) at draws from the fit (their columns are draws
# from the margin) or at the training points, then the quantiles of
# contour_levels().
grid_levels <- function(fit, columns, axes, z, prob, coverage = "estimate") {
  at <- if (coverage == "estimate") draws_from_fit(fit, hdr_draws, 1L) else fit$x
  at_points <- interpolate_grid(axes[[1L]], axes[[2L]], z, at[, columns[1L]], at[, columns[2L]])
  levels <- if (coverage == "estimate") estimate_levels(at_points, prob) else {
    weighted_quantile(at_points, fit$weights, 1 - prob)
  }
  names(levels) <- probability_labels(prob)
  levels
}

interpolate_grid <- function(u, v, z, px, py) {
  i <- pmin(pmax(findInterval(px, u), 1L), length(u) - 1L)
  j <- pmin(pmax(findInterval(py, v), 1L), length(v) - 1L)
  s <- pmin(pmax((px - u[i]) / (u[i + 1L] - u[i]), 0), 1)
  t <- pmin(pmax((py - v[j]) / (v[j + 1L] - v[j]), 0), 1)
  z[cbind(i, j)] * (1 - s) * (1 - t) + z[cbind(i + 1L, j)] * s * (1 - t) +
    z[cbind(i, j + 1L)] * (1 - s) * t + z[cbind(i + 1L, j + 1L)] * s * t
}
