# mrclab: every target sets up what it needs first (scripts/setup.sh is idempotent).
PY := .venv/bin/python
MRCLAB := $(PY) -m experiments.cli
SCENARIOS := link-failure switch-failure link-flap lossy-link permutation incast collective

.PHONY: setup demo cli test unit integration lint experiment check-fabric bench report validate docs clean lab check-lab \
	soak fuzz \
	$(addprefix experiment-,$(SCENARIOS))

setup:
	@scripts/setup.sh

demo: setup
	$(MRCLAB) demo

# Explore a running fabric like `mn`: `make cli ARGS="--planes 2 --spines 3"`.
cli: setup
	$(MRCLAB) cli $(ARGS)

# Teaching labs (labs/README.md): `make lab N=3` sets lab 3 up and drops into its environment;
# `make check-lab N=3` checks your files, `make check-lab N=3 SOLUTION=1` the reference solution.
lab: setup
	@$(PY) -m labs.checker start "$(N)"

check-lab: setup
	@$(PY) -m labs.checker check "$(N)" $(if $(SOLUTION),--solution)

test: setup
	$(PY) -m pytest -q tests

unit: setup
	$(PY) -m pytest -q tests/unit

integration: setup
	$(PY) -m pytest -q tests/integration

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

check-fabric: setup
	$(MRCLAB) check-fabric --planes 4 --leaves 4 --spines 2 --hosts-per-leaf 4

bench: setup
	$(PY) -m experiments.tools.bench
	$(PY) -m experiments.tools.startup_bench
	$(PY) -m experiments.tools.dataplane_bench

# One scenario: `make experiment-lossy-link ARGS="--loss 0.1"`.
$(addprefix experiment-,$(SCENARIOS)): experiment-%: setup
	$(MRCLAB) run $* $(ARGS)

# Every scenario, with a progress line per step, then the report page.
experiment: setup
	@n=0; total=$(words $(SCENARIOS)); for s in $(SCENARIOS); do \
	  n=$$((n+1)); echo "=== [$$n/$$total] $$s"; \
	  $(MRCLAB) run $$s || exit $$?; \
	done; $(MRCLAB) report

# The proofs of issue 11 (docs/security.md): 20 runs with faults injected into the testbed
# itself (about 3 minutes on a 2-core VM), and 100k forged datagrams against live agents (about
# 2.5 minutes).
soak: setup
	$(PY) -m experiments.tools.soak

fuzz: setup
	$(PY) -m experiments.tools.fuzz

report: setup
	$(MRCLAB) report

validate: setup
	$(MRCLAB) validate

# The measured figures in README.md and docs/ from experiments/reference/full.json; after a
# full run, `make docs ARGS="--from results"` first takes the reference from it.
docs: setup
	$(MRCLAB) docs $(ARGS)

clean:
	@if [ -x $(PY) ]; then $(MRCLAB) clean; fi
	rm -rf .pytest_cache .ruff_cache .hypothesis .mypy_cache

# Grading a class (labs/INSTRUCTORS.md): `make grade N=4 DIR=submissions/` checks every
# submission in DIR (one folder or .py file per student); ARGS="--no-emulation" etc.
.PHONY: grade
grade: setup
	@$(PY) -m labs.checker grade "$(N)" "$(DIR)" $(ARGS)
