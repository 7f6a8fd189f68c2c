# OnceShop. `make demo` runs the shop; `make test` runs the tests.
# With DATABASE_URL / REDIS_URL unset, both start an embedded PostgreSQL and
# Redis under .var/ (config/embedded.py) and stop them afterwards.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WITH_SERVICES := $(PY) -m config.embedded --

.PHONY: install demo story audit reconcile shell test lint format bench clean

install: $(STAMP)

# Re-runs only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --editable ".[dev]"
	touch $(STAMP)

demo: install
	$(WITH_SERVICES) $(PY) -m config.demo

# Beside a running `make demo` (same PORT): the settings find the shop and its
# provider from PORT, so `PORT=9000 make demo` pairs with `PORT=9000 make story`.
story: install
	$(WITH_SERVICES) $(PY) manage.py story

audit: install
	$(WITH_SERVICES) $(PY) manage.py audit

reconcile: install
	$(WITH_SERVICES) $(PY) manage.py reconcile --once

shell: install
	$(WITH_SERVICES) $(PY) manage.py shell

test: install
	$(WITH_SERVICES) $(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# The Django plugin imports the settings: placeholder URLs, so type-checking
	@# never starts the embedded servers (nothing connects to them).
	DATABASE_URL=$${DATABASE_URL:-postgres://unused/lint} REDIS_URL=$${REDIS_URL:-redis://unused} \
		$(VENV)/bin/mypy .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: install
	$(WITH_SERVICES) $(PY) -m bench

clean:
	rm -rf .var staticfiles .mypy_cache .ruff_cache .pytest_cache
