# Developer entry points for kdegpu. Not part of the R package (it is in
# .Rbuildignore), so GNU make features are fine here.
#
#   make deps           install R and the R packages used here (Debian/Ubuntu, apt)
#   make install        deps, then R CMD INSTALL .
#   make demo           install, then Rscript $(DEMO) (inst/demo/demo.R or inst/examples/demo.R)
#   make test           install, then the testthat suite against the installed package
#   make test-cpu-only  build a tarball, install it --without-cuda into a temporary
#                       library, then the tests against that
#   make document       roxygen2::roxygenise(), sourcing R/ (no compilation)
#   make check          R CMD build (its vignettes on a CPU-only install), then
#                       R CMD check --as-cran --no-manual; fails on any ERROR or
#                       WARNING (NOTEs are listed, not fatal)
#   make lint-c         compiles src/*.c with -Wall -Wextra -Werror, and fails
#                       on an OpenMP parallel region without num_threads() and
#                       on a legacy-stream copy or memset to a device
#                       (src/cuda/model.cuh's copy_to_replica orders a copy on
#                       the kernels' stream)
#   make gpu-host-checks  the CUDA derivative kernels and their pruning plan,
#                       emulated on the host (no GPU; tools/gpu-tests/README.md)
#   make clean          remove build products
#
# Variables:
#   LIB=DIR           library to install into (default: R's first library when
#                     writable, else ./.Rlib); test and demo put it first on R_LIBS
#   INSTALL_ARGS=...  extra R CMD INSTALL arguments, e.g.
#                     INSTALL_ARGS="--configure-args=--with-cuda=/opt/cuda"
#   SKIP_DEPS=1       do not check or install system packages (e.g. on the GPU
#                     machine, whose R comes from .gpu/rbundle.tar.xz, not apt)
#   KDEGPU_TEST_COUNTS=FILE  test runs append "passed failed skipped" to FILE
#   JOBS=N            parallel compile jobs of the package's sources (default:
#                     the cores); the CUDA kernel families compile side by side

R ?= R
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RSCRIPT ?= Rscript
PKG := kdegpu

DEB_PACKAGES := r-base-dev r-cran-testthat r-cran-ks r-cran-kernsmooth \
  r-cran-knitr r-cran-rmarkdown r-cran-roxygen2 r-cran-future \
  r-cran-future.apply r-cran-bench r-cran-ggplot2 pandoc qpdf devscripts

# Evaluated when a recipe runs (after deps), not when make starts: R may not
# be installed yet then.
INSTALL_LIB = $(if $(LIB),$(LIB),$(shell $(RSCRIPT) -e 'p <- .libPaths()[1]; cat(if (file.access(p, 2) == 0) p else "$(CURDIR)/.Rlib")' 2>/dev/null))
VERSION = $(shell sed -n 's/^Version: *//p' DESCRIPTION)
DEMO ?= $(firstword $(wildcard inst/demo/demo.R inst/examples/demo.R) inst/demo/demo.R)

# Runs tests/testthat against the installed package (progress bar on a
# terminal, a compact summary in logs); prints and records
# "N passed, N failed, N skipped" (failed counts failed expectations plus
# errors, as testthat's FAIL does) and exits non-zero on any failure.
RUN_TESTS := \
  res <- testthat::test_local(".", \
    reporter = if (isatty(stdout())) testthat::ProgressReporter$$new(show_praise = FALSE) \
      else testthat::SummaryReporter$$new(show_praise = FALSE), \
    load_package = "installed", stop_on_failure = FALSE); \
  df <- as.data.frame(res); \
  n <- c(sum(df$$passed), sum(df$$failed) + sum(df$$error), sum(df$$skipped)); \
  cat(sprintf("%d passed, %d failed, %d skipped\n", n[1], n[2], n[3])); \
  out <- Sys.getenv("KDEGPU_TEST_COUNTS"); \
  if (nzchar(out)) cat(n, "\n", file = out, append = TRUE); \
  quit(status = as.integer(n[2] > 0))

.PHONY: deps install demo test test-cpu-only document check lint-c gpu-host-checks clean

deps:
	@if [ -n "$(SKIP_DEPS)" ]; then echo "make deps: skipped (SKIP_DEPS is set)"; exit 0; fi; \
	if ! command -v dpkg-query >/dev/null 2>&1; then \
	  echo "make deps: no dpkg here; install R and the R packages testthat, ks, KernSmooth,"; \
	  echo "  knitr, rmarkdown, roxygen2, future, future.apply and bench, and pandoc, yourself"; \
	  command -v $(RSCRIPT) >/dev/null 2>&1 || exit 1; exit 0; \
	fi; \
	missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' \
	    || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "make deps: all present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi; \
	echo "make deps: installing$$missing"; \
	$$sudo apt-get update && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing

# A lock left behind by an install that was killed (R names it after this
# folder) would refuse every later install; it is removed when no install is
# running.
install: deps
	@lib="$(INSTALL_LIB)"; mkdir -p "$$lib" && \
	lock="$$lib/00LOCK-$(notdir $(CURDIR))"; \
	if [ -d "$$lock" ] && ! pgrep -f '[t]ools:::[.]install_packages' >/dev/null 2>&1; then \
	  echo "make install: removing $$lock, left by an install that did not finish"; \
	  rm -rf "$$lock"; \
	fi; \
	echo "$(R) CMD INSTALL -l $$lib $(INSTALL_ARGS) ." && \
	MAKEFLAGS=-j$(JOBS) $(R) CMD INSTALL -l "$$lib" $(INSTALL_ARGS) .

