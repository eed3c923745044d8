# Evaluation over parallel clusters and future plans, against the
# single-process results (two local workers).

# Two local PSOCK workers, or a skip where sockets are unavailable (R built
# without its internet module, as on some minimal machines).
start_cluster <- function() {
  cl <- tryCatch(parallel::makePSOCKcluster(2), error = function(e) e)
  if (inherits(cl, "error")) skip(paste("cannot start local PSOCK workers:", conditionMessage(cl)))
  cl
}

# Stops the workers and closes every connection, a dead worker's too.
stop_cluster <- function(cl) {
  try(parallel::stopCluster(cl), silent = TRUE)
  for (node in cl) try(close(node$con), silent = TRUE)
}

# One pair of workers for the tests that leave them as they found them,
# started by the first that needs one and stopped at the end of the file
# (each start costs seconds); the tests that count what the workers hold,
# break one or patch one start their own.
shared <- new.env()
shared_cluster <- function() {
  if (is.null(shared$cl)) shared$cl <- start_cluster()
  shared$cl
}

cluster_data_set <- function(seed = 1) {
  set.seed(seed)
  list(x = matrix(rnorm(1500), ncol = 3), q = matrix(rnorm(150, sd = 2), ncol = 3),
       w = runif(500))
}

rel_err <- function(a, b) {
  finite <- is.finite(b)
  expect_identical(is.finite(a), finite)
  max(abs(a[finite] / b[finite] - 1), 0)
}

test_that("predict over a PSOCK cluster equals the single-process result", {
  cl <- shared_cluster()
  data <- cluster_data_set()
  for (kernel in c("gaussian", "epanechnikov", "exponential")) {
    fit <- kde_gpu(data$x, kernel = kernel, weights = data$w, backend = "cpu")
    ref <- predict(fit, data$q, log = TRUE)
    by_queries <- predict(fit, data$q, log = TRUE, cluster = cl)
    by_training <- predict(fit, data$q, log = TRUE, cluster = cl, split = "training")
    expect_equal(by_queries, ref, tolerance = 1e-14)
    expect_lt(rel_err(by_training, ref), 1e-12)
    expect_equal(predict(fit, cluster = cl), predict(fit), tolerance = 1e-14)
  }
})

test_that("leave-one-out and logLik over a cluster equal the single-process ones", {
  cl <- shared_cluster()
  data <- cluster_data_set(2)
  fit <- kde_gpu(data$x, weights = data$w, backend = "cpu")
  expect_lt(rel_err(predict(fit, log = TRUE, leave_one_out = TRUE, cluster = cl),
                    predict(fit, log = TRUE, leave_one_out = TRUE)), 1e-12)
  expect_equal(as.numeric(logLik(fit, cluster = cl)), as.numeric(logLik(fit)),
               tolerance = 1e-12)
  # A compact kernel whose leave-one-out density is 0 for isolated points.
  fit_c <- kde_gpu(rbind(data$x, c(50, 50, 50)), bw = 0.3, kernel = "biweight", backend = "cpu")
  expect_lt(rel_err(predict(fit_c, log = TRUE, leave_one_out = TRUE, cluster = cl),
                    predict(fit_c, log = TRUE, leave_one_out = TRUE)), 1e-12)
})

test_that("mixed data over a cluster equal the single-process sums (fused or embedded)", {
  cl <- shared_cluster()
  set.seed(4)
  x <- data.frame(a = rnorm(300), b = rnorm(300),
                  g = factor(sample(c("u", "v", "w"), 300, TRUE)),
                  o = factor(sample(1:3, 300, TRUE), ordered = TRUE))
  q <- x[sample(300, 40), ]
  q$a <- q$a + 0.1
  fit <- kde_gpu(x, H = diag(c(0.3, 0.2)), lambda = c(g = 0.2, o = 0.3), backend = "cpu")
  expect_lt(rel_err(predict(fit, q, log = TRUE, cluster = cl), predict(fit, q, log = TRUE)),
            1e-12)
  expect_lt(rel_err(predict(fit, log = TRUE, leave_one_out = TRUE, cluster = cl),
                    predict(fit, log = TRUE, leave_one_out = TRUE)), 1e-12)
})

test_that("leave-one-out of bounded fits over a cluster leaves out every image", {
  cl <- shared_cluster()
  data <- cluster_data_set(3)
  x <- abs(data$x)
  # one bound (2 images of column 1), two bounds on column 2, and adaptive
  fits <- list(
    kde_gpu(x, weights = data$w, lower = c(0, -Inf, -Inf), backend = "cpu"),
    kde_gpu(x, kernel = "biweight", lower = c(0, 0, -Inf), upper = c(Inf, 3.5, Inf),
            backend = "cpu"),
    kde_gpu(x, weights = data$w, lower = 0, adaptive = TRUE, backend = "cpu"))
  for (fit in fits) {
    expect_gt(nrow(fit$images$sign), 1L)
    expect_lt(rel_err(predict(fit, log = TRUE, leave_one_out = TRUE, cluster = cl),
                      predict(fit, log = TRUE, leave_one_out = TRUE)), 1e-12)
  }
})

