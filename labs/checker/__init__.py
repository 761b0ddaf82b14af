"""The labs' shared checker framework: see core.py (checks and verdicts), student.py (how
student code is loaded and put in place of the product's), simlab.py (the simulated network
set-ups the protocol labs share) and fabric.py (one emulation per lab)."""

from labs.checker.core import Check, CheckFailed, Context, Lab, Skipped, Verdict

__all__ = ["Check", "CheckFailed", "Context", "Lab", "Skipped", "Verdict"]