demo: install
	R_LIBS="$(INSTALL_LIB)$${R_LIBS:+:$$R_LIBS}" $(RSCRIPT) $(DEMO)

test: install
	@lib="$(INSTALL_LIB)"; echo "running the tests against the package in $$lib" && \
	R_LIBS="$$lib$${R_LIBS:+:$$R_LIBS}" $(RSCRIPT) -e '$(RUN_TESTS)'

# Builds from a source tarball in a temporary folder, so the in-place (CUDA)
# objects in src/ stay valid for the next `make install`.
test-cpu-only: deps
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/kdegpu-cpu-only.XXXXXX") && \
	trap 'rm -rf "$$tmp"' EXIT && \
	(cd "$$tmp" && $(R) CMD build --no-build-vignettes --no-manual "$(CURDIR)") && \
	mkdir "$$tmp/lib" && \
	echo "$(R) CMD INSTALL --configure-args=--without-cuda -l $$tmp/lib $(PKG)_$(VERSION).tar.gz" && \
	$(R) CMD INSTALL --configure-args=--without-cuda -l "$$tmp/lib" "$$tmp/$(PKG)_$(VERSION).tar.gz" && \
	echo "running the tests against the CPU-only build" && \
	KDEGPU_WITHOUT_CUDA=1 R_LIBS="$$tmp/lib$${R_LIBS:+:$$R_LIBS}" $(RSCRIPT) -e '$(RUN_TESTS)'

document: deps
	$(RSCRIPT) -e 'roxygen2::roxygenise(load_code = roxygen2::load_source)'

# The checks that need the network (CRAN incoming, the clock behind "future
# file timestamps") are off unless the environment turns them on.
# The vignettes run on the CPU backend (backend = "cpu" throughout), so the
# install that R CMD build makes for them leaves CUDA out; R CMD check's
# install of the tarball compiles it.
check: deps
	rm -rf $(PKG).Rcheck $(PKG)_$(VERSION).tar.gz
	KDEGPU_WITHOUT_CUDA=1 MAKEFLAGS=-j$(JOBS) $(R) CMD build .
	_R_CHECK_CRAN_INCOMING_REMOTE_=$${_R_CHECK_CRAN_INCOMING_REMOTE_:-false} \
	_R_CHECK_SYSTEM_CLOCK_=$${_R_CHECK_SYSTEM_CLOCK_:-false} \
	  MAKEFLAGS=-j$(JOBS) $(R) CMD check --as-cran --no-manual $(PKG)_$(VERSION).tar.gz
	@status=$$(grep '^Status:' $(PKG).Rcheck/00check.log | tail -n 1); echo "R CMD check: $$status"; \
	case "$$status" in *ERROR*|*WARNING*) echo "R CMD check: errors or warnings (see above)"; exit 1 ;; esac

# The C sources with the strictest usual warnings as errors (R's own flags
# are milder), and the rule that every OpenMP parallel region names its
# thread count (data.table's CI rule: a region without num_threads() would
# use all cores whatever options(kdegpu.threads) says).
lint-c: deps
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/kdegpu-lint.XXXXXX") && trap 'rm -rf "$$tmp"' EXIT && \
	printf '#define KDEGPU_CUDA_OFF_REASON "lint"\n' > "$$tmp/cuda_off_reason.h" && \
	cc=$$($(R) CMD config CC) && rinc=$$($(R) RHOME)/include && \
	if [ ! -f "$$rinc/R.h" ]; then rinc=$$($(RSCRIPT) -e 'cat(R.home("include"))'); fi && \
	status=0 && \
	for f in src/*.c; do \
	  $$cc -std=gnu99 -fopenmp -Wall -Wextra -Werror -fsyntax-only -I"$$tmp" -I"$$rinc" \
	    -Iinst/include -Isrc "$$f" || status=1; \
	done && \
	if grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
	     '#pragma omp parallel' src inst/include | grep -v 'num_threads('; then \
	  echo "lint-c: the OpenMP parallel regions above lack num_threads()"; status=1; \
	fi && \
	if awk '/cudaMemcpy(2D|3D|ToSymbol)?\(|cudaMemset(2D|3D)?\(/ { held = ""; at = FILENAME ":" FNR; on = 1 } \
	        on { held = held $$0; if ($$0 ~ /\);/) { on = 0; \
	               if (held ~ /cudaMemset|ToSymbol/ || held !~ /DeviceToHost/) { print at ": " held; bad = 1 } } } \
	        END { exit !bad }' src/cuda/*.cu src/cuda/*.cuh; then \
	  echo "lint-c: a legacy-stream copy or memset to the device above: use copy_to_replica (model.cuh) or the Async call on the replica's stream"; status=1; \
	fi && \
	if [ $$status -eq 0 ]; then echo "lint-c: src/*.c clean with -Wall -Wextra; every parallel region has num_threads(); no legacy-stream copy to a device"; fi && \
	exit $$status

gpu-host-checks:
	bash tools/gpu-tests/run.sh host

clean:
	sh ./cleanup
	rm -rf .Rlib $(PKG).Rcheck $(PKG)_*.tar.gz tools/gpu-tests/emulate/build \
	  tools/gpu-tests/emulate/build-density tools/gpu-tests/emulate/build-gate \
	  tools/gpu-tests/harness/build tools/gpu-tests/harness/out
