"""The agents' loop: one agent's, or every host's agent in one process (endpoints/host/agent.py).

`python -m endpoints.host.agent --config A.json --config B.json ...`, each settings naming its
host's network namespace (`netns`: /proc/PID/ns/net of a process in it, or /run/netns/NAME):
each agent is made inside it (agent.make_agents), so its sockets, netlink included, belong to
that host, and the sockets its paths open later are opened there too
(`Transmitter.namespace`). Each agent keeps its own control socket, data loop, NIC pacer,
trace and counters; only the waiting is shared.

Why: on a VM, what an agent costs is set by its wake-ups, not its packets. Paced at the link
rate, a host's agent handles one or two datagrams per wake-up, and each wake-up of a Python
process costs tens of microseconds of kernel and hypervisor time plus an interpreter whose
caches the other agents have evicted (docs/experiments.md, "What a run costs"). One process
whose wait covers every host's sockets and timers wakes once for whatever is due across them
all, and stays warm.

The loop: one epoll over every agent's receive socket and control selector; after a wake-up,
an agent is serviced (its QPs' timers and transmissions) only when a datagram or command came
for it, its own earliest deadline passed, or its backlog waits: what its own process would have
done, without the wake-ups of the others. A process with one agent (`--agents per-host`) runs
the same loop over a list of one.
"""

from __future__ import annotations

import select
import time

from endpoints.host.dataloop import DataLoop

IDLE_WAIT_S = 0.05  # the longest wait: a loop with no deadline is still serviced this often
BACKLOG_WAIT_S = 0.0002  # a path whose kernel queue was full is retried this soon


def run(loops: list[DataLoop]) -> None:
    """Run every loop until each one's `running` is false."""
    wait = select.epoll()
    owner: dict[int, tuple[DataLoop, bool]] = {}  # fd -> (its loop, is the receive socket)
    for loop in loops:
        for fd, rx in ((loop.rx.fileno(), True), (loop.selector.fileno(), False)):
            wait.register(fd, select.EPOLLIN)
            owner[fd] = (loop, rx)
    monotonic = time.monotonic
    due_at = dict.fromkeys(loops, 0.0)  # each loop's earliest deadline (0.0: service at once)
    live = list(loops)
    try:
        while live:
            now = monotonic()
            soonest, backlog = float("inf"), False
            for lp in live:  # one pass on every turn: min() over a generator and any() took 4x
                due = due_at[lp]
                if lp._next_host_sample < due:
                    due = lp._next_host_sample
                if due < soonest:
                    soonest = due
                if lp.backlog.queues:
                    backlog = True
            timeout = min(max(soonest - now, 0.0), IDLE_WAIT_S)
            if backlog:
                timeout = min(timeout, BACKLOG_WAIT_S)
            woken: set[DataLoop] = set()
            for fd, _ in wait.poll(timeout):  # rounded up to whole ms, as the single loop's
                loop, rx = owner[fd]
                if rx:
                    now = monotonic()
                    taken = loop._receive(now)
                    loop.rx_wakes += 1
                    loop.rx_dgrams += taken
                else:
                    # A command marks the QP it posted to or changed (`touched`), a port's
                    # change every QP (`service_all`); a question (progress, stats) marks
                    # none: a collective's runner asks every 5 ms, and polling each of an
                    # all-to-all's 96 QPs per host for it was a tenth of the agents' CPU.
                    for key, _ in loop.selector.select(0):
                        key.data(key)
                woken.add(loop)
            for loop in live:
                # Each agent its own reading: the one before it may have spent a while sending
                # (the fabric's forwarding runs inline), and a stale `now` would stamp its
                # packets early, which its peer's echo then counts as path delay.
                now = monotonic()
                deadline = due_at[loop]
                if loop in woken or deadline <= now or loop.backlog.queues:
                    loop.wakes += 1
                    if loop.backlog.queues:
                        loop.backlog.flush()
                    if deadline and now - deadline > loop._loop_lag:  # 0.0: "at once"
                        loop._loop_lag = now - deadline
                    next_deadline = loop._service(now)
                    due_at[loop] = now + IDLE_WAIT_S if next_deadline is None else next_deadline
                if now >= loop._next_host_sample:
                    loop._sample_host(now)
            for loop in [lp for lp in live if not lp.running]:  # shut down (its command)
                live.remove(loop)
                wait.unregister(loop.rx.fileno())
                wait.unregister(loop.selector.fileno())
    finally:
        wait.close()
