# OnceShop. `make demo` runs the shop; `make test` runs the tests.
# With DATABASE_URL / REDIS_URL unset, both start an embedded PostgreSQL and
# Redis under .var/ (config/embedded.py) and stop them afterwards.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WITH_SERVICES := $(PY) -m config.embedded --
# Exact versions with their hashes (uv, see docs/deploying.md, "Dependencies"), one lock per need,
# each holding the one before it at the same versions:
#   requirements.lock              the runtime: what the image installs
#   requirements-demo.lock         + the embedded servers: `make demo` (make install)
#   requirements-demo-stripe.lock  + localstripe: `make demo PAYMENT_PROVIDER=stripe`
#   requirements-dev.lock          + the tests' and the linters' tools: make test, make lint
LOCK := requirements.lock
DEMO_LOCK := requirements-demo.lock
STRIPE_DEMO_LOCK := requirements-demo-stripe.lock
DEV_LOCK := requirements-dev.lock
# What `make install` (and so `make demo`) installs: the Stripe demo's provider only
# for the Stripe demo.
RUN_LOCK := $(if $(filter stripe,$(PAYMENT_PROVIDER)),$(STRIPE_DEMO_LOCK),$(DEMO_LOCK))
UV_COMPILE := $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
	--generate-hashes --upgrade --quiet --custom-compile-command "make lock"

.PHONY: install install-dev messages lock demo cluster cluster-test story audit reconcile shell test lint format bench lab alerts chaos walk clean

# The runtime and the embedded servers: all `make demo` needs.
install: $(VENV)/$(RUN_LOCK).installed messages

# Plus the development tools (pytest, ruff, mypy, playwright, schemathesis, uv...):
# what the tests, the linters and the tools need.
install-dev: install $(VENV)/$(DEV_LOCK).installed

# One stamp per lock, made again only when that lock changed since it was installed.
# Nothing is resolved here: pip installs the pinned files and refuses any whose hash
# differs. Each lock holds the one before it at the same versions, so installing a
# wider one over a narrower one only adds packages. --no-compile: byte-compiling every
# module of every package up front takes about as long as the install itself on two
# cores; Python compiles a module the first time a process imports it.
$(VENV)/%.installed: %
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes --no-deps --no-compile -r $<
	touch $@

# The translations (locale/): compiled to .mo in pure Python, so no GNU gettext is
# needed; only the catalogues that changed are rewritten.
messages: $(VENV)/$(RUN_LOCK).installed
	$(PY) -m config.i18n

# The one command that refreshes every lock file: the newest versions pyproject.toml
# allows, for Python 3.11 and 3.12 on every platform, each lock constrained by the one
# before it so that what they share stays at one version. Commit the result.
lock: install-dev
	$(UV_COMPILE) -o $(LOCK)
	$(UV_COMPILE) --extra embedded --constraint $(LOCK) -o $(DEMO_LOCK)
	$(UV_COMPILE) --extra embedded --extra stripe-emulator --constraint $(DEMO_LOCK) \
		-o $(STRIPE_DEMO_LOCK)
	$(UV_COMPILE) --extra embedded --extra stripe-emulator --extra dev \
		--constraint $(STRIPE_DEMO_LOCK) -o $(DEV_LOCK)

# The demo profile: development secrets, embedded services, the sandbox provider.
demo: install
	DEMO_MODE=true $(WITH_SERVICES) $(PY) -m demo.runner

# The same shop as a small cluster of real engines on loopback (docs/scaling.md):
# HAProxy, CLUSTER_NODES web nodes, PgBouncer, a primary and its streaming replica,
# workers and beats on two nodes over RabbitMQ. Needs Debian's haproxy, pgbouncer,
# postgresql and rabbitmq-server (it names what is missing). Ctrl-C stops all of it.
cluster: install
	DEMO_MODE=true $(PY) -m demo.cluster

# The whole cluster started, used, hit by a node kill and stopped, in a temporary
# directory (minutes; needs what `make cluster` needs, so not part of `make test`).
cluster-test: install-dev
	$(PY) -m pytest -q -p no:cacheprovider tests/cluster/cluster_run.py

