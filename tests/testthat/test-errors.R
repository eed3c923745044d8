# Bad input gives an R error that names the argument; junk passed straight
# to the C entry point errors instead of crashing.

x2 <- ref_data(20, 2, seed = 500)

test_that("bad `x` is rejected with a message naming `x`", {
  expect_error(kde_gpu(letters), "`x`")
  expect_error(kde_gpu(c(1i, 2i)), "`x`")
  expect_error(kde_gpu(matrix(c(1, 2, 3, 4) + 0i, 2)), "`x`")
  expect_error(kde_gpu(data.frame(a = 1:3, b = c("u", "v", "w"))), "`x`")
  expect_error(kde_gpu(list(1, 2, 3)), "`x`")
  expect_error(kde_gpu(NULL), "`x`")
  expect_error(kde_gpu(c(1, NA, 3)), "`x`")
  expect_error(kde_gpu(c(1, NaN, 3)), "`x`")
  expect_error(kde_gpu(c(1, Inf, 3)), "`x`")
  expect_error(kde_gpu(c(1, -Inf, 3)), "`x`")
  bad <- x2
  bad[3, 2] <- NA
  expect_error(kde_gpu(bad), "`x`")
  expect_error(kde_gpu(numeric(0), bw = 1), "`x`")
  expect_error(kde_gpu(matrix(numeric(0), 0, 2), bw = 1), "`x`")
  expect_error(kde_gpu(matrix(numeric(0), 5, 0), bw = 1), "`x`")
  expect_error(kde_gpu(data.frame()), "`x`")
})

test_that("bad `weights` are rejected", {
  expect_error(kde_gpu(x2, weights = c(-1, rep(1, 19))), "`weights`")
  expect_error(kde_gpu(x2, weights = c(NA, rep(1, 19))), "`weights`")
  expect_error(kde_gpu(x2, weights = c(NaN, rep(1, 19))), "`weights`")
  expect_error(kde_gpu(x2, weights = c(Inf, rep(1, 19))), "`weights`")
  expect_error(kde_gpu(x2, weights = rep(0, 20)), "`weights`")
  expect_error(kde_gpu(x2, weights = rep(1, 19)), "`weights`")
  expect_error(kde_gpu(x2, weights = rep(1, 21)), "`weights`")
  expect_error(kde_gpu(x2, weights = rep("a", 20)), "`weights`")
})

test_that("bad `bw` is rejected", {
  expect_error(kde_gpu(x2, bw = 0), "`bw`")
  expect_error(kde_gpu(x2, bw = -1), "`bw`")
  expect_error(kde_gpu(x2, bw = NA_real_), "`bw`")
  expect_error(kde_gpu(x2, bw = NaN), "`bw`")
  expect_error(kde_gpu(x2, bw = Inf), "`bw`")
  expect_error(kde_gpu(x2, bw = c(1, 0)), "`bw`")
  expect_error(kde_gpu(x2, bw = c(1, 2, 3)), "`bw`")
  expect_error(kde_gpu(x2[, 1], bw = c(1, 2)), "`bw`")
  expect_error(kde_gpu(x2, bw = numeric(0)), "`bw`")
  expect_error(kde_gpu(x2, bw = "no-such-rule"), "`bw`")
  expect_error(kde_gpu(x2, bw = list(1)), "`bw`")
  # A constant sample has no default bandwidth (its spread is 0).
  expect_error(kde_gpu(rbind(c(1, 2), c(1, 2), c(1, 2))), "`x` column 1 has no spread")
})

test_that("bad `H` is rejected", {
  expect_error(kde_gpu(x2, H = matrix(c(1, 0.5, 0.2, 1), 2)), "`H`")
  expect_error(kde_gpu(x2, H = matrix(c(1, 1, 1, 1), 2)), "`H`")       # singular
  expect_error(kde_gpu(x2, H = matrix(c(1, 2, 2, 1), 2)), "`H`")       # indefinite
  expect_error(kde_gpu(x2, H = -diag(2)), "`H`")
  expect_error(kde_gpu(x2, H = diag(3)), "`H`")
  expect_error(kde_gpu(x2, H = diag(2)[, 1, drop = FALSE]), "`H`")
  expect_error(kde_gpu(x2, H = matrix(c(1, NA, NA, 1), 2)), "`H`")
  expect_error(kde_gpu(x2, H = matrix(c(Inf, 0, 0, 1), 2)), "`H`")
  expect_error(kde_gpu(x2, H = matrix("a", 2, 2)), "`H`")
  expect_error(kde_gpu(x2[, 1], H = matrix(0)), "`H`")
  expect_error(kde_gpu(x2[, 1], H = matrix(-1)), "`H`")
})

