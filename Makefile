# Every target that needs Python creates .venv and installs what it needs first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast bench bench-codec bench-search bench-storage bench-options bench-collection bench-ivf \
	bench-distributed reproduce clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Builds the Cython extension in place (editable install) with the test extras.
$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard ockstore/*.pyx ockstore/*.pxd ockstore/*.h)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# The package alone (the demo needs nothing else); a later `make test` adds the test extras.
$(VENV)/.installed-base: $(BIN)/python pyproject.toml setup.py $(wildcard ockstore/*.pyx ockstore/*.pxd ockstore/*.h)
	$(BIN)/python -m pip install -q -e .
	touch $(VENV)/.installed-base

install: $(STAMP)

demo: $(VENV)/.installed-base
	$(BIN)/python demo/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Benchmarks compare against faiss-cpu, installed only here (never a dependency of the package).
$(VENV)/.bench: $(STAMP)
	$(BIN)/python -m pip install -q faiss-cpu matplotlib
	touch $(VENV)/.bench

bench: bench-codec bench-search bench-storage bench-options bench-collection bench-ivf bench-distributed

bench-codec: $(VENV)/.bench
	$(BIN)/python tools/bench_codec.py

bench-collection: $(VENV)/.bench
	$(BIN)/python tools/bench_collection.py

# Dask (the extra ockstore[dask]) is among the test extras the stamp installs.
bench-distributed: $(VENV)/.bench
	$(BIN)/python tools/bench_distributed.py

bench-search: $(VENV)/.bench
	$(BIN)/python tools/bench_search.py

bench-storage: $(VENV)/.bench
	$(BIN)/python tools/bench_storage.py

bench-options: $(VENV)/.bench
	$(BIN)/python tools/bench_options.py

bench-ivf: $(VENV)/.bench
	$(BIN)/python tools/bench_ivf.py

reproduce: $(VENV)/.bench
	$(BIN)/python tools/reproduce_paper.py --data ../shared/data/sift-real ../shared/data/minilm-real --out docs/

clean:
	rm -rf build ockstore/_*_kernels.c ockstore/*.so *.egg-info
