"""The Python API (docs/api.md): `Testbed` (testbed.py) brings a fabric up with its agents and
gives flows (flows.py), faults (faults.py), captures (capture.py) and traffic patterns
(traffic.py). Import each name from its module: this package re-exports nothing, so importing
the pure traffic patterns does not load the emulator."""
