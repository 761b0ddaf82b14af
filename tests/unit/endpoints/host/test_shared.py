"""endpoints/host/shared.py: one wait for several agents' loops, each serviced only when
something came for it or its own deadline passed, until every loop stops."""

from __future__ import annotations

import selectors
import socket
import time

from endpoints.host import shared


class FakeLoop:
    """The parts of a DataLoop that `shared.run` drives: a receive socket, a control
    selector, the backlog, the host-sample clock and the three steps it calls."""

    def __init__(self, name: str, every: float | None, stop_after: int) -> None:
        self.name = name
        self.every = every  # its QPs' timer period (None: no timer)
        self.stop_after = stop_after  # services before it stops itself
        self.rx, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.rx.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.backlog = type("Backlog", (), {"queues": {}, "flush": lambda self: None})()
        self._next_host_sample = float("inf")
        self._loop_lag = 0.0
        self.running = True
        self.wakes = self.rx_wakes = self.rx_dgrams = 0
        self.services: list[float] = []
        self.received: list[bytes] = []

    def _receive(self, now: float) -> int:
        taken = 0
        while True:
            try:
                self.received.append(self.rx.recv(100))
            except BlockingIOError:
                return taken
            taken += 1

    def _service(self, now: float) -> float | None:
        self.services.append(now)
        if len(self.services) >= self.stop_after:
            self.running = False
        return None if self.every is None else now + self.every

    def _sample_host(self, now: float) -> None:
        self._next_host_sample = float("inf")

    def close(self) -> None:
        self.rx.close()
        self.peer.close()
        self.selector.close()


def test_each_loop_is_serviced_on_its_own_deadlines_and_datagrams_until_all_stop():
    ticking = FakeLoop("ticking", every=0.005, stop_after=40)  # about 0.2 s of its own timer
    quiet = FakeLoop("quiet", every=None, stop_after=10**6)  # no timer: only what comes for it
    quiet.peer.send(b"hello")
    try:
        t0 = time.monotonic()

        def stop_quiet_later() -> None:
            quiet.running = False

        # the quiet loop stops once the ticking one has (its next service sees the flag)
        original = ticking._service

        def service(now: float) -> float | None:
            deadline = original(now)
            if not ticking.running:
                stop_quiet_later()
            return deadline

        ticking._service = service  # type: ignore[method-assign]
        shared.run([ticking, quiet])  # type: ignore[list-item]
        elapsed = time.monotonic() - t0
    finally:
        ticking.close()
        quiet.close()
    assert quiet.received == [b"hello"] and quiet.rx_wakes == 1 and quiet.rx_dgrams == 1
    assert len(ticking.services) == 40
    # serviced on its timer, not on every wake-up of the other loop nor faster than its period
    gaps = [b - a for a, b in zip(ticking.services[1:], ticking.services[2:], strict=False)]
    assert min(gaps) >= 0.005 * 0.9
    # the quiet loop: at once (0.0 deadline), for its datagram, then every IDLE_WAIT_S at most
    assert len(quiet.services) <= 2 + elapsed / shared.IDLE_WAIT_S + 1
    assert elapsed < 2.0


def test_a_loop_that_stops_is_left_out_while_the_others_run():
    first = FakeLoop("first", every=0.002, stop_after=3)
    second = FakeLoop("second", every=0.002, stop_after=30)
    try:
        shared.run([first, second])  # type: ignore[list-item]
    finally:
        first.close()
        second.close()
    # a stopped loop's deadlines keep coming due: serviced again, it would count more than 3
    assert len(first.services) == 3 and len(second.services) == 30


