# The capability table: one row per operation and backend, its limits the
# C code's, and the dispatch following it.

test_that("the capability table lists every operation on both backends, limits from C", {
  info <- kdegpu_info()
  table <- info$capabilities
  expect_s3_class(table, "data.frame")
  expect_named(table, c("operation", "backend", "precision", "kernels", "max_dim", "adaptive",
                        "bounded", "gpus", "otherwise"))
  for (op in unique(table$operation)) {
    expect_setequal(table$backend[table$operation == op], c("cuda", "cpu"))
  }
  limits <- .Call(kdegpu:::C_kdegpu_limits)
  expect_identical(names(limits), c("cuda_derivative_max_dim", "cuda_discrete_max",
                                    "cuda_plan_max_dim", "cuda_sample_max_dim",
                                    "derivative_result_max_dim"))
  expect_true(all(limits >= 1L))
  row <- table[table$operation == "tile skipping" & table$backend == "cuda", ]
  expect_identical(row$max_dim, limits[["cuda_plan_max_dim"]])
  expect_output(print(info), "What runs where")
})

test_that("the dispatch reads the table: spatial order, derivatives beyond the limit", {
  limits <- .Call(kdegpu:::C_kdegpu_limits)
  expect_true(kdegpu:::spatial_order_wanted("cpu", 50L))
  expect_true(kdegpu:::spatial_order_wanted("cuda", limits[["cuda_plan_max_dim"]]))
  expect_false(kdegpu:::spatial_order_wanted("cuda", limits[["cuda_plan_max_dim"]] + 1L))
  d <- limits[["derivative_result_max_dim"]] + 1L
  set.seed(1)
  fit <- kde_gpu(matrix(rnorm(3 * d), 3), bw = 1, backend = "cpu")
  expect_error(predict(fit, type = "gradient"),
               sprintf("`type` = \"gradient\" serves fits of up to %d dimensions", d - 1L),
               fixed = TRUE)
  cpu_fit <- kde_gpu(faithful, backend = "cpu")
  expect_false(kdegpu:::gpu_serves("sample", cpu_fit))
})
