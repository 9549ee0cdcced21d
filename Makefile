# Quick start: `make demo`, `make test`.  Everything runs from ./.venv, built once
# (the stamp file) and rebuilt when pyproject.toml changes.
PY := .venv/bin/python
STAMP := .venv/.stamp
# numpy < 2.4: triton 3.6's interpreter turns loop bounds into Python ints in a way numpy 2.4 rejects.
# setuptools: tests/test_wheel.py builds the wheel without build isolation (no download).
PACKAGES := torch==2.13.0 triton==3.6.0 pytest hypothesis pytest-xdist "numpy<2.4" matplotlib transformers "setuptools>=77"

.PHONY: venv test gpu-test demo bench golden ops-doc

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install $(PACKAGES)
	$(PY) -m pip install -e .
	touch $@

test: venv
	$(PY) -m pytest -q -n 2 --durations=20 tests

# On a machine with a GPU: the GPU-marked tests, and the kernel op sweep on the GPU
# (libdevice and compiled kernels, which CI's interpreter does not run).
gpu-test: venv
	$(PY) -m pytest -q -n 4 -m gpu tests
	PYFUSER_SWEEP_DEVICE=cuda $(PY) -m pytest -q -n 4 tests/codegen/test_kernel_op_sweep.py

demo: venv
	$(PY) -m pyfuser.demo

# The project's runs: the JSON and chart into benchmarks/results, the run's section into docs.
bench: venv
	$(PY) -m pyfuser.bench --out benchmarks/results --docs docs/BENCHMARKS.md

# Golden kernels (tests/golden/, checked by tests/test_golden_kernels.py): every bench
# case's kernels as planned for an H200, written without a GPU.  Regenerate after a
# change meant to alter kernels, and review the diff.
golden: venv
	rm -f tests/golden/*.txt
	CUDA_VISIBLE_DEVICES= PYTHONPATH=src $(PY) benchmarks/kernel_identity.py --out tests/golden

# docs/OPS.md from the op table (tests/frontend/test_opdoc.py checks that it is current).
ops-doc: venv
	PYTHONPATH=src $(PY) -m pyfuser.frontend.opdoc docs/OPS.md
