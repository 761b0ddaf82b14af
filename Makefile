# mrclab: every target sets up what it needs first (scripts/setup.sh is idempotent).
PY := .venv/bin/python
MRCLAB := $(PY) -m experiments.cli

.PHONY: setup demo test unit integration lint experiment check-fabric clean

setup:
	@scripts/setup.sh

demo: setup
	$(MRCLAB) demo

test: setup
	$(PY) -m pytest -q tests

unit: setup
	$(PY) -m pytest -q tests/unit

integration: setup
	$(PY) -m pytest -q tests/integration

lint: setup
	$(PY) -m ruff check .

check-fabric: setup
	$(MRCLAB) check-fabric --planes 4 --leaves 4 --spines 2 --hosts-per-leaf 4

experiment: setup
	$(MRCLAB) check-fabric --planes 4 --leaves 4 --spines 2 --hosts-per-leaf 4
	$(MRCLAB) demo

clean:
	@if [ -x $(PY) ]; then $(MRCLAB) clean; fi
	rm -rf .pytest_cache .ruff_cache .hypothesis /tmp/mrclab
