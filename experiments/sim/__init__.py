"""The discrete-event simulator, no root: simnet.py runs the transport cores over seeded
simulated paths, simclos.py a whole multi-plane Clos from the fabric model on it."""
