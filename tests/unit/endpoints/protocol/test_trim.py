"""Trimmed packets: a trim in the fabric skips the EV; a trim at the last hop (the receiver's
own incast) does not penalise the path; both are resent at once and slow the window."""

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.sender import MrcSender
from experiments.sim.simnet import sim_fabric


@pytest.mark.parametrize("last_hop, reason, state", [
    (False, wire.NACK_TRIMMED, "SKIP"),
    (True, wire.NACK_TRIMMED_LASTHOP, "GOOD"),
])
def test_trim_nack_reason_and_reaction(last_hop, reason, state):
    cfg = TransportConfig()
    evs = sim_fabric(2, 2).evs
    snd, rcv = MrcSender(1, 2, evs, cfg, 1), MrcReceiver(2, 1, evs, cfg, 1)
    snd.send_message(b"x" * 8192, 0.0)
    sent = snd.poll(0.0)
    ev, pkt = sent[0]
    cut = wire.trimmed(pkt, last_hop)
    rcv.on_datagram(cut, ev, 0.001)
    nacks = [wire.decode(p) for _, p in rcv.poll(0.001) if p[0] == wire.OP_NACK]
    assert [n.reason for n in nacks] == [reason]
    cwnd = snd.cc.cwnd
    for rev_ev, p in rcv.poll(0.002) + [(evs[0].ev, wire.encode_nack(1, nacks[0].psn, reason, ev))]:
        snd.on_datagram(p, rev_ev, 0.003)
    assert snd.ev_states()[ev] == state
    assert snd.cc.cwnd < cwnd  # congestion either way: the window takes it
    resent = [wire.decode(p) for _, p in snd.poll(0.003) if p[0] in wire.DATA_OPCODES]
    assert [d.psn for d in resent if d.flags & wire.F_RETRANSMIT] == [nacks[0].psn]
