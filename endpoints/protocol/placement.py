"""Where an MRC receiver keeps what it accepts: sans-IO, memory bounded by what really arrived.

A data packet makes a claim: PSN `seq` holds packet `offset // mtu_payload` of message `msn`,
which is `msg_len` bytes long and so starts at PSN `first = seq - offset // mtu_payload` (the
sender numbers packets consecutively across messages). A claim is accepted only if it is
consistent with the sender's packetisation (offset a multiple of `mtu_payload`, the payload
exactly `min(mtu_payload, msg_len - offset)` bytes) and with what is already known:

* every packet of a message agrees on its length and first PSN;
* the next message to complete starts exactly where the last completed one ended (`first`
  of message `next_msn` is `next_first`): this is the one claim that can be proved, and a
  claim it contradicts is forged, whenever it arrived (it is evicted and its PSNs freed);
* a later message starts after the next one's PSNs (and one PSN per message in between).

Nothing is allocated from a header field: chunks are stored as they arrive and joined when a
message completes, and the bytes held in messages other than the next one are capped
(`max_held`; the next one is bounded by its own length). A claim that contradicts another
claim nothing can prove wrong yet, or that would pass the cap, is answered `BUSY`/`FULL`: the
receiver asks the sender to resend it later (RNR) instead of marking it received.

Invariant: every PSN below `rcv_nxt` holds a chunk of a message whose first PSN was proved, so
the cumulative acknowledgement never covers a claim that could still turn out forged.
"""

from __future__ import annotations

PLACED, DUPLICATE, FORGED, BUSY, FULL, LATE = "placed", "duplicate", "forged", "busy", "full", "late"


class _Message:
    __slots__ = ("length", "first", "count", "chunks", "got")

    def __init__(self, length: int, first: int, count: int) -> None:
        self.length, self.first, self.count = length, first, count
        self.chunks: dict[int, bytes] = {}  # packet index -> payload
        self.got = 0  # bytes held

    def join(self) -> bytes:
        return b"".join(self.chunks[i] for i in range(self.count))


