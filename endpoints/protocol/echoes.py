"""What a sender really transmitted lately: the (EV, timestamp) pairs an acknowledgement must echo.

Every SACK echoes the EV and timestamp of the data packet that triggered it, every NACK those of
the packet it is about. A sender acts on an acknowledgement only if it echoes a transmission of
its own from the last `keep` seconds (in the spirit of RFC 5961's acceptable ACKs): a datagram
forged off the path would have to guess a 32-bit microsecond timestamp of a packet in flight,
so a forgery can neither complete a message, nor shrink the window, nor feed the RTT estimator.

>>> ring = Echoes(keep=2.0)
>>> ring.sent(0x1C000, 1000, now=0.0)
>>> ring.genuine(0x1C000, 1000), ring.genuine(0x1C000, 1001), ring.genuine(0x2C000, 1000)
(True, False, False)
>>> ring.expire(now=2.5); ring.genuine(0x1C000, 1000)
False
"""

from __future__ import annotations

from collections import deque


class Echoes:
    __slots__ = ("keep", "_count", "_order")

    def __init__(self, keep: float) -> None:
        self.keep = keep  # s a transmission stays acknowledgeable: beyond any queueing delay
        self._count: dict[int, int] = {}  # (ev << 32 | tsval) -> transmissions still kept
        self._order: deque[tuple[float, int]] = deque()  # (sent, key), oldest first

    def sent(self, ev: int, tsval: int, now: float) -> None:
        key = (ev & 0xFFFFFFFF) << 32 | (tsval & 0xFFFFFFFF)
        self._count[key] = self._count.get(key, 0) + 1
        self._order.append((now, key))

    def genuine(self, ev: int, tsval: int) -> bool:
        return ((ev & 0xFFFFFFFF) << 32 | tsval) in self._count

    def expire(self, now: float) -> None:
        """Forget transmissions older than `keep` (call it from the sender's poll)."""
        order, count, horizon = self._order, self._count, now - self.keep
        while order and order[0][0] < horizon:
            _, key = order.popleft()
            left = count[key] - 1
            if left:
                count[key] = left
            else:
                del count[key]

    def __len__(self) -> int:
        return len(self._order)
