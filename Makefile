# `make demo`, `make test` and `make docs` work from a fresh clone: each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-eager docs bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/train_digits.py

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

# The runtime's tests again with every op computed at its call (EMBER_EAGER=1, the
# debugging mode): its guarantees must hold there too. The whole suite passes that way.
test-eager: $(STAMP)
	EMBER_EAGER=1 $(PY) -m pytest -q -p no:cacheprovider tests/actors tests/autodiff tests/optim \
		tests/train tests/fusion

# The site goes to site/ (open site/index.html); --strict: any warning fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build site *.egg-info
