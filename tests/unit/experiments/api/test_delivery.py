"""A result that says "ok" means the bytes arrived (issue 11, item 5): every message the receiver
completed has the sender's digest, every message the sender saw acknowledged was completed by
the receiver with that digest, and a flow expected to deliver that delivered nothing fails.
Agents are stood in for by canned replies: no root."""

from __future__ import annotations

from experiments.api.flows import AgentFlow
from experiments.scenarios import default_options
from experiments.scenarios.failure import fault_metrics
from topologies.model import Fabric

A, B, C = "a" * 64, "b" * 64, "c" * 64


class CannedAgent:
    def __init__(self, stats: dict) -> None:
        self.stats = stats

    def call(self, cmd: str, **fields: object) -> dict:
        return self.stats if cmd == "stats" else {"pending": 0} if cmd == "digest" else {}


def _result(sent: dict, got: dict):
    sender = {"digests": {}, "messages_acked": 0, "stats": {}, "bins": {}, **sent}
    receiver = {"digests": {}, "stats": {}, "bins": {}, "bytes_delivered": 0, **got}
    agents = {"h0": CannedAgent(sender), "h1": CannedAgent(receiver)}
    return AgentFlow(agents, "mrc", "h0", "h1", 7).result()  # type: ignore[arg-type]


def test_messages_the_sender_saw_acknowledged_must_have_arrived():
    # A forged SACK (or a bug) completed three messages at the sender; the receiver has none.
    res = _result({"digests": {"0": A, "1": B, "2": C}, "messages_acked": 3}, {})
    assert res.data_ok is False


def test_an_acknowledged_message_must_have_arrived_with_its_digest():
    res = _result({"digests": {"0": A, "1": B}, "messages_acked": 2},
                  {"digests": {"0": A, "1": C}, "bytes_delivered": 10})
    assert res.data_ok is False
    res = _result({"digests": {"0": A, "1": B, "2": C}, "messages_acked": 2},
                  {"digests": {"0": A, "1": B}, "bytes_delivered": 10})
    assert res.data_ok is True and res.delivered is True  # message 2 still in flight: fine


def test_nothing_delivered_is_not_delivered():
    res = _result({"digests": {"0": A}, "messages_acked": 0}, {})
    assert res.data_ok is True and res.delivered is False


def test_a_dead_transport_fails_the_fault_scenario_and_has_no_recovery_time():
    opts = default_options("link-failure")
    fabric = Fabric(opts.fabric)
    res = _result({"digests": {"0": A}}, {})  # nothing ever arrived
    events = [{"t": opts.fault_at, "action": "cut"}, {"t": opts.fault_end, "action": "restore"}]
    figures = fault_metrics(opts, fabric, res, 1000.0, events, frozenset())
    assert figures["recovery_ms"] is None, "no goodput before the fault: no recovery (was 0)"
    assert figures["data_ok"] is False, "a transport that delivered nothing passed"
    assert figures["delivered"] is False


def test_the_sender_hashes_in_chunks_before_it_is_asked_for_its_digests():
    """A flow's result asks the sender to hash a chunk at a time (`digest`) until nothing is
    pending, and only then for everything (`stats`): one call never holds the agents' loop up
    for a long flow's gigabytes."""
    asked = []

    class Sender(CannedAgent):
        pending = 3

        def call(self, cmd: str, **fields: object) -> dict:
            asked.append(cmd)
            if cmd == "digest":
                self.pending -= 1
                return {"qpn": 7, "pending": self.pending}
            return super().call(cmd, **fields)

    sender = Sender({"digests": {"0": A}, "messages_acked": 1, "stats": {}, "bins": {}})
    receiver = CannedAgent({"digests": {"0": A}, "stats": {}, "bins": {}, "bytes_delivered": 10})
    res = AgentFlow({"h0": sender, "h1": receiver}, "mrc", "h0", "h1", 7).result()  # type: ignore[dict-item]
    assert asked == ["open", "digest", "digest", "digest", "stats"]
    assert res.data_ok is True
