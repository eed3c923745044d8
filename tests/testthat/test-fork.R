# Forked children (parallel::mclapply, makeForkCluster) of a process that
# has run OpenMP regions: libgomp's thread pool does not survive fork(), so
# without src/threads.c's fork handler the child's first parallel region
# waits forever. The scripts run in a separate R process under a time limit,
# so that a hang fails the test instead of stopping the suite.

run_forking_script <- function(code, seconds = 120) {
  skip_on_os("windows")
  skip_if(Sys.which("timeout") == "", "no `timeout` command")
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script))
  writeLines(c(sprintf("library(kdegpu, lib.loc = %s)", deparse(dirname(find.package("kdegpu")))),
               code), script)
  rscript <- file.path(R.home("bin"), "Rscript")
  output <- suppressWarnings(system2("timeout", c(seconds, shQuote(rscript), shQuote(script)),
                                     stdout = TRUE, stderr = TRUE))
  status <- attr(output, "status")
  list(status = if (is.null(status)) 0L else status, output = paste(output, collapse = "\n"))
}

test_that("mclapply() children evaluate after the parent ran parallel work", {
  skip_if(parallel::detectCores() < 2L, "needs 2 cores for OpenMP's thread pool")
  res <- run_forking_script(c(
    "set.seed(1)",
    "fit <- kde_gpu(matrix(rnorm(9000), ncol = 3), backend = 'cpu')",
    "ref <- predict(fit, fit$x[1:500, ])", # the parent's pool now exists
    "out <- parallel::mclapply(1:2, function(i) predict(fit, fit$x[1:500, ]), mc.cores = 2)",
    "stopifnot(length(out) == 2L, !vapply(out, inherits, NA, 'try-error'))",
    "stopifnot(all.equal(out[[1]], ref, tolerance = 1e-14), all.equal(out[[2]], ref, tolerance = 1e-14))",
    # (mclapply() runs a single job in the parent: give it two)
    "child_threads <- parallel::mclapply(1:2, function(i) kdegpu_info()$threads, mc.cores = 2)",
    "cat('children:', kdegpu_info()$threads, unlist(child_threads), '\\n')",
    "cat('FORK-OK\\n')"))
  expect_equal(res$status, 0L, info = res$output)
  expect_match(res$output, "FORK-OK")
  # a child runs its regions on one thread (see src/threads.c)
  expect_match(res$output, "children: [0-9]+ 1 1")
})

test_that("a fork cluster evaluates a fit through predict(cluster = )", {
  skip_if(parallel::detectCores() < 2L, "needs 2 cores for OpenMP's thread pool")
  # a fork cluster talks over sockets: R's internet module must be there
  sockets <- tryCatch({
    close(socketConnection(port = 1L, timeout = 1)); TRUE
  }, error = function(e) !grepl("internet routines", conditionMessage(e)),
     warning = function(w) !grepl("internet", conditionMessage(w)))
  skip_if_not(sockets, "R's internet module (sockets) is not available")
  res <- run_forking_script(c(
    "set.seed(2)",
    "fit <- kde_gpu(matrix(rnorm(6000), ncol = 2), backend = 'cpu')",
    "ref <- predict(fit, fit$x[1:400, ], log = TRUE)",
    "cl <- parallel::makeForkCluster(2)",
    "out <- predict(fit, fit$x[1:400, ], log = TRUE, cluster = cl)",
    "parallel::stopCluster(cl)",
    "stopifnot(isTRUE(all.equal(out, ref, tolerance = 1e-12)))",
    "cat('FORK-OK\\n')"))
  expect_equal(res$status, 0L, info = res$output)
  expect_match(res$output, "FORK-OK")
})

test_that("a forked child refuses the CUDA context it inherited, and says what to use", {
  skip_without_gpu()
  res <- run_forking_script(c(
    "fit <- kde_gpu(matrix(rnorm(3000), ncol = 3), backend = 'cuda')",
    "invisible(predict(fit, fit$x[1:10, ]))", # the parent's CUDA context exists
    "out <- parallel::mclapply(1:2, function(i) tryCatch(predict(fit, fit$x[1:10, ]),",
    "  error = function(e) conditionMessage(e)), mc.cores = 2)[[1]]",
    "cat('CHILD:', out, '\\n')",
    "auto <- parallel::mclapply(1:2, function(i) kde_gpu(fit$x)$backend, mc.cores = 2)[[1]]",
    "cat('AUTO:', auto, '\\n')",
    "stopifnot(all.equal(predict(fit, fit$x[1:10, ]), predict(fit, fit$x[1:10, ])))",
    "cat('FORK-OK\\n')"))
  expect_equal(res$status, 0L, info = res$output)
  expect_match(res$output, "CHILD: .*forked.*PSOCK")
  expect_match(res$output, "AUTO: cpu")
  expect_match(res$output, "FORK-OK")
})
