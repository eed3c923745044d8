# Tight tiles (src/cuda/tight_tile.cuh): in a single-precision
# Gaussian fit at d = 2 or 3 whose points are stored relative to their run's anchor, a
# warp's quarter of a tile (a run of 64) that lies within about a bandwidth of its anchor
# takes the expanded form relative to the anchor. KDEGPU_TIGHT_RADIUS2 = 0
# (read when the fit's GPU copy is made) keeps every tile in the
# difference form.

with_tight_radius2 <- function(value, code) {
  old <- Sys.getenv("KDEGPU_TIGHT_RADIUS2", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("KDEGPU_TIGHT_RADIUS2") else
    Sys.setenv(KDEGPU_TIGHT_RADIUS2 = old))
  if (is.na(value)) Sys.unsetenv("KDEGPU_TIGHT_RADIUS2") else
    Sys.setenv(KDEGPU_TIGHT_RADIUS2 = value)
  force(code)
}

test_that("CUDA single: tiles within 1.25 bandwidths of their anchor keep the difference form's digits, d = 2 and 3, leaving one out too", {
  skip_without_gpu()
  # Dense data against a wide enough bandwidth that most units' points lie
  # within 1.25 bandwidths of their run's anchor; queries on the data and in the
  # tails, where the tiles are wide and stay in the difference form.
  # Reference: the CPU backend's double sums (checked on a few queries
  # against plain R).
  bws <- c(0.2, 0.6)
  for (d in 2:3) {
    set.seed(980 + d)
    n <- 5e4
    bw <- bws[d - 1]
    x <- matrix(rnorm(n * d), ncol = d)
    # queries dense enough that a block of them lies within a few
    # bandwidths of the tiles it meets
    q <- rbind(x[1:2e4, ] + matrix(rnorm(2e4 * d, sd = bw / 2), ncol = d),
               matrix(rnorm(1000 * d, sd = 2), ncol = d))
    cpu <- kde_gpu(x, bw = bw, backend = "cpu")
    ref <- predict(cpu, q, log = TRUE, tolerance = 0)
    loo_ref <- predict(cpu, log = TRUE, leave_one_out = TRUE, tolerance = 0)
    expect_equal(ref[1:50], exact_gaussian_log_density(x, q[1:50, ], bw), tolerance = 1e-12)
    got <- list()
    for (r2 in c(NA, 0)) {
      got[[length(got) + 1L]] <- with_tight_radius2(r2, {
        fit <- kde_gpu(x, bw = bw, backend = "cuda", precision = "single")
        # (a pruned evaluation orders its queries, so that a block of them
        # is near the tiles it meets; unordered blocks span the data)
        list(v = predict(fit, q, log = TRUE),
             loo = predict(fit, log = TRUE, leave_one_out = TRUE))
      })
    }
    names(got) <- c("tight tiles", "difference form only")
    err <- lapply(got, function(g) list(v = abs(expm1(g$v - ref)),
                                        loo = abs(expm1(g$loo - loo_ref))))
    near <- 1:2e4
    for (form in names(got)) {
      lab <- sprintf("d = %d, %s, queries near the data", d, form)
      expect_lte(max(err[[form]]$v[near]), 5e-6, label = lab)
    }
    lab <- sprintf("d = %d, tight tiles against the difference form near the data", d)
    # (per pair the expanded form rounds up to about twice the difference
    # form at these radii, tuning.cuh; what a density keeps is less)
    expect_lte(max(err[[1]]$v[near]), 1.5 * max(err[[2]]$v[near]) + 2e-7, label = lab)
    expect_lte(mean(err[[1]]$v[near]), 2 * mean(err[[2]]$v[near]) + 2e-8,
               label = paste(lab, "(mean)"))
    # farther out single keeps about eps D^2 of a density (D bandwidths to
    # the nearest points) in either form
    lab <- sprintf("d = %d, tight tiles against the difference form", d)
    expect_lte(max(err[[1]]$v), 1.25 * max(err[[2]]$v) + 2e-7, label = lab)
    expect_lte(max(err[[1]]$loo), 1.25 * max(err[[2]]$loo) + 2e-7,
               label = paste(lab, "leaving one out"))
    expect_lte(max(err[[2]]$loo), 1e-5, label = sprintf("d = %d, leaving one out", d))
    # the two forms round differently: the tight path ran
    expect_false(identical(got[[1]]$v, got[[2]]$v),
                 label = sprintf("d = %d: the forms' results", d))
  }
})
