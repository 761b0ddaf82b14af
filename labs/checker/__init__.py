"""The labs' shared checker framework: see core.py (checks and verdicts), student.py (how
student code is loaded and put in place of the product's) and fabric.py (one emulation per lab,
a scenario run with the student's code in the agents). The simulated networks are the
product's own (experiments/sim/simnet.py, experiments/sim/simclos.py)."""

from labs.checker.core import Check, CheckFailed, Context, Lab, Skipped, Verdict

__all__ = ["Check", "CheckFailed", "Context", "Lab", "Skipped", "Verdict"]
