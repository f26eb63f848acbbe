# `make demo` sets everything up and runs a small end-to-end job; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test demo bench clean

setup: $(STAMP)

# Re-install only when the package metadata changes (quick when already done).
$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,beam]'
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: setup
	$(PY) -m albert_tf.demo --output_dir=demo_output

# Only what setup builds: demo_output*/ may be a user's folder the demo went around, so it stays.
clean:
	rm -rf $(VENV) build *.egg-info