class FakeCore:
    """A core whose deadline is set by the test; counts its polls."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.polls: list[float] = []

    def poll(self, now: float) -> list:
        self.polls.append(now)
        return []

    def take_events(self) -> list:
        return []

    def next_deadline(self) -> float | None:
        return self.deadline


def test_a_service_polls_only_the_qps_that_are_due():
    from endpoints.host.dataloop import DataLoop, Qp

    loop = object.__new__(DataLoop)  # only what _service reads: the QPs, the trace, the flag
    loop.trace = None
    cores = {"timer": FakeCore(1.0), "idle": FakeCore(None), "later": FakeCore(5.0)}
    loop.qps = {n: Qp(n, "h1", n, "mrc", core, None)  # type: ignore[arg-type]
                for n, core in enumerate(cores.values())}
    loop.service_all = True
    assert loop._service(0.5) == 1.0  # the first: every QP, each deadline learnt
    assert [len(c.polls) for c in cores.values()] == [1, 1, 1]
    cores["timer"].deadline = 3.0
    assert loop._service(2.0) == 3.0  # only the one whose deadline passed
    assert [len(c.polls) for c in cores.values()] == [2, 1, 1]
    loop.qps[1].touched = True  # a datagram came for the idle one
    assert loop._service(2.5) == 3.0
    assert [len(c.polls) for c in cores.values()] == [2, 2, 1] and not loop.qps[1].touched
    cores["later"].deadline = None
    loop.service_all = True  # a port changed state (poll_all): every QP again
    assert loop._service(2.6) == 3.0
    assert [len(c.polls) for c in cores.values()] == [3, 3, 2] and not loop.service_all
    assert loop._service(4.0) == 3.0 and [len(c.polls) for c in cores.values()] == [4, 3, 2]


def test_the_nic_gives_its_ports_to_its_qps_in_turn():
    """Three QPs with data for one port: after the first, each free slot goes to the QP served
    least recently (a NIC's round robin), not to the first QP while it has data: in that order
    an all-to-all's senders all began with the same peer, an incast of the transport's making."""
    from endpoints.host.dataloop import DataLoop, Qp
    from endpoints.protocol import wire
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.gobackn import GbnSender
    from endpoints.protocol.nicpacer import NicPacer

    config = TransportConfig()
    pacer = NicPacer(1, 10e6, wire.frame_bytes(config.mtu_payload))
    loop = object.__new__(DataLoop)
    loop.trace, loop.service_all, loop.qps = None, True, {}
    order: list[int] = []
    loop._transmit = lambda qp, items: order.extend([qp.qpn] * len(items))  # type: ignore[method-assign]
    for qpn in (7, 8, 9):
        core = GbnSender(qpn, 100 + qpn, 0x1C000, config, 1, pacer=pacer, plane=0)
        core.send_message(b"a" * (6 * config.mtu_payload), 0.0)
        loop.qps[qpn] = Qp(qpn, "h1", 100 + qpn, "roce", core, None, sender=core)  # type: ignore[arg-type]
    now: float | None = 0.0
    while len(order) < 16 and now is not None:
        now = loop._service(now)
    # The first QP filled the idle port (DEPTH_FRAMES); from then on, turn by turn.
    first = order.index(8)
    assert set(order[:first]) == {7}
    turns = order[first:first + 12]
    assert turns == [8, 9, 7] * 4, order


def test_qps_waiting_for_a_full_port_are_not_all_woken_when_it_frees():
    """24 go-back-N QPs on one port (an all-to-all's 16 QPs per peer): each is woken about when
    its turn comes (NicPacer.turn), not all of them at each free slot, which cost two dozen
    polls a frame and a core at 10 Mbit/s; the slots still go round, one frame per QP a turn."""
    import dataclasses

    from endpoints.host.dataloop import DataLoop, Qp
    from endpoints.protocol import wire
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.gobackn import GbnSender
    from endpoints.protocol.nicpacer import NicPacer

    config = dataclasses.replace(TransportConfig(), gbn_window_pkts=1000)  # the port binds
    pacer = NicPacer(1, 10e6, wire.frame_bytes(config.mtu_payload))
    loop = object.__new__(DataLoop)
    loop.trace, loop.service_all, loop.qps = None, True, {}
    order: list[int] = []
    loop._transmit = lambda qp, items: order.extend([qp.qpn] * len(items))  # type: ignore[method-assign]
    polls = 0

    class Counted(GbnSender):
        def poll(self, now: float) -> list[tuple[int, bytes]]:
            nonlocal polls
            polls += 1
            return super().poll(now)

    qps = 24
    for qpn in range(qps):
        core = Counted(qpn, 100 + qpn, 0x1C000, config, 1, pacer=pacer, plane=0)
        core.send_message(b"a" * (40 * config.mtu_payload), 0.0)
        loop.qps[qpn] = Qp(qpn, "h1", 100 + qpn, "roce", core, None, sender=core)  # type: ignore[arg-type]
    now: float | None = 0.0
    while len(order) < 20 * qps and now is not None:
        now = loop._service(now)
    assert polls < 2 * len(order), (polls, len(order))  # everyone woken per slot: 24 or more
    rounds = [order[i:i + qps] for i in range(2, len(order) - qps, qps)]
    assert all(sorted(r) == list(range(qps)) for r in rounds)  # every QP once per round


def test_qps_with_short_messages_keep_the_port_busy():
    """Two dozen QPs, one short packet each (an all-to-all's step at its smallest size): the
    port sends them back to back. A line that counted a full frame per QP ahead woke each QP a
    full frame after the one before, and the port idled half the time."""
    from endpoints.host.dataloop import DataLoop, Qp
    from endpoints.protocol import wire
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.gobackn import GbnSender
    from endpoints.protocol.nicpacer import NicPacer

    config, payload = TransportConfig(), 2048
    pacer = NicPacer(1, 10e6, wire.frame_bytes(config.mtu_payload))
    loop = object.__new__(DataLoop)
    loop.trace, loop.service_all, loop.qps = None, True, {}
    sent_at: list[float] = []
    now: float | None = 0.0
    loop._transmit = lambda qp, items: sent_at.extend([now] * len(items))  # type: ignore[method-assign,list-item]
    qps = 24
    for qpn in range(qps):
        core = GbnSender(qpn, 100 + qpn, 0x1C000, config, 1, pacer=pacer, plane=0)
        core.send_message(b"a" * payload, 0.0)
        loop.qps[qpn] = Qp(qpn, "h1", 100 + qpn, "roce", core, None, sender=core)  # type: ignore[arg-type]
    while len(sent_at) < qps and now is not None:
        now = loop._service(now)
    on_the_wire = qps * wire.frame_bytes(payload) * 8 / 10e6
    assert len(sent_at) == qps and max(sent_at) < on_the_wire  # type: ignore[type-var]