test_that("training data reach each worker once per fit", {
  cl <- start_cluster()
  on.exit(stop_cluster(cl), add = TRUE)
  data <- cluster_data_set(3)
  fit <- kde_gpu(data$x, backend = "cpu")
  predict(fit, data$q, cluster = cl, split = "training")
  stored <- parallel::clusterEvalQ(cl, ls(kdegpu:::worker_store))
  predict(fit, data$q[1:5, ], cluster = cl, split = "training")
  expect_identical(parallel::clusterEvalQ(cl, ls(kdegpu:::worker_store)), stored)
  expect_true(all(lengths(stored) == 1L))
  # The shards together hold each training point once.
  sizes <- unlist(parallel::clusterEvalQ(cl, nrow(get(ls(kdegpu:::worker_store)[1],
                                                       envir = kdegpu:::worker_store)$x)))
  expect_equal(sum(sizes), nrow(data$x))
})

test_that("a worker that disappears gives a clear error, never a partial result", {
  cl <- start_cluster()
  on.exit(stop_cluster(cl), add = TRUE)
  data <- cluster_data_set(4)
  fit <- kde_gpu(data$x, backend = "cpu")
  predict(fit, data$q, cluster = cl)
  try(parallel::clusterEvalQ(cl[2], quit("no")), silent = TRUE)
  expect_error(predict(fit, data$q, cluster = cl), "worker")
})

test_that("an error on a worker is reported with the worker's number", {
  cl <- start_cluster()
  on.exit(stop_cluster(cl), add = TRUE)
  data <- cluster_data_set(5)
  fit <- kde_gpu(data$x, backend = "cpu")
  parallel::clusterEvalQ(cl[2], {
    ns <- asNamespace("kdegpu")
    unlockBinding("worker_evaluate", ns)
    assign("worker_evaluate", function(shard, task) stop("simulated failure"), envir = ns)
  })
  expect_error(predict(fit, data$q, cluster = cl), "worker 2 .*simulated failure")
})

test_that("predict and bandwidth selection under a future multisession plan", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  old_plan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(old_plan), add = TRUE)
  started <- tryCatch(future::value(future::future(TRUE)), error = function(e) e)
  if (inherits(started, "error")) skip(paste("cannot start future workers:", conditionMessage(started)))
  data <- cluster_data_set(6)
  fit <- kde_gpu(data$x, weights = data$w, backend = "cpu")
  ref <- predict(fit, data$q, log = TRUE)
  expect_equal(predict(fit, data$q, log = TRUE, cluster = "future"), ref, tolerance = 1e-14)
  expect_lt(rel_err(predict(fit, data$q, log = TRUE, cluster = "future", split = "training"), ref),
            1e-12)
  expect_equal(as.numeric(logLik(fit, cluster = "future")), as.numeric(logLik(fit)),
               tolerance = 1e-12)
})

test_that("bw_mlcv and bw_lscv over a cluster equal the single-process selectors", {
  cl <- shared_cluster()
  data <- cluster_data_set(7)
  x <- data$x[1:200, 1:2]
  for (selector in list(bw_mlcv, bw_lscv)) {
    here <- selector(x, shape = "full", backend = "cpu", grid = 6)
    there <- selector(x, shape = "full", backend = "cpu", grid = 6, cluster = cl)
    expect_equal(attr(there, "criterion"), attr(here, "criterion"), tolerance = 1e-10)
    expect_equal(unclass(there)[1:2, 1:2], unclass(here)[1:2, 1:2], tolerance = 1e-6)
  }
  # bounded: each worker leaves its points out of its shard's sums at their images
  xb <- abs(x)
  here <- bw_mlcv(xb, shape = "full", lower = c(0, 0), backend = "cpu", grid = 6)
  there <- bw_mlcv(xb, shape = "full", lower = c(0, 0), backend = "cpu", grid = 6, cluster = cl)
  expect_equal(attr(there, "criterion"), attr(here, "criterion"), tolerance = 1e-10)
  expect_equal(unclass(there)[1:2, 1:2], unclass(here)[1:2, 1:2], tolerance = 1e-6)
})

test_that("bad cluster arguments are rejected naming the argument", {
  fit <- kde_gpu(rnorm(20), backend = "cpu")
  expect_error(predict(fit, 0, cluster = 3), "`cluster`")
  expect_error(predict(fit, 0, cluster = "nope"), "`cluster`")
  expect_error(predict(fit, 0, split = "rows"), "`split`")
  expect_error(.Call(kdegpu:::C_kdegpu_lse_rows, "a"), "`parts`")
  expect_error(.Call(kdegpu:::C_kdegpu_lse_rows, matrix(NaN)), "`parts`")
  expect_equal(.Call(kdegpu:::C_kdegpu_lse_rows, matrix(c(log(2), -Inf, log(3), -Inf), 2)),
               c(log(5), -Inf))
})

if (!is.null(shared$cl)) stop_cluster(shared$cl)