class Placement:
    def __init__(self, mtu_payload: int, max_message: int, max_open: int, max_held: int,
                 initial_psn: int = 0) -> None:
        self.mtu, self.max_message, self.max_open, self.max_held = \
            mtu_payload, max_message, max_open, max_held
        self.rcv_nxt = initial_psn  # every PSN below it is received (cumulative ACK)
        self.ooo: dict[int, int] = {}  # PSN at or above rcv_nxt received -> its chunk's msn
        self.next_msn = 0
        self.next_first = initial_psn  # first PSN of message next_msn: proved
        self.open: dict[int, _Message] = {}  # incomplete messages
        self.ahead: dict[int, _Message] = {}  # complete, waiting for the ones before them
        self.held = 0  # payload bytes in `open` and `ahead`
        self.completed: list[tuple[int, bytes]] = []
        self.evicted = 0  # chunks of claims proved forged after they were accepted

    # ----- the one entry point ----------------------------------------------------------------
    def offer(self, seq: int, msn: int, offset: int, msg_len: int, payload: bytes | memoryview) -> str:
        """Place one data packet (PSN `seq`, unwrapped); the verdict says what became of it."""
        mtu, size = self.mtu, len(payload)
        if not 0 < msg_len <= self.max_message or offset % mtu or size != min(mtu, msg_len - offset):
            return FORGED  # not what the sender's packetisation produces
        if msn < self.next_msn:
            return DUPLICATE if seq < self.rcv_nxt else FORGED  # its message is delivered
        if msn >= self.next_msn + self.max_open:
            return LATE
        index = offset // mtu
        first = seq - index
        msg = self.open.get(msn) or self.ahead.get(msn)
        if msg is not None:
            if msg.length != msg_len or msg.first != first:
                # Contradicts the claim held for this message: provably forged for the next
                # message (its claim is proved); otherwise the first claim stands, for now.
                return FORGED if msn == self.next_msn else BUSY
            if index in msg.chunks:
                return DUPLICATE
        elif msn == self.next_msn:
            if first != self.next_first:
                return FORGED
        else:
            verdict = self._fits(msn, first, -(-msg_len // mtu))
            if verdict is not None:
                return verdict
        if seq < self.rcv_nxt:
            return FORGED  # that PSN holds a chunk of a proved message (see the invariant)
        owner = self.ooo.get(seq)
        if owner is not None:
            # The PSN holds another claim's chunk. The next message's claim is proved: the
            # other one is forged. Between unproved claims, the first stands for now.
            if msn != self.next_msn:
                return BUSY
            self._evict(owner)
        if msn != self.next_msn and self.held + size > self.max_held:
            return FULL
        if msg is None:
            msg = self.open[msn] = _Message(msg_len, first, -(-msg_len // mtu))
            if msn == self.next_msn:
                self._prove()
        msg.chunks[index] = bytes(payload)
        msg.got += size
        self.held += size
        self.ooo[seq] = msn
        if len(msg.chunks) == msg.count:
            del self.open[msn]
            self.ahead[msn] = msg
            self._deliver()
        self._advance()
        return PLACED

    # ----- claims -----------------------------------------------------------------------------
    def _fits(self, msn: int, first: int, count: int) -> str | None:
        """A new claim for a later message against the proved next one (FORGED if it overlaps
        it) and the claims held for other messages (BUSY if it overlaps one of them)."""
        nxt = self.open.get(self.next_msn)
        floor = self.next_first + (nxt.count if nxt is not None else 1) + (msn - self.next_msn - 1)
        if first < floor:
            return FORGED
        for other, m in (*self.open.items(), *self.ahead.items()):
            if other == self.next_msn:
                continue
            if (other < msn and m.first + m.count + (msn - other - 1) > first) or \
                    (other > msn and first + count + (other - msn - 1) > m.first):
                return BUSY
        return None

    def _prove(self) -> None:
        """The next message's range is now known exactly: evict every later claim that
        overlaps it, and the next message's own claim if it starts elsewhere."""
        nxt = self.open.get(self.next_msn) or self.ahead.get(self.next_msn)
        if nxt is not None and nxt.first != self.next_first:
            self._evict(self.next_msn)
            nxt = None
        floor = self.next_first + (nxt.count if nxt is not None else 1)
        for msn in [m for m in (*self.open, *self.ahead) if m > self.next_msn]:
            m = self.open.get(msn) or self.ahead[msn]
            if m.first < floor + (msn - self.next_msn - 1):
                self._evict(msn)

    def _evict(self, msn: int) -> None:
        msg = self.open.pop(msn, None) or self.ahead.pop(msn, None)
        if msg is None:
            return
        for index, chunk in msg.chunks.items():
            psn = msg.first + index
            if self.ooo.get(psn) == msn:
                del self.ooo[psn]
            self.held -= len(chunk)
            self.evicted += 1

    # ----- progress ---------------------------------------------------------------------------
    def _deliver(self) -> None:
        while self.next_msn in self.ahead:
            msg = self.ahead.pop(self.next_msn)
            self.held -= msg.got
            self.completed.append((self.next_msn, msg.join()))
            self.next_msn += 1
            self.next_first = msg.first + msg.count
            self._prove()

    def _advance(self) -> None:
        """Move the cumulative ACK over received PSNs of the next message (only proved ones)."""
        ooo, nxt = self.ooo, self.next_msn
        while ooo.get(self.rcv_nxt, -1) == nxt or \
                (self.rcv_nxt in ooo and ooo[self.rcv_nxt] < nxt):
            del ooo[self.rcv_nxt]
            self.rcv_nxt += 1
            nxt = self.next_msn

    def received(self, seq: int) -> bool:
        return seq < self.rcv_nxt or seq in self.ooo