test_that("an unknown `kernel` is rejected", {
  expect_error(kde_gpu(x2, kernel = "no-such-kernel"), "`kernel`")
  expect_error(kde_gpu(x2, kernel = 3), "`kernel`")
  expect_error(kde_gpu(x2, kernel = NA_character_), "`kernel`")
  expect_error(kde_gpu(x2, kernel = character(0)), "`kernel`")
})

test_that("bad `newdata` is rejected", {
  fit <- kde_gpu(x2, bw = 0.5, backend = "cpu")
  expect_error(predict(fit, matrix(0, 3, 3)), "`newdata`")
  expect_error(predict(fit, matrix(0, 3, 1)), "`newdata`")
  expect_error(predict(fit, c(1, 2, 3)), "`newdata`")
  expect_error(predict(fit, matrix("a", 2, 2)), "`newdata`")
  expect_error(predict(fit, matrix(c(1, NA, 0, 0), 2)), "`newdata`")
  expect_error(predict(fit, matrix(c(1, NaN, 0, 0), 2)), "`newdata`")
  expect_error(predict(fit, data.frame(a = 1, b = "x")), "`newdata`")
  expect_error(predict(fit, matrix(1i, 2, 2)), "`newdata`")
  fit1 <- kde_gpu(x2[, 1], bw = 0.5, backend = "cpu")
  expect_error(predict(fit1, c(0, NA)), "`newdata`")
  expect_error(predict(fit1, matrix(0, 2, 2)), "`newdata`")
  expect_error(predict(fit1, "a"), "`newdata`")
})

test_that("bad `size` in sample() is rejected", {
  fit <- kde_gpu(x2, bw = 0.5, backend = "cpu")
  expect_error(sample(fit, -1), "`size`")
  expect_error(sample(fit, NA), "`size`")
  expect_error(sample(fit, NA_integer_), "`size`")
  expect_error(sample(fit, c(1, 2)), "`size`")
  expect_error(sample(fit, "a"), "`size`")
  expect_error(sample(fit, Inf), "`size`")
  # more rows than an R matrix holds: named, not NA's "missing value" error
  expect_error(sample(fit, 3e9), "`size` must be at most 2147483647, not 3e\\+09")
})

test_that("bad `backend` and `precision` are rejected", {
  expect_error(kde_gpu(x2, backend = "tpu"), "`backend`")
  expect_error(kde_gpu(x2, precision = "half"), "`precision`")
})

