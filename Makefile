# mrclab: every target sets up what it needs first (scripts/setup.sh is idempotent).
PY := .venv/bin/python
MRCLAB := $(PY) -m experiments.cli
# No list of scenarios here: `make experiment` and `make experiment-NAME` take the registry's
# (experiments/scenarios/), and `mrclab run` names the valid ones when NAME is not one of them.
# What `make lab` / `make check-lab` say when N is missing or not a lab.
NEED_LAB = if [ -z "$(N)" ]; then echo "make $@: N is missing: make $@ N=NUMBER, one of these labs:" >&2; \
	$(PY) -m labs.checker list >&2; exit 2; fi

.PHONY: setup setup-tools demo cli test unit integration lint experiment paper check-fabric bench report validate docs clean lab check-lab \
	soak fuzz

setup:
	@scripts/setup.sh

# What runs no emulation (lint, the unit tests, the docs, the report) sets up without this
# machine's calibration: a stale one is measured by the next target that runs emulations. (A
# calibration started by `make lint` during a long `make paper` took the emulation from the
# paper's next run, which stopped it.)
setup-tools:
	@scripts/setup.sh --no-calibration

demo: setup
	$(MRCLAB) demo

# Explore a running fabric like `mn`: `make cli ARGS="--planes 2 --spines 3"`.
cli: setup
	$(MRCLAB) cli $(ARGS)

# Teaching labs (labs/README.md): `make lab N=3` sets lab 3 up and drops into its environment;
# `make check-lab N=3` checks your files, `make check-lab N=3 SOLUTION=1` the reference solution.
lab: setup
	@$(NEED_LAB)
	@$(PY) -m labs.checker start "$(N)"

# GNU make exits 2 whenever a recipe fails: `make check-lab` exits 0 (every check passed) or 2,
# and its last line, `make: *** [...] Error N`, carries the checker's own status (1: a check
# failed, 2: no such lab). `.venv/bin/python -m labs.checker check N` exits 1 or 2 itself.
check-lab: setup
	@$(NEED_LAB)
	@$(PY) -m labs.checker check "$(N)" $(if $(SOLUTION),--solution) $(ARGS); status=$$?; \
	if [ $$status -ne 0 ]; then echo "check-lab: the checker exited $$status (1: a check failed," \
	  "2: no such lab); make reports it as Error $$status and exits 2" >&2; fi; exit $$status

test: setup
	$(PY) -m pytest -q tests

unit: setup-tools
	$(PY) -m pytest -q tests/unit

integration: setup
	$(PY) -m pytest -q tests/integration

lint: setup-tools
	$(PY) -m ruff check .
	$(PY) -m mypy

check-fabric: setup
	$(MRCLAB) check-fabric --planes 4 --leaves 4 --spines 2 --hosts-per-leaf 4

bench: setup
	$(PY) -m experiments.tools.cost_bench --profile
	$(PY) -m experiments.tools.floor_bench
	$(PY) -m experiments.tools.bench
	$(PY) -m experiments.tools.startup_bench
	$(PY) -m experiments.tools.dataplane_bench

# One scenario: `make experiment-lossy-link ARGS="--loss 0.1"`; a name that is not a scenario
# gets the list of those that are (from `mrclab run`).
experiment-%: setup
	$(MRCLAB) run $* $(ARGS)

# Every scenario of the registry, with a progress line before each run (what runs, how many are
# left, about how long), then the report page. SEEDS="1 2 3 4 5": each scenario once per seed
# (the first seed's in results/NAME, the others' in results/spread/), which `make docs
# ARGS="--from results"` shows as median (min-max). ARGS: `mrclab run` options for every run.
# The MRC paper's figures (experiments/paper/): `make paper`, `make paper ARGS="--quick"`,
# `make paper ARGS="fig11 fig20"`; results/paper/index.md and index.html list every figure.
paper: setup
	$(MRCLAB) paper $(ARGS)

experiment: setup
	$(PY) -m experiments.sweep $(if $(SEEDS),--seeds "$(SEEDS)") $(if $(ARGS),-- $(ARGS))
	$(MRCLAB) report

# The proofs of docs/security.md: 20 runs with faults injected into the testbed
# itself (about 3 minutes on a 2-core VM), and 100k forged datagrams against live agents (about
# 2.5 minutes).
soak: setup
	$(PY) -m experiments.tools.soak

fuzz: setup
	$(PY) -m experiments.tools.fuzz

report: setup-tools
	$(MRCLAB) report

validate: setup
	$(MRCLAB) validate

# The measured figures in README.md and docs/ from experiments/reference/full.json; after a
# full run, `make docs ARGS="--from results"` first takes the reference from it.
docs: setup-tools
	$(MRCLAB) docs $(ARGS)

clean:
	@if [ -x $(PY) ]; then $(MRCLAB) clean; fi
	rm -rf .pytest_cache .ruff_cache .hypothesis .mypy_cache

# Grading a class (labs/INSTRUCTORS.md): `make grade N=4 DIR=submissions/` checks every
# submission in DIR (one folder or .py file per student); ARGS="--no-emulation" etc.
.PHONY: grade
grade: setup
	@$(PY) -m labs.checker grade "$(N)" "$(DIR)" $(ARGS)
