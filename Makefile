# The two commands that do everything on a fresh machine:
#   make run    set up .venv with what the demo needs (numpy, rich, matplotlib, pipesim),
#               compare the schedules at pp=8, M=16 in the terminal, draw them into out/
#               (charts, trace, sweep, report) and plan DeepSeek-V3 on 2048 H800s (out/plan.md)
#   make test   add the test set-up to .venv, every package that can change a result pinned
#               (.ci/pins.txt: torch, OR-Tools, ruff, pytest, hypothesis, selenium, ...), then
#               run the linter and the whole test suite
#   make docs   rebuild docs/dualpipe.md and its pictures from pipesim's output, then run
#               every command of README.md and docs/*.md and check what the pages quote
#   make dist   the sdist and a reproducible wheel in dist/ (timestamps from the last commit)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
RUN_READY := $(VENV)/.run-ready
TEST_READY := $(VENV)/.test-ready

.PHONY: run test bench docs dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# the demo draws and plans: numpy, rich and matplotlib (no torch, OR-Tools or test tools)
# pip upgraded first: Python 3.11's own pip (23.2) shows no licence for PEP 639 metadata
$(RUN_READY): pyproject.toml | $(BIN)/python
	$(PIP) --upgrade pip
	$(PIP) -e '.[plot]'
	touch $@

# torch is pinned: its CPU build installs from local disk; torch_here.py says so in one line,
# before any download, on a Python for which it would pull the CUDA build instead
$(TEST_READY): pyproject.toml .ci/pins.txt | $(BIN)/python
	$(BIN)/python .ci/torch_here.py
	$(PIP) --upgrade pip
	$(PIP) -c .ci/pins.txt -e '.[plot,exact,torch,test]'
	touch $@ $(RUN_READY)

SHOWN := --pp 8 --microbatches 16 --schedules 1f1b,zb-h1,dualpipe,dualpipev --costs-per stage

run: $(RUN_READY)
	$(BIN)/pipesim compare $(SHOWN) --timelines
	mkdir -p out
	$(BIN)/pipesim draw $(SHOWN) -o out/schedules.png -o out/schedules.svg -o out/trace.json
	$(BIN)/pipesim report $(SHOWN) --sweep 16:128 -o out/report.html
	$(BIN)/pipesim sweep --pp 8 --microbatches 8:128 --schedules 1f1b,zb-h1,interleaved-1f1b,dualpipe,dualpipev --costs-per stage -o out/sweep.png --csv out/sweep.csv
	$(BIN)/pipesim plan --model deepseek-v3 --cluster h800-2048 -o out/plan.md
	@echo "pictures and the plan in $(CURDIR)/out:"
	@echo "  schedules.png, schedules.svg  the four timelines on one time axis"
	@echo "  trace.json                    Chrome trace: open it in Perfetto or chrome://tracing"
	@echo "  report.html                   interactive: sortable table, timelines to hover and zoom, memory"
	@echo "  sweep.png, sweep.csv          bubble and activation memory for M = 8..128"
	@echo "  plan.md                       DeepSeek-V3 on 2048 H800s: the recommended pipeline strategy and its cost"

test: $(TEST_READY)
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check src tests benchmarks docs
	$(BIN)/python -m pytest -n 2

# the DualPipe walkthrough: every number and picture from the commands it shows
docs: $(TEST_READY)
	$(BIN)/python docs/make_docs.py
	$(BIN)/python docs/pages.py

# SOURCE_DATE_EPOCH pins the wheel's file times, so two builds of one commit are byte-equal
dist: $(RUN_READY)
	$(PIP) build
	rm -rf dist
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) $(BIN)/python -m build -q --outdir dist .

bench: $(TEST_READY)
	$(BIN)/python benchmarks/simulate_speed.py
	$(BIN)/python benchmarks/draw_speed.py
	$(BIN)/python benchmarks/report_size.py
	$(BIN)/python benchmarks/runtime_overhead.py
	$(BIN)/python benchmarks/plan_speed.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
