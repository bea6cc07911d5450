# A thin layer over CMake. `make test` and `make bench` work on a fresh
# Debian 12 machine as root: missing packages are installed first.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
WERROR ?= OFF
# Debian's python3 (with python3-numpy/pytest/torch), not a pyenv one without them.
PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build test test-c test-python bench docs install install-check clean

all: build

deps:
	@scripts/install-deps.sh build

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPE_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test-c: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test: test-c
	@if [ -d python/tests ]; then $(MAKE) --no-print-directory test-python; fi

# Twice: with torch, then with `import torch` failing (torch is optional).
test-python: build
	@scripts/install-deps.sh python torch plots
	@POSENC_LIBRARY=$(CURDIR)/$(BUILD)/libposenc.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON) -m pytest -q python/tests
	@echo "test-python: again without torch"
	@POSENC_TEST_NO_TORCH=1 POSENC_LIBRARY=$(CURDIR)/$(BUILD)/libposenc.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON) -m pytest -q python/tests

bench: build
	@$(BUILD)/bench/pe-bench

docs:
	@scripts/install-deps.sh docs
	@scripts/make-docs.sh $(BUILD)/docs

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

install-check: build
	@scripts/check-install.sh $(BUILD)

clean:
	rm -rf $(BUILD)
