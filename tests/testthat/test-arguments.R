# Arguments that would otherwise vanish or be trusted: unknown arguments in
# `...`, the names of the points, damaged objects and foreign pointers.

test_that("predict() rejects arguments it does not know, and points `x =` to `newdata`", {
  fit <- kde_gpu(faithful, backend = "cpu")
  expect_error(predict(fit, x = faithful[1:2, ]), "unknown argument `x`.*`newdata`")
  expect_error(predict(fit, faithful[1:2, ], lgo = TRUE), "unknown argument `lgo`.*Did you mean `log`")
  expect_error(predict(fit, tpye = "cdf"), "unknown argument `tpye`.*Did you mean `type`")
  expect_error(predict(fit, faithful[1:2, ], TRUE, FALSE, NULL, "queries", 0, "density", NULL, 7),
               "1 unnamed argument too many")
  expect_length(predict(fit, newdata = faithful[1:2, ]), 2L)
})

test_that("every method rejects unknown arguments by name", {
  fit <- kde_gpu(faithful$eruptions, backend = "cpu")
  expect_error(logLik(fit, clusterr = NULL), "logLik\\(\\) got unknown argument `clusterr`")
  expect_error(summary(fit, digits = 3), "summary\\(\\) got unknown argument `digits`")
  expect_error(print(fit, foo = 1), "print\\(\\) got unknown argument `foo`")
  expect_error(as.density(fit, bw = 1), "as.density\\(\\) got unknown argument `bw`")
  expect_error(sample(fit, 10, sizee = 3), "sample\\(\\) got unknown argument `sizee`")
  expect_error(sample(fit, 10, replace = FALSE), "`replace` must be TRUE")
  expect_error(sample(fit, 10, prob = rep(1, 272)), "`prob` does not apply")
  expect_error(simulate(fit, nsim = 1, seeed = 1), "simulate\\(\\) got unknown argument `seeed`")
  expect_error(sample(1:3, 2, repalce = TRUE), "sample\\(\\) got unknown argument `repalce`")
  expect_error(print(kdegpu_info(), verbose = TRUE), "unknown argument `verbose`")
  expect_output(print(fit, digits = 2), "bw = ")
})

test_that("predict() names its values after the points", {
  fit2 <- kde_gpu(faithful, backend = "cpu")
  q <- faithful[c(5, 9), ]
  expect_named(predict(fit2, q), c("5", "9"))
  m <- as.matrix(q)
  rownames(m) <- c("first", "second")
  expect_named(predict(fit2, m, log = TRUE), c("first", "second"))
  expect_null(names(predict(fit2, unname(as.matrix(q)))))
  fit1 <- kde_gpu(c(a = 1, b = 2, c = 5), backend = "cpu")
  out <- predict(fit1, c(u = 1, v = 2))
  expect_named(out, c("u", "v"))
  # the values are the same with and without names
  expect_equal(unname(out), predict(fit1, c(1, 2)))
  named_rows <- matrix(c(1, 2, 4, 3, 1, 2), 3, dimnames = list(c("r1", "r2", "r3"), NULL))
  fit3 <- kde_gpu(named_rows, bw = 1, backend = "cpu")
  expect_named(predict(fit3, leave_one_out = TRUE), c("r1", "r2", "r3"))
  expect_named(predict(fit3), c("r1", "r2", "r3"))
})

# A matrix whose dim claims more values than it holds, as readRDS() of a
# damaged file gives: unserialize() does not check dim.
damaged_matrix <- function() {
  s <- rawToChar(serialize(matrix(c(1.5, 2.5, 3.5, 4.5), 2, 2), NULL, ascii = TRUE))
  unserialize(charToRaw(sub("dim\n13\n2\n2\n2\n", "dim\n13\n2\n100000\n100\n", s, fixed = TRUE)))
}

test_that("a matrix whose dim does not match its length is an error, in R and in C", {
  y <- damaged_matrix()
  expect_identical(dim(y), c(100000L, 100L))
  expect_identical(length(y), 4L)
  fit <- kde_gpu(matrix(rnorm(40), ncol = 2), backend = "cpu")
  expect_error(predict(fit, y), "`newdata` is damaged")
  expect_error(kde_gpu(y, backend = "cpu"), "`x` is damaged")
  expect_error(.Call(kdegpu:::C_kdegpu_lse_rows, y), "`parts` is damaged")
  expect_error(.Call(kdegpu:::C_kdegpu_whiten, y, c(0, 0), diag(2), 1L), "`x` is damaged")
  expect_error(.Call(kdegpu:::C_kdegpu_whiten, fit$x, c(0, 0), y, 1L), "`transform` is damaged")
  entry <- kdegpu:::C_kdegpu_log_density_cpu
  args <- list(fit$z, fit$weights, NULL, 0L, fit$z[1:2, ], NULL, NULL, 0L, 0, FALSE, 0, 1L, -1)
  expect_error(do.call(.Call, c(list(entry, y), args[-1])), "`train` is damaged")
  expect_error(do.call(.Call, c(list(entry), args[1:4], list(y), args[-(1:5)])),
               "`query` is damaged")
})

test_that("a damaged fit stops every method with an error that says so", {
  fit <- kde_gpu(matrix(rnorm(40), ncol = 2), backend = "cpu")
  broken <- fit
  broken$z <- damaged_matrix()
  expect_error(predict(broken), "`object` is not an intact kde_gpu\\(\\) fit")
  expect_error(logLik(broken), "`object` is not an intact")
  expect_error(sample(broken, 3), "`x` is not an intact")
  broken <- fit
  broken$weights <- broken$weights[-1]
  expect_error(predict(broken, c(0, 0)), "`object` is not an intact")
  broken <- fit
  broken$kernel <- "nonsense"
  expect_error(predict(broken, c(0, 0)), "`object` is not an intact")
})

test_that("the CUDA glue accepts only pointers it made", {
  foreign <- new("externalptr") # a NULL pointer without kdegpu's tag
  expect_false(.Call(kdegpu:::C_kdegpu_cuda_model_valid, foreign))
  expect_error(.Call(kdegpu:::C_kdegpu_cuda_model_release, foreign),
               "`model` must be a CUDA model made by kdegpu")
  expect_error(.Call(kdegpu:::C_kdegpu_cuda_model_release, "a"),
               "`model` must be a CUDA model made by kdegpu")
  expect_null(.Call(kdegpu:::C_kdegpu_cuda_model_release, NULL))
  expect_error(.Call(kdegpu:::C_kdegpu_log_density_cuda, foreign, matrix(0, 1, 1), NULL, NULL,
                     0, FALSE, 0, 1L, -1),
               "`model` must be a CUDA model made by kdegpu")
})
