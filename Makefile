# `make demo` sets everything up and runs a small end-to-end job; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test demo bench clean

setup: $(STAMP)

# Re-install only when the package metadata changes (quick when already done).
$(STAMP): setup.py
	# A venv whose creation was interrupted (or made without ensurepip) has python but no pip: made again.
	$(PY) -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,beam]'
	touch $(STAMP)

# Two pytest workers by default (one per core of the CI machine): most tests wait on a driver's start-up or
# a small model's tracing, so two overlap well. A file's tests stay on one worker (module fixtures run once).
# TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= 2

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Where `make demo` writes (`make demo DEMO_DIR=~/albert_demo`: a leading ~ is the home folder, as in the drivers).
DEMO_DIR ?= demo_output

demo: setup
	$(PY) -m albert_tf.demo --output_dir='$(DEMO_DIR)'

# Only what setup builds: demo_output*/ may be a user's folder the demo went around, so it stays.
clean:
	rm -rf $(VENV) build *.egg-info
