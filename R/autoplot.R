#' Plot a kernel density estimate with ggplot2
#'
#' `autoplot()` (from `ggplot2`, which must be installed) draws a 1-D
#' [kde_gpu()] fit as its density curve, with the highest-density regions
#' of `prob` shaded where given, and a 2-D fit as contours at probability
#' levels (the regions inside hold `prob` of the probability, see
#' [contour_levels()]) over a raster of the density, with legends for
#' both. With `margin`, it draws the 1-D or 2-D marginal density of those
#' columns of a fit in more dimensions (contour levels from the margin's
#' grid interpolated at the training points, as [plot.kde_gpu()] does). The
#' result is a ggplot object, to extend with the usual `+`.
#'
#' @param object A [kde_gpu()] fit.
#' @param prob Shares of probability of the highest-density regions: shaded
#'   in 1-D (default none), contours in 2-D (default 25%, 50%, 75%).
#' @param n Grid points per axis, as in [kde_grid()] (by default 512 in
#'   1-D, 151 per axis in 2-D).
#' @param margin `NULL` for a 1-D or 2-D fit, or the names or numbers of
#'   one or two columns of a larger fit.
#' @param ... Not used: an argument given here is an error that names it.
#' @return A `ggplot` object.
#' @examples
#' if (requireNamespace("ggplot2", quietly = TRUE)) {
#'   fit <- kde_gpu(faithful, backend = "cpu")
#'   ggplot2::autoplot(fit, n = 80)
#'   ggplot2::autoplot(kde_gpu(faithful$waiting, backend = "cpu"), prob = 0.5)
#' }
#' @exportS3Method ggplot2::autoplot
autoplot.kde_gpu <- function(object, prob = NULL, n = NULL, margin = NULL, ...) {
  check_dots_empty("autoplot()", c("object", "prob", "n", "margin"), list(), ...)
  if (!requireNamespace("ggplot2", quietly = TRUE)) {
    stop("autoplot() needs the ggplot2 package; install it, or use plot().", call. = FALSE)
  }
  check_fit(object)
  columns <- resolve_margin(object, margin, max_columns = 2L, arg = "object")
  if (!is.null(prob)) prob <- check_probabilities(prob, "prob")
  grid <- evaluate_grid(object, n, NULL, 3, columns)
  data <- long_grid(grid)
  names_xy <- names(data)[seq_along(columns)]
  title <- paste0("kde_gpu(", object$data.name, ")")
  if (length(columns) == 1L) {
    autoplot_1d(object, grid, data, names_xy, prob, title)
  } else {
    if (is.null(prob)) prob <- c(0.25, 0.5, 0.75)
    autoplot_2d(object, grid, data, names_xy, prob, title)
  }
}

autoplot_1d <- function(fit, grid, data, name, prob, title) {
  aesthetics <- do.call(ggplot2::aes, list(x = as.name(name), y = quote(density)))
  plot <- ggplot2::ggplot(data, aesthetics)
  if (!is.null(prob)) {
    levels <- if (fit$d == 1L) contour_levels(fit, prob) else {
      # A margin's levels from its grid at the training points.
      stats::setNames(weighted_quantile(stats::approx(grid$axes[[1L]], grid$density,
                                                      fit$x[, grid$columns])$y,
                                        fit$weights, 1 - prob),
                      probability_labels(prob))
    }
    # One ribbon per stretch above each level, larger regions first.
    # (ggplot2 draws groups in the order of their names.)
    drawing_order <- order(prob, decreasing = TRUE)
    regions <- do.call(rbind, lapply(seq_along(drawing_order), function(k) {
      i <- drawing_order[k]
      runs <- runs_above(grid$axes[[1L]], as.vector(grid$density), levels[[i]])
      do.call(rbind, lapply(seq_along(runs), function(r) {
        data.frame(x = runs[[r]]$x, upper = runs[[r]]$y, region = names(levels)[i],
                   stretch = sprintf("%04d %06d", k, r))
      }))
    }))
    regions$region <- factor(regions$region, levels = names(levels)[order(prob)])
    plot <- plot +
      ggplot2::geom_ribbon(
        data = regions,
        mapping = ggplot2::aes(x = .data$x, ymin = 0, ymax = .data$upper, fill = .data$region,
                               group = .data$stretch),
        inherit.aes = FALSE) +
      ggplot2::scale_fill_manual(
        values = stats::setNames(region_colours(levels, max(data$density)), names(levels)),
        name = "highest-density\nregion")
  }
  # An unnamed 1-D fit's axis is named by its data, as plot() does.
  plot + ggplot2::geom_line() +
    ggplot2::labs(title = title, y = "density",
                  x = if (is.null(colnames(fit$x))) fit$data.name else name)
}

autoplot_2d <- function(fit, grid, data, names_xy, prob, title) {
  levels <- if (length(grid$columns) == fit$d) {
    contour_levels(fit, prob)
  } else {
    grid_levels(fit, grid$columns, grid$axes, grid$density, prob)
  }
  breaks <- sort(unname(levels))
  # geom_contour() reports each line's break as `level`; name it by its
  # share of probability, listed in the legend from the smallest share.
  region_of <- function(level) {
    factor(names(levels)[vapply(level, function(l) which.min(abs(levels - l)), 1L)],
           levels = names(levels)[order(prob)])
  }
  # The outermost region (the lowest level) solid, the inner ones finer.
  linetypes <- rep_len(c("solid", "dashed", "dotted", "dotdash", "longdash", "twodash"),
                       length(levels))
  linetypes <- stats::setNames(linetypes[rank(-prob, ties.method = "first")], names(levels))
  aesthetics <- do.call(ggplot2::aes, list(x = as.name(names_xy[1L]), y = as.name(names_xy[2L])))
  ggplot2::ggplot(data, aesthetics) +
    ggplot2::geom_raster(ggplot2::aes(fill = .data$density), interpolate = TRUE) +
    ggplot2::scale_fill_gradientn(colours = density_palette(), limits = c(0, NA),
                                  name = "density") +
    ggplot2::geom_contour(ggplot2::aes(z = .data$density,
                                       linetype = ggplot2::after_stat(region_of(.data$level))),
                          breaks = breaks, colour = "black") +
    ggplot2::scale_linetype_manual(values = linetypes, name = "highest-density\nregion",
                                   drop = FALSE) +
    ggplot2::coord_cartesian(expand = FALSE) +
    ggplot2::labs(title = title)
}

# ggplot2's data pronoun, used inside aes() above.
utils::globalVariables(".data")
