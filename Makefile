# A thin layer over CMake. `make test` and `make bench` work on a fresh
# Debian 12 machine as root: missing packages are installed first.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
WERROR ?= OFF
# Debian's python3 (with python3-numpy/pytest/torch), not a pyenv one without them.
PYTHON ?= /usr/bin/python3
# Quiet by default: each step prints one line and keeps its output in
# $(BUILD)/<step>.log (shown when the step fails); V=1 shows everything.
V ?=
# make bench BENCH_ARGS="--suite rope --reps 5": pe-bench's arguments (--help).
BENCH_ARGS ?=
MAKEFLAGS += --no-print-directory

# $(call step,NAME,COMMAND): run COMMAND, one summary line, the log on failure.
step = mkdir -p $(BUILD); log=$(BUILD)/$(1).log; \
  if [ -n "$(V)" ]; then { $(2) 2>&1; echo $$? > $$log.rc; } | tee $$log; st=$$(cat $$log.rc); else $(2) > $$log 2>&1; st=$$?; fi; \
  w=$$(grep -c 'warning:' $$log || true); \
  if [ $$st -ne 0 ]; then echo "make: $(1) FAILED (full output: $$log):" >&2; \
    [ -n "$(V)" ] || tail -n 60 $$log >&2; exit 1; fi; \
  echo "make: $(1) ok$(if $(3), - $(3),)$$([ $$w -gt 0 ] && echo ", $$w compiler warnings (see $$log)")"

.PHONY: all deps configure build test test-c test-python python python-package-check bench docs install install-check clean

all: build

deps:
	@scripts/install-deps.sh build

configure: deps
	@$(call step,configure,cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPE_WERROR=$(WERROR) -DCMAKE_VERBOSE_MAKEFILE=OFF $(CMAKE_FLAGS),$(BUILD)/ Release$(if $(CMAKE_FLAGS), $(CMAKE_FLAGS)) WERROR=$(WERROR))

build: configure
	@$(call step,build,cmake --build $(BUILD) -j$(JOBS) -- --no-print-directory,$$(ls $(BUILD)/libposenc.so.*.*.* 2>/dev/null))

test-c: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test: test-c
	@if [ -d python/tests ]; then $(MAKE) --no-print-directory test-python; fi

# The binding's compiled module (posenc._posenc) for $(PYTHON), built next to
# python/posenc so that PYTHONPATH=python imports it; it needs the header
# only (posenc._lib hands it the library's functions).
python:
	@scripts/install-deps.sh python
	@$(call step,python,$(PYTHON) python/build_backend/posenc_build.py --inplace $(if $(filter ON,$(WERROR)),--werror),$$(ls python/posenc/_posenc.*.so | tr '\n' ' '))

# Twice: with torch, then with `import torch` failing (torch is optional).
test-python: build python
	@scripts/install-deps.sh python torch plots
	@POSENC_LIBRARY=$(CURDIR)/$(BUILD)/libposenc.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON) -m pytest -q python/tests
	@echo "test-python: again without torch"
	@POSENC_TEST_NO_TORCH=1 POSENC_LIBRARY=$(CURDIR)/$(BUILD)/libposenc.so PYTHONPATH=$(CURDIR)/python \
	  $(PYTHON) -m pytest -q python/tests

# make bench keeps the build directory's own -Werror setting unless WERROR is
# given (another one reconfigures and recompiles everything just before the
# timing), then lets the load average the compilers raised fall below 0.75 x
# the CPU count (at most BENCH_SETTLE s): pe-bench flags '!' every row measured
# while it exceeds the CPU count.
BENCH_SETTLE ?= 60
bench: WERROR := $(if $(filter file,$(origin WERROR)),$(or $(shell sed -n 's/^PE_WERROR:BOOL=//p' $(BUILD)/CMakeCache.txt 2>/dev/null),$(WERROR)),$(WERROR))
bench: build
	@n=$$(nproc); w=0; \
	 while [ $$w -lt $(BENCH_SETTLE) ] && awk -v c=$$n '{exit !($$1 >= 0.75 * c)}' /proc/loadavg 2>/dev/null; do \
	   [ $$w = 0 ] && echo "make: bench - waiting (at most $(BENCH_SETTLE) s) for the load average $$(cut -d' ' -f1 /proc/loadavg) to fall below 0.75 x $$n CPUs" >&2; \
	   sleep 5; w=$$((w + 5)); done
	@$(BUILD)/bench/pe-bench $(BENCH_ARGS)

docs:
	@scripts/install-deps.sh docs
	@$(call step,docs,scripts/make-docs.sh $(BUILD)/docs,$(BUILD)/docs/html/index.html)

# A system prefix needs `ldconfig` before programs without a run path find
# the new library: run it when installing as root (not for DESTDIR staging).
install: build
	@cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))
	@if [ -n "$(DESTDIR)" ]; then echo "make: install ok - staged in $(DESTDIR) (no ldconfig)"; \
	 elif [ "$$(id -u)" = 0 ]; then ldconfig && echo "make: install ok - ldconfig run"; \
	 else echo "make: install ok - not root: run ldconfig for a system prefix (README 'Install')"; fi

# (python: the binding check runs examples/rope_numpy.py on a copy of python/posenc)
install-check: build python
	@scripts/check-install.sh $(BUILD)

# The Python package on its own: sdist and wheel (CMake building the library
# inside), each installed into a clean venv of each of PACKAGE_PYTHONS, its
# tests run there after the sources are deleted
# (scripts/check-python-package.sh; about 8 minutes a Python on 2 cores).
PACKAGE_PYTHONS ?= python3 /usr/bin/python3
python-package-check:
	@scripts/install-deps.sh build python torch
	@scripts/check-python-package.sh $(PACKAGE_PYTHONS)

clean:
	rm -rf $(BUILD)