test_that("junk passed straight to the CPU entry point errors, not crashes", {
  entry <- kdegpu:::C_kdegpu_log_density_cpu
  train <- matrix(c(0, 1, 2, 0, 0, 1), 3, 2)
  weight <- rep(1 / 3, 3)
  query <- matrix(c(0, 0.5, 0, 0), 2, 2)
  ok <- function(train = get("train", parent.frame()),
                 weight = get("weight", parent.frame()),
                 query = get("query", parent.frame()), center = NULL,
                 transform = NULL, kernel = 0L, log_const = 0,
                 leave_one_out = FALSE, threads = 1L, progress = -1,
                 tile_size = 0L, tolerance = 0) {
    out <- .Call(entry, train, weight, NULL, tile_size, query, center, transform, kernel,
                 log_const, leave_one_out, tolerance, threads, progress)
    # the share of pairs computed comes as an attribute (for the fit's print())
    expect_equal(attr(out, "pairs_share"), 1)
    as.vector(out)
  }
  # The valid call works (so the errors below are about the junk): the
  # coordinates are taken as already whitened and scaled, so the result is
  # log sum_j w_j k(|q - x_j|^2) + log_const.
  s2 <- sapply(1:2, function(i) colSums((t(train) - query[i, ])^2))
  expect_equal(ok(log_const = 0.25),
               log(colSums(weight * exp(-s2 / 2))) + 0.25, tolerance = 1e-14)
  # Leave-one-out on the training points drops exactly the j == i term.
  s2_tt <- unname(as.matrix(dist(train)))^2
  k_tt <- weight * exp(-s2_tt / 2)
  diag(k_tt) <- 0
  expect_equal(ok(query = train, leave_one_out = TRUE), log(colSums(k_tt)),
               tolerance = 1e-14)
  # Given a center and a transform, the entry point whitens the queries
  # itself: z = (query - center) transform.
  center <- c(0.3, -0.2)
  transform <- matrix(c(1.5, 0, 0.4, 0.8), 2, 2)
  raw <- t(t(query %*% solve(transform)) + center)
  expect_equal(ok(query = raw, center = center, transform = transform),
               ok(query = query), tolerance = 1e-13)
  expect_error(ok(center = center), "both")
  expect_error(ok(transform = transform), "both")
  expect_error(ok(center = 1, transform = transform), "`center`")
  expect_error(ok(center = center, transform = diag(3)), "`transform`")
  expect_error(ok(center = center, transform = matrix(NA_real_, 2, 2)), "`transform`")
  expect_error(ok(progress = NA_real_), "`progress`")
  expect_error(ok(progress = FALSE), "`progress`")
  expect_error(ok(query = matrix(c(0, NaN, 0, 0), 2, 2)), "element 2")
  expect_error(ok(train = NULL), "`train`")
  expect_error(ok(train = "a"), "`train`")
  expect_error(ok(train = matrix("a", 3, 2)), "`train`")
  expect_error(ok(train = list(1, 2, 3)), "`train`")
  expect_error(ok(train = matrix(numeric(0), 0, 2), weight = numeric(0)),
               "`train` must have at least one row")
  expect_error(ok(weight = NULL), "`weight`")
  expect_error(ok(weight = c(0.5, 0.5)), "`weight`")
  expect_error(ok(weight = rep(1, 4)), "`weight`")
  expect_error(ok(weight = "a"), "`weight`")
  expect_error(ok(weight = list(1, 2, 3)), "`weight`")
  expect_error(ok(query = NULL), "`query`")
  expect_error(ok(query = matrix(0, 2, 3)), "`query` must have 2 columns")
  expect_error(ok(query = matrix(0, 2, 1)), "`query` must have 2 columns")
  expect_error(ok(query = "a"), "`query`")
  expect_error(ok(query = list(0, 0)), "`query`")
  expect_error(ok(kernel = 99L), "`kernel`")
  expect_error(ok(kernel = -1L), "`kernel`")
  expect_error(ok(kernel = 8L), "`kernel`")
  expect_error(ok(kernel = NA_integer_), "`kernel`")
  expect_error(ok(kernel = "gaussian"), "`kernel`")
  expect_error(ok(kernel = NULL), "`kernel`")
  expect_error(ok(kernel = 1:2), "`kernel`")
  expect_error(ok(log_const = "a"), "`log_const`")
  expect_error(ok(log_const = NULL), "`log_const`")
  expect_error(ok(log_const = c(1, 2)), "`log_const`")
  expect_error(ok(leave_one_out = "yes"), "`leave_one_out`")
  expect_error(ok(leave_one_out = NULL), "`leave_one_out`")
  expect_error(ok(leave_one_out = NA), "`leave_one_out`")
  expect_error(ok(leave_one_out = c(TRUE, FALSE)), "`leave_one_out`")
  expect_error(ok(tile_size = 7L), "`tile_size` must be 0 .* or 256")
  expect_error(ok(tile_size = NA_integer_), "`tile_size`")
  expect_error(ok(tolerance = -1), "`tolerance` must be one number in \\[0, 1\\)")
  expect_error(ok(tolerance = 1), "`tolerance` must be one number in \\[0, 1\\)")
  expect_error(ok(tolerance = NA_real_), "`tolerance`")
  expect_error(ok(tolerance = "a"), "`tolerance`")
  # a tolerance changes nothing for points in no spatial order (tile_size 0)
  expect_equal(ok(tolerance = 0.5), ok(), tolerance = 1e-15)
  # Leave-one-out needs the training points as the queries.
  expect_error(ok(leave_one_out = TRUE), "`leave_one_out` needs the queries")
  expect_error(ok(threads = "a"), "`threads`")
  expect_error(ok(threads = NULL), "`threads`")
  expect_error(ok(threads = NA_integer_), "`threads`")
  expect_error(ok(threads = 1:2), "`threads`")
  # R itself refuses a call with the wrong number of arguments.
  expect_error(.Call(entry, train, weight, query, NULL, NULL, 0L, 0, FALSE),
               "expecting 13")
  expect_error(.Call(entry), "expecting 13")
})
