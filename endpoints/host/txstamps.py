"""Each datagram's real departure from the host, read back from the kernel.

A host's NIC is an HTB class at the link rate in front of a veth: a frame handed to it may wait
there, and a token bucket releases a burst at once after an idle moment, so no model of the
queue gives the instant a frame starts onto the wire. The kernel does: with SO_TIMESTAMPING's
software transmit stamp, the veth's transmit routine stamps every datagram as HTB hands it over
(`skb_tx_timestamp`), and the stamp comes back on the sending socket's error queue, numbered
by the socket's datagram counter (SOF_TIMESTAMPING_OPT_ID: 0 for the first datagram sent after
it was enabled, then one more per datagram; a send the kernel refuses takes no number) and
without the datagram (OPT_TSONLY). Measured on the 2-core VM: 1-3 us of the sender's CPU per
datagram, stamped, read and parsed (docs/experiments.md, "TX timestamps").

`TxStamps` keeps, per socket, the datagrams sent and not yet stamped (in send order, each with
the caller's token), and `drain` matches the stamps that came back to them: a datagram dropped
before the veth (a full host queue) never gets one and is passed over when a later one's stamp
arrives. The stamps are CLOCK_REALTIME; `drain` returns them on the caller's monotonic clock.
"""

from __future__ import annotations

import collections
import socket
import struct
import time
from typing import Generic, TypeVar

SO_TIMESTAMPING = 37  # SO_TIMESTAMPING_OLD: 64-bit time_t and long, as on x86-64 and arm64
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
FLAGS = (SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID
         | SOF_TIMESTAMPING_OPT_TSONLY)
IPV6_RECVERR = 25  # the error message's control message on an IPv6 socket
SO_EE_ORIGIN_TIMESTAMPING = 4
SCM_TSTAMP_SND = 0  # ee_info: the device took it (the others: SCHED, ACK)
_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err: errno, origin, type, code, pad, info, data
_TIMESPEC = struct.Struct("=qq")  # the first of scm_timestamping's three: the software stamp
ANC_BYTES = 256  # both control messages with room to spare
MAX_PENDING = 4096  # datagrams a socket may wait on stamps for: beyond that the oldest are forgotten

T = TypeVar("T")


def enable(sock: socket.socket) -> None:
    """Ask for `sock`'s datagrams' transmit stamps (OSError where the kernel refuses)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, FLAGS)


def parse(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, float] | None:
    """(datagram number, realtime seconds) from one error-queue message's control messages, or
    None for anything but a transmit stamp (an ICMP error, a scheduling stamp)."""
    stamp = number = None
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            stamp = sec + nsec * 1e-9
        elif level == socket.IPPROTO_IPV6 and kind == IPV6_RECVERR and len(data) >= _ERR.size:
            _errno, origin, _type, _code, _pad, info, ident = _ERR.unpack_from(data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING and info == SCM_TSTAMP_SND:
                number = ident
    return None if stamp is None or number is None or not stamp else (number, stamp)


class TxStamps(Generic[T]):
    """Datagrams sent on stamping sockets, waiting for their departure."""

    def __init__(self) -> None:
        self._sent: dict[socket.socket, int] = {}  # datagrams sent on each since enabled
        self._pending: dict[socket.socket, collections.deque[tuple[int, T | None]]] = {}
        self.stamped = 0  # datagrams matched to their stamp
        self.unstamped = 0  # passed over: no stamp came (dropped before the device), or forgotten

    def sent(self, sock: socket.socket, token: T | None) -> None:
        """`sock` took one more datagram (the kernel numbered it); `token`: what its stamp is
        for (None: a datagram nobody asks about)."""
        number = self._sent.get(sock, 0)
        self._sent[sock] = number + 1
        # Kept even without a token: its stamp comes all the same and must be read, or the
        # socket's error queue fills and the kernel drops the stamps that are asked for.
        queue = self._pending.get(sock)
        if queue is None:
            queue = self._pending[sock] = collections.deque()
        elif len(queue) >= MAX_PENDING:
            queue.popleft()
            self.unstamped += 1
        queue.append((number, token))

    def forget(self, sock: socket.socket) -> None:
        """`sock` is closed."""
        self._sent.pop(sock, None)
        self.unstamped += len(self._pending.pop(sock, ()))

    def __bool__(self) -> bool:
        return bool(self._pending)

    def drain(self) -> list[tuple[T, float]]:
        """Every stamp that came back for a datagram with a token: (token, departure on
        time.monotonic's clock)."""
        out: list[tuple[T, float]] = []
        offset = time.monotonic() - time.time()  # realtime -> monotonic, read now
        for sock, queue in list(self._pending.items()):
            while queue:
                try:
                    _data, anc, _flags, _addr = sock.recvmsg(0, ANC_BYTES, socket.MSG_ERRQUEUE)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break  # an error report (ICMP) that is not a stamp: the next turn reads on
                got = parse(anc)
                if got is None:
                    continue
                number, stamp = got
                while queue and queue[0][0] < number:  # no stamp came for these
                    queue.popleft()
                    self.unstamped += 1
                if queue and queue[0][0] == number:
                    token = queue.popleft()[1]
                    if token is not None:
                        out.append((token, stamp + offset))
                        self.stamped += 1
            if not queue:
                del self._pending[sock]
        return out
