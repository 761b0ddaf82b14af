"""The agent's control commands (endpoints/host/commands.py) on a data loop without sockets:
the many-QP requests a collective's step makes, and how they refuse bad input."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from endpoints.host.commands import MAX_MANY, AgentCommands
from endpoints.host.control import ControlError
from endpoints.host.dataloop import DataLoop, Qp
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.gobackn import GbnReceiver, GbnSender

CONFIG = TransportConfig()
EV = 0x1C000


def _agent() -> AgentCommands:
    """Senders 5 and 9, receiver 7, on a loop that only posts and marks (no sockets)."""
    loop = object.__new__(DataLoop)
    loop.trace, loop.service_all, loop.qps = None, False, {}
    paths = SimpleNamespace(evs=[EV])
    for qpn in (5, 9):
        core = GbnSender(qpn, qpn + 1, EV, CONFIG, 1)
        loop.qps[qpn] = Qp(qpn, "h1", qpn + 1, "roce", core, paths, sender=core, due=None)  # type: ignore[arg-type]
    rx = GbnReceiver(7, 8, EV, CONFIG, 1)
    loop.qps[7] = Qp(7, "h1", 8, "roce", rx, paths, receiver=rx, due=None)  # type: ignore[arg-type]
    commands = object.__new__(AgentCommands)  # what these commands read: the loop and config
    commands.loop, commands.name, commands.config = loop, "h0", CONFIG
    return commands


def test_write_many_posts_on_every_qp_it_names_and_marks_each():
    agent = _agent()
    assert agent.handle({"cmd": "write_many", "qpns": [5, 9, 5], "sizes": [1000, 3000, 10]}) == \
        {"msns": [0, 0, 1]}
    qps = agent.loop.qps
    assert [qps[5].posted, qps[9].posted] == [2, 1] and qps[5].touched and qps[9].touched
    assert not qps[7].touched and not agent.loop.service_all


@pytest.mark.parametrize("qpns, sizes, error", [
    ([5, 7], [1000, 10], "QP 7 on h0 is a recv QP"),  # the second one is a receiver
    ([5, 42], [1000, 10], "no QP 42 on h0"),
    ([5, 9], [1000, 0], "bytes"),
    ([5, 9], [1000, CONFIG.max_message + 1], "bytes"),
    ([5, 9], [1000], "one size per QP"),
    ([], [], "qpns must be a list"),
    (5, 1000, "qpns must be a list"),
    ([5] * (MAX_MANY + 1), [1] * (MAX_MANY + 1), "qpns must be a list"),
])
def test_a_bad_write_many_is_refused_whole_and_posts_nothing(qpns, sizes, error):
    agent = _agent()
    with pytest.raises(ControlError, match=error):
        agent.handle({"cmd": "write_many", "qpns": qpns, "sizes": sizes})
    assert all(qp.posted == 0 and not qp.touched for qp in agent.loop.qps.values())


def test_progress_many_answers_each_qp_as_progress_does_in_the_order_asked():
    agent = _agent()
    agent.handle({"cmd": "write", "qpn": 9, "bytes": 100})
    many = agent.handle({"cmd": "progress_many", "qpns": [9, 7, 5]})["progress"]
    assert many == [agent.handle({"cmd": "progress", "qpn": q}) for q in (9, 7, 5)]
    assert [p["qpn"] for p in many] == [9, 7, 5] and many[0]["posted"] == 1
    for bad in ([], [5, 42], "5", [5] * (MAX_MANY + 1)):
        with pytest.raises(ControlError):
            agent.handle({"cmd": "progress_many", "qpns": bad})


def test_a_command_has_only_the_qp_it_changed_polled_and_a_question_none():
    """A collective's runner asks each QP for its progress every few ms: polling every QP of
    the agent for it (96 in an all-to-all of 16 RoCE QPs per peer) was a tenth of the agents'
    CPU. A write marks its QP; a question marks nothing; a port's change (poll_all) marks all."""
    agent = _agent()
    loop = agent.loop
    sent: list[int] = []
    loop._transmit = lambda qp, items: sent.extend([qp.qpn] * len(items))  # type: ignore[method-assign]
    assert agent.handle({"cmd": "progress", "qpn": 5})["messages"] == 0
    assert agent.handle({"cmd": "stats", "qpn": 9, "digests": False})["qpn"] == 9
    assert not loop.service_all and not any(qp.touched for qp in loop.qps.values())
    assert loop._service(1.0) is None and sent == []  # nothing due: nothing polled
    agent.handle({"cmd": "write", "qpn": 5, "bytes": 3 * CONFIG.mtu_payload})
    assert loop.qps[5].touched and not loop.qps[9].touched and not loop.service_all
    loop._service(1.0)
    assert sent == [5, 5, 5] and not loop.qps[5].touched
    loop.poll_all()
    assert loop.service_all
