# A fit whose fields were edited after fitting is refused with what changed
# and how to refit, by every method that evaluates; never answered from the
# evaluation state made for the old values.

test_that("an edited bandwidth or kernel is refused, not answered with the old one", {
  fit <- kde_gpu(faithful, backend = "cpu")
  edited <- fit
  edited$H <- 4 * edited$H
  expect_error(predict(edited, c(3, 70)),
               "`object\\$H` was changed after fitting.*refit with kde_gpu\\(\\), giving `H = `")
  # the original, which shares the edited copy's private state, still answers as fitted
  refit <- kde_gpu(faithful, H = fit$H, backend = "cpu")
  expect_equal(predict(fit, c(3, 70)), predict(refit, c(3, 70)), tolerance = 1e-14)

  fit1 <- kde_gpu(faithful$eruptions, backend = "cpu")
  edited <- fit1
  edited$kernel <- "epanechnikov"
  expect_error(predict(edited, 3), "`object\\$kernel` was changed after fitting.*`kernel = `")
  edited <- fit1
  edited$bw <- 2 * edited$bw
  expect_error(predict(edited, 3), "`object\\$bw` was changed after fitting.*`bw = `")
})

test_that("every edited field that decides the values is refused", {
  fit <- kde_gpu(c(1, 2, 4, 7), lower = 0, backend = "cpu")
  edits <- list(
    x = function(f) { f$x[2] <- 3; f },
    weights = function(f) { f$weights <- c(0.1, 0.2, 0.3, 0.4); f },
    lower = function(f) { f$lower <- -1; f },
    upper = function(f) { f$upper <- 10; f },
    precision = function(f) { f$precision <- "double"; f$precision <- "single"; f },
    z = function(f) { f$z <- f$z * 1.5; f },
    log_const = function(f) { f$log_const <- f$log_const + 1; f }
  )
  for (field in names(edits)) {
    edited <- edits[[field]](fit)
    expect_error(predict(edited, 2), sprintf("`object\\$%s` was changed after fitting", field),
                 label = field)
  }
  expect_error(predict(edits$z(fit), 2), "not by editing its evaluation state")
  # the data edited in place, as `f$x[2] <- 3` may do to an unshared vector
  edited <- fit
  edited$x[2, 1] <- 3
  expect_error(predict(edited, 2), "`object\\$x` was changed.*the new data as `x`")

  adaptive <- kde_gpu(c(1, 2, 4, 7, 20), adaptive = TRUE, backend = "cpu")
  edited <- adaptive
  edited$adaptive$lambda <- rep(1, 5)
  edited$tile_scale <- rep(1, 5)
  expect_error(predict(edited, 2), "`object\\$adaptive` was changed.*`adaptive = TRUE`")
})

test_that("every method that evaluates goes through the check", {
  set.seed(29)
  fit2 <- kde_gpu(matrix(rnorm(60), ncol = 2), backend = "cpu")
  edited2 <- fit2
  edited2$H <- 2 * edited2$H
  fit1 <- kde_gpu(rnorm(30), backend = "cpu")
  edited1 <- fit1
  edited1$H <- 2 * edited1$H
  what <- "\\$H` was changed after fitting"
  expect_error(predict(edited2, c(0, 0)), paste0("`object", what))
  expect_error(predict(edited2, c(0, 0), type = "gradient"), paste0("`object", what))
  expect_error(predict(edited1, 0, type = "cdf"), paste0("`object", what))
  expect_error(logLik(edited2), paste0("`object", what))
  expect_error(sample(edited2, 2), paste0("`x", what))
  expect_error(simulate(edited2), paste0("`object", what))
  expect_error(quantile(edited1, 0.5), paste0("`x", what))
  expect_error(kde_grid(edited2, n = 5), paste0("`fit", what))
  expect_error(as.data.frame(edited2, n = 5), paste0("`x", what))
  expect_error(as.density(edited1), paste0("`x", what))
  expect_error(kde_modes(edited2), paste0("`fit", what))
  expect_error(contour_levels(edited2), paste0("`fit", what))
  expect_error(summary(edited2), paste0("`object", what))
  pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_error(plot(edited2), paste0("`x", what))
  expect_error(plot(edited1), paste0("`x", what))
})

test_that("unedited fits and their copies, saved and restored, still answer", {
  fit <- kde_gpu(faithful$eruptions, bw = 0.3, backend = "cpu")
  copy <- fit
  copy$data.name <- "renamed" # a label, not part of the estimate
  expect_equal(predict(copy, 3), predict(fit, 3))
  file <- tempfile(fileext = ".rds")
  on.exit(unlink(file))
  saveRDS(fit, file)
  restored <- readRDS(file)
  expect_equal(predict(restored, c(2, 3)), predict(fit, c(2, 3)), tolerance = 1e-15)
  restored$H <- restored$H / 4
  expect_error(predict(restored, 3), "`object\\$H` was changed after fitting")
})
