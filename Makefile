# The two commands: `make run` (service on the shipped tables) and `make test` (everything).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
RUN_STAMP := $(VENV)/.installed-run-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

SHELL := bash
.PHONY: run dev test test-fast lint sweep regate check-refit bench-model bench-search bench-regret bench-weight-forms bench-tiling-cpp bench-torch-op bench-loss bench-explorer bench-service soak-service bench-tiling-key doctor mutants docker-test clean

# the cost model's engine, compiled into tiling_model._engine when the package is installed
ENGINE_SOURCES := CMakeLists.txt tiling_model/_engine.cpp $(wildcard tiling_model/include/*.h)

# everything: serving, tuning, the CPU twin, plots and the test tools
$(STAMP): pyproject.toml constraints.txt $(ENGINE_SOURCES)
	@echo "==> make test: installing everything into $(VENV) (torch, optuna, the test tools; the torch-npu wheel unpacked beside it: about"
	@echo "    1.9 GB; a few minutes the first time, seconds after; pip names each package)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	set -o pipefail; $(PY) -m pip install --disable-pip-version-check --progress-bar off -c constraints.txt -e '.[test]' \
		| { grep --line-buffered -E '^(Collecting|Building|Successfully|ERROR)' || true; }
	touch $(STAMP) $(RUN_STAMP)

# The real torch_npu wheel, unpacked beside the environment and not importable from it (installed, its
# device autoload makes `import torch` fail on a host without CANN): the extension's compile test and the
# NPU runner's error-path tests put it on PYTHONPATH in their own processes. x86_64 wheels only.
TORCH_NPU := torch-npu==2.13.0
NPU_SITE := $(VENV)/torch-npu-site
$(NPU_SITE): | $(STAMP)
	@if [ "$$(uname -m)" = x86_64 ]; then \
		echo "==> unpacking the $(TORCH_NPU) wheel into $(NPU_SITE) (not installed: for the compile test)"; \
		rm -rf $(VENV)/torch-npu-wheel && \
		$(PY) -m pip download --quiet --disable-pip-version-check --no-deps $(TORCH_NPU) -d $(VENV)/torch-npu-wheel && \
		$(PY) -m zipfile -e $(VENV)/torch-npu-wheel/*.whl $(NPU_SITE).part && mv $(NPU_SITE).part $(NPU_SITE) && \
		rm -rf $(VENV)/torch-npu-wheel; \
	fi

# serving only (what the Docker image holds too)
$(RUN_STAMP): pyproject.toml constraints.txt $(ENGINE_SOURCES)
	@echo "==> make run: installing what serving needs into $(VENV) (about 30 s the first time: the packages and the engine's C++ build)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	touch $(RUN_STAMP)

# everything a user runs without the test suite: the tuner, calibration, the CPU twin, bcetune.torch
# (the same install as make test's; `pip install -e '.[tune]'` or `'.[torch]'` for a part of it)
dev: $(STAMP)
	@echo "==> installed into $(VENV): source $(VENV)/bin/activate, then python -m tuner, python -m model_tools, bcetune.torch"

run: $(RUN_STAMP)
	$(PY) -m service --host $(HOST) --port $(PORT)

# pytest runs one worker per core: each worker's torch (OpenMP) and OpenBLAS on one thread, not one per core
# spinning against the other worker's (the kernel golden and fused-loss files: 38-46 s -> 29 s on 2 cores).
# A test that wants threads sets them (torch.set_num_threads).
TEST_THREADS := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
test: $(STAMP) $(NPU_SITE)
	@echo "==> ruff, then mypy"
	$(PY) -m ruff check .
	$(PY) -m mypy
	@echo "==> pytest, the whole suite on every core (make test-fast: the quick suites)"
	$(TEST_THREADS) bash .ci/with-services.sh $(PY) -m pytest -n auto --dist loadfile

# The edit loop's suite: no servers, end-to-end CLIs or docs runs (slow), kernel sweeps, CANN compile checks,
# browser, container or database; the CPU twin built once and cached. make test (CI) runs everything.
FAST_MARKERS := not slow and not kernel_sweep and not toolchain and not browser and not container and not database and not proxy
test-fast: $(STAMP) $(NPU_SITE)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(TEST_THREADS) BCETUNE_SERVICES=none bash .ci/with-services.sh $(PY) -m pytest -n auto -m "$(FAST_MARKERS)" --hypothesis-profile=fast

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Re-tune every shipped table with the cost-model backend, then re-export the C++ header (docs/manual.md, "Tune").
# One target per SoC, each with its own SQLite storage (bcetune-sweep-<SOC>.db: resumed by a rerun), so
# `make -j2 sweep` tunes two SoCs at a time; only tilings that moved are gated again (tuner sweep --gate-all).
SOCS := Ascend910B1 Ascend910B2 Ascend910B3 Ascend910B4 Ascend310B1
SWEEP_SOCS := $(addprefix sweep-,$(SOCS))
.PHONY: $(SWEEP_SOCS)
sweep: $(SWEEP_SOCS)
	$(PY) -m tuner export-header

$(SWEEP_SOCS): sweep-%: $(STAMP)
	$(PY) -m tuner sweep --soc $* --strategy exact --pos-weights none,full,last_dim --wrts logit,probability \
		--modes grad,fused --storage sqlite:///bcetune-sweep-$*.db --out service/tables/$*.json

# Re-check the shipped tables against the current kernel sources in the CPU twin (no re-tuning), then
# re-export the header: after a kernel change that leaves the cost model alone.
regate: $(STAMP)
	for soc in Ascend910B1 Ascend910B2 Ascend910B3 Ascend910B4 Ascend310B1; do \
		$(PY) -m tuner regate --soc $$soc --no-progress || exit 1; done
	$(PY) -m tuner export-header

# On an Ascend host: CANN, torch_npu, the device, the launch library, golden cases and timing.
doctor: $(STAMP)
	$(PY) -m tuner doctor

# Why the tiling key travels in the struct: code and compile time of per-key kernels (g++ stand-in).
bench-tiling-key: $(STAMP)
	$(PY) benchmarks/tiling_key_binary_size.py

# The container built from Debian packages and run as an operator would (as root: a private dockerd).
docker-test: $(STAMP)
	bash .ci/with-services.sh $(PY) -m pytest -s tests/project/test_docker.py

# Mutation testing of the tiling arithmetic and its rules (mutmut, configured in pyproject.toml): a report.
mutants: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check mutmut
	rm -rf mutants && $(PY) -m mutmut run; $(PY) -m mutmut results

# Cost-model speed (single prediction, whole-space scoring), then its accuracy beside CANN's own cost model on
# the measured operators (docs/benchmarks/cost-model-crossval.md): benchmarks, not tests.
bench-model: $(STAMP)
	$(PY) benchmarks/model_speed.py
	$(PY) benchmarks/model_vs_peer.py

# Search efficiency: model-seeded TPE vs plain TPE vs random, against a device-like truth and the model itself.
bench-search: $(STAMP)
	$(PY) benchmarks/search_efficiency.py
	$(PY) benchmarks/interval_coverage.py
	$(PY) benchmarks/untimed_sizes.py
	$(PY) benchmarks/device_header_cost.py

# Regret of the shipped tables on held-out sizes against the exhaustive best (model backend), by SoC:
# the service's policy beside the CANN build's (the C++ header) and the bucket's knobs unchanged.
bench-regret: $(STAMP)
	$(PY) benchmarks/bucket_regret.py

# Predicted speedup of a broadcast weight ([C], [N, 1], [1]) over materialising it at the input's shape.
bench-weight-forms: $(STAMP)
	$(PY) benchmarks/weight_forms.py

# Host work per call of torch.ops.bcetune.bce_grad on the CPU beside a plain torch elementwise op.
bench-torch-op: $(STAMP)
	$(PY) benchmarks/torch_op_overhead.py

# A training step's BCEWithLogits loss on each path: HBM bytes, memory kept for backward, predicted device
# time, CPU time against PyTorch's own (docs/benchmarks/loss.md).
bench-loss: $(STAMP)
	$(PY) benchmarks/loss_step.py

# From a fresh service to the explorer's first view in headless Chromium (Debian chromium + chromium-driver).
bench-explorer: $(STAMP)
	$(PY) benchmarks/explorer_first_view.py
	$(PY) benchmarks/explorer_first_view.py --settle 10

# ns per call of what the CANN TilingFunc runs (bce_grad::TunedTiling: lookup, re-fit, tiling), C++ -O2.
# TABLE_HEADER=path/bce_grad_tuned_table.h: the same benchmark on another table (say, a device's exported header)
bench-tiling-cpp:
	rm -rf build/bench_op_host && mkdir -p build && cp -r kernel/op_host build/bench_op_host
	$(if $(TABLE_HEADER),cp $(TABLE_HEADER) build/bench_op_host/bce_grad_tuned_table.h)
	g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Werror -I build/bench_op_host -I tiling_model/include \
		benchmarks/cpp/tuned_tiling_bench.cpp -o build/tuned_tiling_bench
	./build/tuned_tiling_bench 5000 20

# The re-fit's exactness at length: refit_exhaustive (every configuration predicted one by one) and refit_floors
# (every floor under the simulated pipeline) over SEEDS seeds from SEED, CASES cases each (the suite runs 250 at
# one seed; a bug that shows once in 3,000 cases was found this way). About 30 s per seed; SEED=... repeats a run.
SEED ?= $(shell date +%Y%m%d)
SEEDS ?= 10
CASES ?= 3000
check-refit:
	@for v in SEED=$(SEED) SEEDS=$(SEEDS) CASES=$(CASES); do \
		[[ "$${v#*=}" =~ ^[1-9][0-9]*$$ ]] || { echo "check-refit: $$v is not a positive whole number" >&2; exit 2; }; \
	done
	mkdir -p build
	for check in refit_exhaustive refit_floors; do \
		g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Werror -I kernel/op_host -I tiling_model/include \
			tests/kernel/cpp/$$check.cpp -o build/$$check || exit 1; \
	done
	fail=0; for s in $$(seq $(SEED) $$(($(SEED) + $(SEEDS) - 1))); do \
		echo "seed $$s:"; \
		./build/refit_exhaustive $(CASES) $$s || fail=1; \
		./build/refit_floors $$(($(CASES) * 7)) $$s || fail=1; \
	done; exit $$fail

# Service load (wrk from Debian packages): cold (distinct requests) and warm (cache) beside a trivial POST.
bench-service: $(STAMP)
	command -v wrk >/dev/null && command -v nginx >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk nginx-light)
	$(PY) benchmarks/service_load.py
	$(PY) benchmarks/service_attack.py
	$(PY) benchmarks/service_attack.py --proxy
	$(PY) benchmarks/service_memory.py

# Minutes of load while the tables are rewritten and reloaded: no failed request, no wrong answer; then ten
# minutes of light traffic (a request every 1-10 s) on a fresh server: every answer a 200.
soak-service: $(STAMP)
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(PY) benchmarks/service_soak.py
	$(PY) benchmarks/service_light_soak.py --minutes 10

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