# Beside a running `make demo` (same PORT), in its profile, on its services and with
# its payment provider: the demo publishes its environment under .var/demos/ while it
# runs (demo/beside.py), so `PORT=9000 make demo PAYMENT_PROVIDER=stripe` pairs with
# `PORT=9000 make audit`. With no demo on that PORT they say so in one line (exit 2);
# `make shell` then opens on the embedded servers of PAYMENT_PROVIDER's demo.
# A person reads what these print: logs go to stderr in the plain format, warnings
# and errors only (LOG_LEVEL=INFO make story shows the rest), never JSON lines
# between the sentences. Servers keep JSON (the settings' default).
FOR_A_PERSON := LOG_FORMAT=$${LOG_FORMAT:-plain} LOG_LEVEL=$${LOG_LEVEL:-WARNING}
BESIDE := DEMO_MODE=true $(FOR_A_PERSON) $(PY) -m demo.beside
BESIDE_DEMO := $(BESIDE) -- $(PY) manage.py

story: install
	$(BESIDE_DEMO) story

audit: install
	$(BESIDE_DEMO) audit

reconcile: install
	$(BESIDE_DEMO) reconcile --once

shell: install
	$(BESIDE) --or-embedded -- $(PY) manage.py shell

test: install-dev
	$(WITH_SERVICES) $(PY) -m pytest $(PYTEST_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# The Django plugin imports the settings: placeholder URLs, so type-checking
	@# never starts the embedded servers (nothing connects to them).
	DATABASE_URL=$${DATABASE_URL:-postgres://unused/lint} REDIS_URL=$${REDIS_URL:-redis://unused} \
		DEMO_MODE=true $(VENV)/bin/mypy .

format: install-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The bench runs in the harness profile, as the tests do (tools/bench/__init__.py).
# `make bench SUITE=peers` runs one suite (`SUITE="orders pay"` several);
# `make bench BENCH_ARGS=--quick` passes anything else to `python -m tools.bench`.
SUITE ?=
bench: install-dev
	$(WITH_SERVICES) $(PY) -m tools.bench $(foreach suite,$(SUITE),--suite $(suite)) $(BENCH_ARGS)

# The alerting rules: promtool parses them and runs their unit tests (each alert
# fires past its bound, not before). promtool: Debian's `prometheus` package.
alerts:
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts.test.yml

# The anti-pattern lab (docs/lab.md): `make lab`, or `make lab EXP=5` for one.
lab: install-dev
	$(FOR_A_PERSON) $(WITH_SERVICES) $(PY) -m tools.lab $(EXP)

# Chaos at scale (docs/reliability.md): `make chaos ORDERS=10000`. PostgreSQL is
# DATABASE_URL's server (or the embedded one); Redis is the run's own, since the
# nemesis restarts it. The report goes to tools/chaos/out/report.md.
# `make chaos TOPOLOGY=cluster`: the same run against `make cluster`'s topology,
# started by the run under tools/chaos/out/cluster/ (needs what `make cluster` needs),
# with node kills, PgBouncer and broker restarts, replica lag and the replica's loss.
TOPOLOGY ?= local
ORDERS ?= 500
CLIENTS ?= 16
SEED ?= 1
chaos: install-dev
	$(PY) -m tools.chaos --orders $(ORDERS) --clients $(CLIENTS) --seed $(SEED) \
		--topology $(TOPOLOGY) $(CHAOS_ARGS)

# The second hour, run for real (docs/operating.md, "The newcomer's walk"): make demo and
# the API tour (docs/api.md), the Stripe demo with a payment and a refund, make demo again with
# make audit and /books/, make cluster on two PORTs; in a state directory of its own,
# ending with what is left running. Minutes. `make walk WALK_ARGS="--port 29000"`.
WALK_ARGS ?=
walk: install-dev
	$(PY) -m tools.walk $(WALK_ARGS)

# Every demo's state (each provider's database, Redis and provider, the cluster's):
# refused while a demo or a cluster runs from .var/; what killed runs left running
# is stopped first. The next `make demo` starts from nothing.
clean:
	test ! -x $(PY) || $(PY) -m demo.clean
	rm -rf .var staticfiles .mypy_cache .ruff_cache .pytest_cache
