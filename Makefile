# The two commands that do everything on a fresh machine:
#   make run    set up .venv if missing, then compare the schedules at pp=8, M=16
#   make test   set up .venv if missing, then run the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready

.PHONY: run test bench clean

# torch is pinned: its CPU build installs from local disk; any other version pulls CUDA
$(READY): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check 'torch==2.13.0' numpy
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[plot,exact,test,torch]'
	touch $(READY)

run: $(READY)
	$(BIN)/pipesim compare --pp 8 --microbatches 16 --schedules 1f1b,zb-h1,dualpipe,dualpipev --timelines

test: $(READY)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -n 2

bench: $(READY)
	$(BIN)/python benchmarks/simulate_speed.py
	$(BIN)/python benchmarks/runtime_overhead.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
