"""What a run's measurements mean: metrics.py from goodput bins, capacity.py and
calibration.py for what the machine carries faithfully, fidelity.py for what the run got, and
the figures (plots.py, ccplot.py)."""
