# The README's two commands: `make demo` and `make test`. Each sets itself up from python3 alone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## make demo: SAO against GRPO on the style-drift scenario (tiny model, CPU, minutes)
demo: $(STAMP)
	$(BIN)/sao-env compare --env style-drift --agents sao,grpo --seeds 0

## make test: the whole test suite
test: $(STAMP)
	$(BIN)/python -m pytest -q

## make bench: print the benchmark figures (speed, throughput)
bench: $(STAMP)
	$(BIN)/python bench/bench_grading.py
	$(BIN)/python bench/bench_runtime.py

clean:
	rm -rf $(VENV) runs .pytest_cache
