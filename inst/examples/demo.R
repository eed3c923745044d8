# kdegpu demo: `make demo` runs this after installing the package.
#
# 1. quakes (1000 earthquakes near Fiji, 3-D: lat, long, depth): outlier
#    scores as leave-one-out log-densities under a full-bandwidth Gaussian KDE.
# 2. faithful (272 eruptions, 2-D): the density as a picture, written to
#    demo-output/faithful.png, with a sample drawn from the fit on top.
suppressPackageStartupMessages(library(kdegpu))

out_dir <- Sys.getenv("KDEGPU_DEMO_DIR", "demo-output")
dir.create(out_dir, showWarnings = FALSE, recursive = TRUE)

cat("== What this installation can do\n")
print(kdegpu_info())

cat("\n== quakes: outlier scores in 3-D\n")
quake_points <- quakes[, c("lat", "long", "depth")]
fit <- kde_gpu(quake_points) # Scott's rule, full H; GPU if usable, else CPU
print(fit)
# Leave-one-out log-density of each quake: how well the other 999 explain it.
score <- predict(fit, log = TRUE, leave_one_out = TRUE)
cat(sprintf("log-likelihood (leave-one-out): %.1f\n", as.numeric(logLik(fit))))
rarest <- order(score)[1:5]
cat("The five least typical quakes (lowest log-density):\n")
print(cbind(quakes[rarest, c("lat", "long", "depth", "mag")], log_density = round(score[rarest], 2)))

cat("\n== faithful: a 2-D density picture\n")
fit2 <- kde_gpu(faithful)
print(fit2)
set.seed(1)
draws <- sample(fit2, 300)
png_file <- file.path(out_dir, "faithful.png")
grDevices::png(png_file, width = 800, height = 650)
plot(fit2, main = "Old Faithful: exact Gaussian KDE (kdegpu), 300 draws from it in blue")
points(faithful, pch = 20, cex = 0.6)
points(draws, pch = 3, cex = 0.6, col = "blue")
invisible(grDevices::dev.off())
cat("density at (3.5 min, 70 min):", signif(predict(fit2, c(3.5, 70)), 4), "\n")
cat("wrote", png_file, "\n")
