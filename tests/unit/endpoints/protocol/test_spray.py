"""`spray` (MRC's sender with the per-path state switched off) against MRC on a dead path: what
the state machine adds, measured on the deterministic simulated fabric."""

import random

from endpoints.protocol.config import TransportConfig
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric


def _run(path_state: bool):
    fab = sim_fabric(2, 2)
    fab.links[("up", 0, 0)].down = [(0.5, 30.0)]  # one of four paths dies for good
    cfg = TransportConfig(path_state=path_state)
    rng = random.Random(2)
    msgs = [rng.randbytes(256 * 1024) for _ in range(8)]
    snd = MrcSender(1, 2, fab.evs, cfg, 5)
    rcv = MrcReceiver(2, 1, fab.evs, cfg, 5)
    res = run_transfer(Simulation(5), snd, rcv, fab.fwd, fab.rev, msgs, 30.0)
    assert [d for _, d in res.completed] == msgs  # both deliver every byte exactly
    return snd, res


def test_spray_keeps_losing_on_a_dead_path_where_mrc_benches_it():
    mrc, mrc_res = _run(True)
    spray, spray_res = _run(False)
    assert set(spray.ev_states().values()) == {"GOOD"}  # never benches anything
    assert spray.stats["bad_evs"] == 0 and spray.stats["probes_sent"] == 0
    assert mrc.stats["bad_evs"] >= 1
    # Spraying on regardless keeps feeding the dead path: many more losses, and slower.
    assert spray.stats["lost"] > 10 * max(mrc.stats["lost"], 1)
    assert spray_res.end > 1.3 * mrc_res.end
