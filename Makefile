# The two commands of the README:
#   make run    set up a fresh machine and run the default pipeline (CPU, tiny model)
#   make test   set up and run the test suite
.PHONY: setup run test lint

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/snakemake --cores 2

test: setup
	.venv/bin/python -m pytest -n 2 --dist loadgroup

lint: setup
	.venv/bin/snakemake --lint
	.venv/bin/snakefmt --check .
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
