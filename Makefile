# The two commands a user needs: `make demo` and `make test`. Everything they need is installed
# here, from pinned lock files, into two environments (as in production, training runs in its own
# image): .venv (control: Airflow, providers, LightGBM, MLflow, this package) and .venv-train
# (training: TensorFlow + Horovod, CPU PyTorch; Horovod built once and cached by version; see scripts/build_horovod.sh).
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .tools/bin/uv
VENV := .venv
TRAIN_VENV := .venv-train
MLFLOW_VENV := .venv-mlflow
DOCS_VENV := .venv-docs
# Where make docs writes the HTML (the docs test builds into a temporary folder).
DOCS_OUT ?= docs/_build/html
export AIRFLOW_ML_LOCAL_IMAGE := $(CURDIR)/$(TRAIN_VENV)
# Where the training env's CPU-only torch wheel (torch==2.13.0+cpu in requirements/training.lock) is found:
# the machine's wheel folder when it has one, else PyTorch's CPU wheel index (`+cpu` builds are not on PyPI).
TORCH_WHEELS ?= $(if $(wildcard /opt/wheels/torch-*+cpu-*.whl),/opt/wheels,https://download.pytorch.org/whl/cpu/torch/)
PYTEST_ARGS ?=
# Parallel test workers (pytest-xdist; tests/scheduling.py keeps each file on one worker): most tests wait on
# real processes (Airflow components, training jobs), so three keep two cores busy; a fourth runs the files
# that mostly wait (MOSTLY_WAITING in tests/scheduling.py) beside them.
TEST_WORKERS ?= 4

.PHONY: demo test bench lint ui mlflow-ui control-env training-env mlflow-env image chromium sshd bwrap postgres kube-apiserver crds docs docs-env clean

demo: control-env training-env bwrap
	AIRFLOW_HOME=$(CURDIR)/.airflow-demo $(VENV)/bin/python scripts/demo.py

# PYTHONDONTWRITEBYTECODE emptied for the run: pytest keeps the test modules it rewrote for assertions, and
# Python the repository's modules it compiled, as .pyc under __pycache__/; no worker compiles them again.
test: crds control-env training-env image kube-apiserver mlflow-env docs-env chromium sshd bwrap postgres
	rm -rf .airflow-test  # every run starts from nothing: no job record or DB row of an earlier run
	AIRFLOW_HOME=$(CURDIR)/.airflow-test PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

# The documentation (docs/, Markdown through Sphinx + MyST): every warning, a broken internal link
# included, is an error; the docs test (tests/unit/test_docs.py) builds it the same way.
docs: docs-env
	$(DOCS_VENV)/bin/sphinx-build -q -W --keep-going -n -b html docs $(DOCS_OUT)

# The Airflow UI (standalone, this project's DAGs, embedded defaults) and the MLflow UI over the embedded
# registry, on make demo's AIRFLOW_HOME; prints where to log in. Ctrl-C stops both.
ui: control-env training-env mlflow-env bwrap
	$(VENV)/bin/python scripts/ui.py --home $(CURDIR)/.airflow-demo

mlflow-ui: mlflow-env
	$(VENV)/bin/python scripts/ui.py --home $(CURDIR)/.airflow-demo --only mlflow

bench: control-env training-env bwrap
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/local_overhead.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/log_tail.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/lightgbm_parity.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/xgboost_parity.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/dag_parse.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/hpo_scaling.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/search_scale.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/preemption_cost.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/preemption_cost.py --trainer pytorch
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/sandbox_start.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/torch_overhead.py
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/job_phases.py --framework pytorch
	AIRFLOW_HOME=$(CURDIR)/.airflow-bench $(VENV)/bin/python benchmarks/sharded_overhead.py

lint: control-env
	$(UV) pip install --python $(VENV)/bin/python --quiet ruff==0.14.5
	$(VENV)/bin/ruff check airflow_ml_provider tests dags hooks operators sensors benchmarks scripts tools

control-env: $(VENV)/.installed
training-env: $(TRAIN_VENV)/.installed
mlflow-env: $(MLFLOW_VENV)/.installed
docs-env: $(DOCS_VENV)/.installed

# The training image (images/training/Dockerfile) built here without a Docker engine: Debian's buildah on a
# debootstrap bookworm base (scripts/build_image.sh, which installs podman, buildah, runc and debootstrap as root).
# Named by a hash of its build context and rebuilt only when that changes (a change of the package alone reruns
# its last steps); the image tests run the rendered jobs' programs in it with podman (tests/integration/images).
image:
	TORCH_WHEELS=$(TORCH_WHEELS) scripts/build_image.sh

# Debian's chromium-headless-shell for the browser tests (tests/ui); does nothing when it is installed.
chromium:
	scripts/install_chromium.sh

# Debian's openssh client's ssh-keygen (and its server): the tests' MPI operator and Volcano stand-ins make each
# job's SSH key with it, as the controllers do (tests/mpi_operator.py, tests/volcano_controller.py); idempotent.
sshd:
	scripts/install_sshd.sh
# bubblewrap: the sandbox each local job runs in (airflow_ml_provider/jobs/backends/local/sandbox.py).
bwrap:
	scripts/install_bwrap.sh
# Debian's PostgreSQL server: the test deployments' metadata databases and their MLflow tracking server's
# backend store, in a throwaway cluster each test process starts (tests/postgres_server.py); make demo stays
# on the embedded SQLite defaults.
postgres:
	scripts/install_postgres.sh
kube-apiserver: .tools/kube-apiserver

# The CRDs pinned in requirements/crds.lock (MPIJob, Volcano; next/: the coming backends), verified by
# sha256 into the cache beside the kube-apiserver build; a local mirror ($$AIRFLOW_ML_CRDS_DIR) is
# preferred, else they are downloaded ($$AIRFLOW_ML_CRDS_BASE_URL). Stops, naming the file, on any mismatch.
crds:
	$(PYTHON) scripts/fetch_crds.py

# A real kube-apiserver (built from Debian's source package, cached by version) and etcd, for the
# Kubernetes backend tests; the script installs Debian packages, so it needs root (as CI has).
.tools/kube-apiserver: scripts/build_kube_apiserver.sh | $(UV)
	ln -sf "$$(scripts/build_kube_apiserver.sh)" $@

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

# --compile-bytecode (every env): uv installs no .pyc files, and where Python does not write them
# (PYTHONDONTWRITEBYTECODE, a read-only image) every process compiles all it imports again: an Airflow
# component, task process or `airflow` command spends 7.2 CPU s instead of 3.2 (docs/testing.md).
$(VENV)/.installed: requirements/control.lock setup.cfg | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(VENV)/bin/python -r requirements/control.lock
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	touch $@

# --seed: pip, setuptools and wheel, which Horovod's --no-build-isolation build needs.
# A worker imports TensorFlow or torch from this env, which its sandbox mounts read-only: without .pyc
# files every worker compiles them again (16.8 CPU s for TensorFlow's import, 6.1 with them; compiling
# all once: about 73 CPU s). The package goes in without dependencies: workers need its runtime/, not Airflow.
# The Horovod build is recorded once, so that a local job's horovodrun does not probe it before every run
# (2.4 CPU s each; airflow_ml_provider/jobs/backends/local/horovodrun_main.py).
$(TRAIN_VENV)/.installed: requirements/training.lock scripts/build_horovod.sh setup.cfg | $(UV)
	$(UV) venv --quiet --seed --allow-existing --python $(PYTHON) $(TRAIN_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(TRAIN_VENV)/bin/python --find-links $(TORCH_WHEELS) -r requirements/training.lock
	scripts/build_horovod.sh $(TRAIN_VENV)
	$(UV) pip install --quiet --python $(TRAIN_VENV)/bin/python --no-deps -e .
	$(TRAIN_VENV)/bin/python -m airflow_ml_provider.jobs.backends.local.horovodrun_main --record-build
	touch $@

# The full mlflow package (its UI server), same version as the control env's mlflow-skinny, on its own.
$(MLFLOW_VENV)/.installed: requirements/mlflow.lock | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(MLFLOW_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(MLFLOW_VENV)/bin/python -r requirements/mlflow.lock
	touch $@

# Sphinx and MyST from requirements/docs.lock, on their own (the docs import only the provider's metadata).
$(DOCS_VENV)/.installed: requirements/docs.lock | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(DOCS_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(DOCS_VENV)/bin/python -r requirements/docs.lock
	touch $@

clean:
	rm -rf $(VENV) $(TRAIN_VENV) $(MLFLOW_VENV) $(DOCS_VENV) .tools .airflow-demo .airflow-test .airflow-bench
