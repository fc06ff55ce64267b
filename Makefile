# The README commands are `make test`, `make demo` and `make bench`; see scripts/.

.PHONY: bootstrap test demo lint bench soak

bootstrap:
	scripts/bootstrap

# Extra pytest arguments: make test ARGS="-k claim -x"
test:
	scripts/test $(ARGS)

# exec: no shell between make and the script, which a Ctrl-C or `timeout` would
# kill at once while the script still stops the site and the workers.
demo:
	exec env BURST="$(BURST)" scripts/demo

# Not part of make test: about 10 minutes (SOAK_SECONDS=120 make soak: shorter) of
# mixed enqueue and drain with SIGKILLed workers, killed sessions and a server restart,
# on the fault PostgreSQL (5433), which it restarts; see bench/soak.py. Exits non-zero
# when a job was lost.
soak:
	scripts/bootstrap postgres test
	scripts/start-fault-servers postgres
	exec .venv/bin/python bench/soak.py

# ruff, mypy (django-stubs) and import-linter's layer contracts (pyproject.toml), and
# cargo fmt --check on clients/rust and gofmt -l on clients/go (a missing cargo or
# gofmt fails lint; scripts/system-packages installs them, and Ruby, PHP and Crystal, first where it can);
# scripts/lint-clients for Ruby (ruby -wc), PHP (php -l) and Crystal (crystal tool
# format --check), which fails on a missing toolchain too. mypy
# reads the gateway's, prometheus-client's, psycopg's and httpx's types (wheels); no mysqlclient, so lint needs
# no C headers.
lint:
	scripts/bootstrap lint gateway metrics postgres client
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache
	scripts/system-packages rust go ruby php crystal
	@command -v cargo >/dev/null 2>&1 && cargo fmt --version >/dev/null 2>&1 \
		|| { echo "lint: FAILED: no cargo fmt for clients/rust (apt-get install cargo rustfmt)" >&2; exit 1; }
	cd clients/rust && cargo fmt --check
	@command -v gofmt >/dev/null 2>&1 \
		|| { echo "lint: FAILED: no gofmt for clients/go (apt-get install golang-go)" >&2; exit 1; }
	@out=$$(gofmt -l clients/go) && [ -z "$$out" ] \
		|| { echo "lint: FAILED: gofmt -l clients/go lists files to format: $$out" >&2; exit 1; }
	scripts/lint-clients ruby php crystal

# Ours on PostgreSQL, MariaDB and SQLite (bench/run.py's docstring): a table, JSON in
# .artifacts/bench/ and the README's "Benchmarks (last run)". About 15 minutes;
# BENCH_QUICK=1 for a 2-minute smoke run, BENCH_BIG=0 without the 1,000,000-job table.
# Not part of `make test`. exec: a Ctrl-C reaches the Python process directly.
bench:
	scripts/bootstrap postgres mysql bench example gateway metrics
	scripts/start-databases postgres mariadb
	exec .venv/bin/python bench/run.py
