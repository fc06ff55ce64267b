# The two README commands are `make test` and `make demo`; see scripts/.

.PHONY: bootstrap test demo lint

bootstrap:
	scripts/bootstrap

# Extra pytest arguments: make test ARGS="-k claim -x"
test:
	scripts/test $(ARGS)

demo:
	BURST=$(BURST) scripts/demo

# Only ruff: no database driver, so it needs no C headers either.
lint:
	scripts/bootstrap lint
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
