# ring — developer entry points. `make test` and `make demo` work on a fresh
# clone: they create .venv, install what is needed and build the extension.
#
#   make venv         .venv with torch (CPU, first) and the build tools
#   make build        (re)build ring_strategy._native in place, install `ringrun`
#   make native-test  C++ unit tests (build/py/ring_native_tests, next to the extension,
#                     so the engine compiles once for both)
#   make sysdeps      system packages the tests use (mpirun, ip/tc, ssh, sshd, java, faketime), as root only
#   make test         venv + sysdeps + build + native-test (the engine compiling while uv
#                     installs the frameworks, then beside TensorFlow's op library) +
#                     pytest (two files at a time, then the serial-marked tests by group,
#                     three groups at a time)
#   make slow-test    the slow-marked tests (pytest -m slow), outside make test
#   make mxnet-test   ring_strategy.mxnet's tests in .venv-mxnet (MXNet 1.9.1 and
#                     numpy < 1.24, which cannot share .venv); after `make build`
#   make bench        the standard benchmark set (docs/performance.md's Results);
#                     rewrites that doc's tables and plot; after `make build`
#   make oldest-test  the Lightning, Keras and TensorFlow tests against the oldest
#                     releases the extras allow, in .venv-oldest; after `make build`
#   make ptx-check    assembles the GPU batched-copy kernel (native/gpu/batched_copy.ptx)
#                     with NVIDIA's ptxas for sm_70, sm_80 and sm_90 (a 40 MB wheel
#                     download into build/ptxas; no GPU needed; not in make test)
#   make gpu-wheels   the wheels tests/gpu/device_check.sh needs beyond the GPU machine's
#                     image (Keras and what it adds, for that image's Python 3.12),
#                     into build/gpu-wheels: carry that folder with the check
#   make docs         the documentation site (mkdocs.yml) into build/site, strictly:
#                     a broken link or reference fails; make test builds it too
#   make demo         PyTorch Lightning, Trainer(strategy="ring") on two workers:
#                     the script starts its second worker itself
#   make clean        remove build outputs (keeps .venv; `make distclean` too)
#
# Every pip install goes through constraints.txt so the framework pins apply.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON_BOOTSTRAP ?= python3.11
VENV        := .venv
VPY         := $(CURDIR)/$(VENV)/bin/python
PIP         := $(VPY) -m pip
CONSTRAINTS := -c $(CURDIR)/constraints.txt
UV_INSTALL  := $(CURDIR)/$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(VPY) $(CONSTRAINTS)
BUILD_TYPE  ?= Release
PY_BUILD    := build/py
PYTEST_TIMEOUT ?= 300
# pytest and every interpreter it starts write bytecode (an empty
# PYTHONDONTWRITEBYTECODE, where the machine sets it): otherwise each worker
# compiles ring_strategy's modules again (tests/test_core_collectives.py took
# 15% less CPU with it, measured). __pycache__ is ignored by git and wheels.
PYTEST      := PYTHONDONTWRITEBYTECODE= $(VPY) -m pytest
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
SERIAL_WORKERS ?= 3

# The local CPU wheel of torch, where this machine has one (pip's own
# find-links setting normally points there too; naming it again is harmless).
WHEEL_DIR   ?= /opt/wheels
FIND_LINKS  := $(if $(wildcard $(WHEEL_DIR)/*.whl),--find-links $(WHEEL_DIR))

# Tools for compiling the extension; installed into .venv so builds do not
# depend on what the machine happens to have.
BUILD_TOOLS := "scikit-build-core>=0.10" "nanobind>=2.4" "cmake>=3.18" ninja

# The venv's tools (python, cmake, ninja, ringrun) come first on PATH.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv build engine tf-ops sysdeps native-test test docs ptx-check gpu-wheels slow-test mxnet-test oldest-test large-tensor-test chaos-test bench scaling demo clean distclean

# ---------------------------------------------------------------- venv
$(VPY):
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PIP) install --upgrade pip

# torch goes in first, from the local CPU wheel (pip: uv does not look for
# it there), so nothing later resolves a CUDA build; everything after it is
# installed by uv against the same constraints. uv installs the releases pip
# would (the same `pip freeze`), downloading and unpacking in parallel: the
# extras took 26 s where pip took 90 s. It writes the bytecode as pip does
# (--compile-bytecode): where PYTHONDONTWRITEBYTECODE is set, nothing would
# write it later, and every worker would compile TensorFlow's modules again
# (the parallel tests then took 25% longer). jaxlib comes with the build tools:
# CMake's configure step looks for its headers (the XLA FFI handlers), so the
# engine can compile while the rest installs (see `test`).
$(VENV)/.deps-stamp: $(VPY) constraints.txt Makefile
	$(PIP) install $(FIND_LINKS) $(CONSTRAINTS) "torch==2.13.0" uv
	$(UV_INSTALL) $(BUILD_TOOLS) jaxlib
	touch $@

venv: $(VENV)/.deps-stamp

# ---------------------------------------------------------------- build
# 1. pip: dependencies of the "test" extra, the `ringrun` console script and a
#    .pth that puts this source tree on sys.path (inplace editable install, no
#    compilation: see the override in pyproject.toml). Redone only when
#    pyproject.toml or constraints.txt change.
# 2. CMake: an incremental Ninja build in build/py whose output _native*.so is
#    written straight into ring_strategy/, so importing from the repo root and
#    from anywhere else load the same, fresh module. After editing C++ just run
#    `make build` (or `cmake --build build/py`).
$(VENV)/.editable-stamp: $(VENV)/.deps-stamp pyproject.toml constraints.txt
	RING_EDITABLE_SOURCE_TREE=1 $(UV_INSTALL) --no-build-isolation -e ".[test,lightning,keras,tensorflow,jax,ray,spark,bench,docs]"
	touch $@

$(PY_BUILD)/build.ninja: $(VENV)/.deps-stamp
	cmake -S . -B $(PY_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DRING_BUILD_PYTHON=ON -DRING_BUILD_TESTS=ON \
	  -DPython_EXECUTABLE=$(VPY) \
	  -Dnanobind_DIR="$$($(VPY) -m nanobind --cmake_dir)" \
	  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$(CURDIR)/ring_strategy

build: $(VENV)/.editable-stamp $(PY_BUILD)/build.ninja tf-ops
	cmake --build $(PY_BUILD) --target _native

# TensorFlow's op library, by the script CMake's ring_tf_ops target runs for
# a wheel (ring_strategy/_op_build.py), here outside Ninja so that it can
# compile beside the engine (see `test`: one Ninja run per build folder at a
# time). Remade when TensorFlow or the files the script reads change (it
# lists them: standard library only, so any Python 3 can ask).
TF_OPS_INPUTS := $(shell $(PYTHON_BOOTSTRAP) ring_strategy/_op_build.py --inputs)
$(PY_BUILD)/tf-ops.stamp: $(VENV)/.editable-stamp $(TF_OPS_INPUTS)
	@mkdir -p $(PY_BUILD)
	$(VPY) ring_strategy/_op_build.py --into ring_strategy --stamp $@

tf-ops: $(PY_BUILD)/tf-ops.stamp

# What compiles with the build tools alone (the engine, its unit tests, the
# extension; not TensorFlow's op library, which needs TensorFlow). The
# configure step again turns the tests on in a build/py made without them.
# Ninja keeps its own job count: MAKEFLAGS (make -j2's jobserver, whose pipe
# a recipe does not inherit) is cleared for it.
engine: $(PY_BUILD)/build.ninja
	cmake -S . -B $(PY_BUILD) -DRING_BUILD_TESTS=ON >/dev/null
	MAKEFLAGS= cmake --build $(PY_BUILD) --target _native ring_native_tests

# ---------------------------------------------------------------- tests
# tests/cluster runs real mpirun jobs; tests/multihost builds hosts from network
# namespaces (iproute2) with an sshd each (OpenSSH); tests/spark runs Spark, whose
# JVMs need a Java runtime (a headless JRE); tests/reliability/test_clock_jump.py
# moves one rank's clock with libfaketime (package faketime). As root, what is
# missing is installed from Debian; otherwise, or when apt cannot reach its
# mirrors, this only says so: those tests then skip (not root) or fail (root).
SYSDEPS := mpirun:openmpi-bin ip:iproute2 tc:iproute2 ssh:openssh-client /usr/sbin/sshd:openssh-server \
           java:openjdk-17-jre-headless faketime:faketime
sysdeps:
	@missing=""; for dep in $(SYSDEPS); do \
	  command -v "$${dep%%:*}" >/dev/null 2>&1 || case " $$missing " in *" $${dep#*:} "*) ;; *) missing="$$missing $${dep#*:}";; esac; \
	done; missing="$${missing# }"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "sysdeps: missing $$missing; installing needs root: the tests that need them will be skipped"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "sysdeps: missing $$missing and there is no apt-get: install them for the mpirun and multi-host tests"; \
	else \
	  echo "sysdeps: installing $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  { apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $$missing >/dev/null 2>&1; }; } || \
	  echo "sysdeps: could not install $$missing (no network?); the tests that need them will fail"; \
	fi

# The C++ unit tests share build/py (and its compiled engine) with the extension.
native-test: engine
	$(PY_BUILD)/ring_native_tests

# The suite in two parts (pytest-xdist): the files not marked serial two at a
# time, then the serial ones (timing- and network-sensitive, mostly waiting:
# tests/serial.py lists them) away from those framework tests that keep both
# cores busy, three groups at a time (tests/conftest.py's scheduler for
# loadgroup; 84 s where one at a time took 205 s, measured). Exit status 5
# (nothing selected, e.g. by PYTEST_ARGS="-k ...") is not a failure.
test: venv sysdeps
	$(MAKE) --no-print-directory -j2 engine tf-ops  # the engine compiles while uv installs, then beside TensorFlow's ops
	$(MAKE) --no-print-directory build native-test
	$(PYTEST) -q --timeout=$(PYTEST_TIMEOUT) -n $(PYTEST_WORKERS) --dist loadfile -m "not slow and not serial" \
	  tests $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) -q --timeout=$(PYTEST_TIMEOUT) -n $(SERIAL_WORKERS) --dist loadgroup -m "not slow and serial" \
	  $$($(VPY) -m tests.serial) \
	  $(PYTEST_ARGS) || [ $$? -eq 5 ]

# MXNet 1.9.1, Apache MXNet's last release, needs numpy < 1.24 while .venv has
# numpy 2, so its front end is tested in a venv of its own holding only MXNet,
# numpy and pytest; ring_strategy (and the _native module `make build` made,
# which does not depend on numpy's C API) comes from this checkout through
# PYTHONPATH. Not part of `make test`: see docs/mxnet.md.
MXNET_VENV := .venv-mxnet
MXNET_PY   := $(CURDIR)/$(MXNET_VENV)/bin/python
MXNET_PINS := "mxnet==1.9.1" "numpy==1.23.5"

$(MXNET_PY):
	$(PYTHON_BOOTSTRAP) -m venv $(MXNET_VENV)
	$(MXNET_PY) -m pip install --upgrade pip

$(MXNET_VENV)/.deps-stamp: $(MXNET_PY) constraints.txt Makefile
	$(MXNET_PY) -m pip install $(CONSTRAINTS) $(MXNET_PINS) pytest pytest-timeout
	touch $@

mxnet-test: $(MXNET_VENV)/.deps-stamp
	@ls ring_strategy/_native*.so >/dev/null 2>&1 || { echo "mxnet-test: no ring_strategy/_native*.so: run make build first"; exit 1; }
	PYTHONPATH=$(CURDIR) $(MXNET_PY) -m pytest -q --timeout=$(PYTEST_TIMEOUT) tests/mxnet_frontend $(PYTEST_ARGS)

# The slow-marked variants of make test's tests (other backends, launchers and
# world sizes, the long fault runs), without the two long runs below.
slow-test: build
	$(PYTEST) -q --timeout=$(PYTEST_TIMEOUT) -m slow tests --ignore=tests/reliability/test_large_tensors.py \
		--ignore=tests/reliability/test_chaos.py --ignore=tests/multihost/test_netns_chaos.py $(PYTEST_ARGS)
# The oldest releases of Lightning, Keras and TensorFlow that pyproject.toml's
# extras allow, with torch 2.13.0 from the local CPU wheel (installed first, as
# in .venv, so nothing resolves a CUDA build), in a venv of their own: they
# cannot share .venv with constraints.txt's newest ones. ring_strategy and the
# _native module `make build` made come from this checkout through PYTHONPATH.
# TensorFlow 2.16 brings numpy < 2. JAX is left out, so are its Keras runs.
# Downloads about 600 MB; not part of `make test`. docs/versions.md lists what
# was tested and the result.
OLDEST_VENV  := .venv-oldest
OLDEST_PY    := $(CURDIR)/$(OLDEST_VENV)/bin/python
OLDEST_PINS  := "torch==2.13.0" "pytorch-lightning==2.4.0" "keras==3.5.0" "tensorflow-cpu==2.16.2"
OLDEST_TESTS := tests/lightning/test_lightning.py tests/tensorflow/test_tensorflow.py tests/keras/test_keras_fit.py

$(OLDEST_PY):
	$(PYTHON_BOOTSTRAP) -m venv $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install --upgrade pip

$(OLDEST_VENV)/.deps-stamp: $(OLDEST_PY) Makefile
	$(OLDEST_PY) -m pip install $(FIND_LINKS) "torch==2.13.0"
	$(OLDEST_PY) -m pip install $(FIND_LINKS) $(OLDEST_PINS) pytest pytest-timeout
	touch $@

oldest-test: $(OLDEST_VENV)/.deps-stamp
	@ls ring_strategy/_native*.so >/dev/null 2>&1 || { echo "oldest-test: no ring_strategy/_native*.so: run make build first"; exit 1; }
	$(OLDEST_PY) -m pip list 2>/dev/null | grep -iE '^(torch|pytorch-lightning|keras|tensorflow-cpu|numpy) '
	PATH=$(CURDIR)/$(OLDEST_VENV)/bin:$$PATH PYTHONPATH=$(CURDIR) $(OLDEST_PY) -m pytest -q --timeout=$(PYTEST_TIMEOUT) \
	  $(OLDEST_TESTS) -k "not jax" $(PYTEST_ARGS)

# Tensors over 2 GiB on 2 ranks (about 10 GiB of memory; not in make test).
large-tensor-test: build
	python -m pytest -q -s --timeout=1800 -m slow tests/reliability/test_large_tensors.py $(PYTEST_ARGS)

# 100 jobs on one host and 100 across namespace hosts (as root), each with one
# random fault (CHAOS_JOBS=N for another count).
chaos-test: build
	python -m pytest -q -s --timeout=7200 -m slow tests/reliability/test_chaos.py \
	  tests/multihost/test_netns_chaos.py $(PYTEST_ARGS)

# The standard benchmark set under mpirun (Open MPI), MPICH's mpiexec, ringrun
# and (as root) namespace hosts; rewrites the generated regions of
# docs/performance.md and its plot. Not part of make test: it takes minutes
# and its figures depend on the host.
# MPICH, the second MPI anchor, is PyPI's wheel in a venv of its own (its
# mpirun would shadow Open MPI's in .venv/bin); a bench-only dependency.
MPICH_VERSION := 5.0.2
MPICH_PREFIX  := build/mpich

$(MPICH_PREFIX)/bin/mpiexec:
	python3 -m venv $(MPICH_PREFIX)
	$(MPICH_PREFIX)/bin/pip install -q mpich==$(MPICH_VERSION) || echo "bench: MPICH did not install; its rows are skipped"

bench: $(MPICH_PREFIX)/bin/mpiexec
	@ls ring_strategy/_native*.so >/dev/null 2>&1 || { echo "bench: no ring_strategy/_native*.so: run make build first"; exit 1; }
	$(VPY) -m ring_strategy.bench.standard --docs docs/performance.md
	$(VPY) -m ring_strategy.bench.standard --docs docs/scaling.md

# Only the allreduce algorithms on 8 ranks of 4 namespace hosts 0.5 ms apart
# (root), rewriting docs/scaling.md's tables.
scaling:
	@ls ring_strategy/_native*.so >/dev/null 2>&1 || { echo "scaling: no ring_strategy/_native*.so: run make build first"; exit 1; }
	$(VPY) -m ring_strategy.bench.standard --docs docs/scaling.md

# The engine ships its one GPU kernel as PTX, compiled by the driver when it
# is loaded; ptxas (from NVIDIA's nvcc wheel) checks it assembles for every
# architecture from Volta to Hopper without a GPU or a CUDA install.
PTXAS_WHEEL := nvidia-cuda-nvcc-cu12==12.9.86
PTXAS       := build/ptxas/nvidia/cuda_nvcc/bin/ptxas

$(PTXAS):
	$(PIP) download --no-deps -q -d build/ptxas $(PTXAS_WHEEL)
	cd build/ptxas && $(VPY) -m zipfile -e nvidia_cuda_nvcc_cu12-*.whl .
	chmod +x $@

ptx-check: $(PTXAS)
	for arch in sm_70 sm_80 sm_90; do $(PTXAS) --gpu-name $$arch -v native/gpu/batched_copy.ptx -o /dev/null; done

# The GPU machine (docs/gpu.md) has torch, JAX and cupy but no Keras and no
# network: its Keras steps install these, with --no-index, from build/gpu-wheels.
GPU_WHEELS := keras==3.15.1 namex==0.1.0 optree==0.20.0

gpu-wheels:
	$(PIP) download -q --only-binary=:all: --python-version 3.12 --implementation cp --no-deps \
	  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d build/gpu-wheels $(GPU_WHEELS)

# The numpy version of the demo: ringrun -np 2 python examples/numpy_logreg.py
docs: build
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict

demo: venv build
	python examples/lightning_mlp.py --strategy ring --devices 2 --num-batches 20

# ---------------------------------------------------------------- clean
clean:
	rm -rf build dist *.egg-info .pytest_cache
	rm -f ring_strategy/_native*.so ring_strategy/_tf_ops_*.so
	find . \( -path ./$(VENV) -o -path ./$(MXNET_VENV) -o -path ./$(OLDEST_VENV) \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(MXNET_VENV) $(OLDEST_VENV)
