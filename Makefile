# The two README commands are `make test` and `make demo`; see scripts/.

.PHONY: bootstrap test demo lint

bootstrap:
	scripts/bootstrap

# Extra pytest arguments: make test ARGS="-k claim -x"
test:
	scripts/test $(ARGS)

# exec: no shell between make and the script, which a Ctrl-C or `timeout` would
# kill at once while the script still stops the site and the workers.
demo:
	exec env BURST="$(BURST)" scripts/demo

# ruff, mypy (django-stubs) and import-linter's layer contracts (pyproject.toml). mypy
# reads the gateway's, prometheus-client's, psycopg's and httpx's types (wheels); no mysqlclient, so lint needs
# no C headers.
lint:
	scripts/bootstrap lint gateway metrics postgres client
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache
