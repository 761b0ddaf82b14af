"""Lab 7's checker: the student's reaction to NIC-port status, in the product's own sender.
First its parts on many seeded random cases (which reports to believe, which planes to park and
resume as the masks at both ends change, what to resend), then a whole transfer over the
simulated network while a port at either end is down, last the product's port-failure scenario
in the real emulation (a host's NIC link cut) with the student's steering in every agent."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvBad, EvLoad
from endpoints.protocol.evset import ASSUMED_BAD, EvSet
from endpoints.protocol.portstatus import planes_of
from endpoints.protocol.replaceable import cores
from experiments.analysis import metrics
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric
from labs.checker import Check, CheckFailed, Context, Lab, fabric
from topologies.model import FabricParams, build

PLANES, SPINES = 4, 3
LINK_MBPS = 10.0
# What an agent derives from its fabric (4 planes of 10 Mbit/s links; no ECN on these links).
CONFIG = TransportConfig().for_fabric(link_mbps=LINK_MBPS, planes=PLANES, ecn=False)
TS_MOD = 1 << 32  # the echoed timestamps are 32-bit microseconds: they wrap every 71.6 minutes


def _sender_cls(ctx: Context) -> type:
    """The product's sender with the student's steering in place (as the agents build it)."""
    return cores({"port_steering": ctx.module("port_steering").LabPortSteering})[0]


class _LoggedEvSet(EvSet):
    """The product's EV set, noting the planes parked and unparked (the check reads them)."""
    log: list[tuple[str, int]]

    def park(self, plane: int) -> bool:
        self.log = [*getattr(self, "log", []), ("park", plane)]
        return super().park(plane)

    def unpark(self, plane: int) -> bool:
        self.log = [*getattr(self, "log", []), ("unpark", plane)]
        return super().unpark(plane)


def _sender(ctx: Context, seed: int = 1) -> Any:
    cls = cores({"port_steering": ctx.module("port_steering").LabPortSteering,
                 "evset": _LoggedEvSet})[0]
    return cls(1, 2, sim_fabric(PLANES, SPINES).evs, CONFIG, seed)


def _older(ts: int, than: int) -> bool:
    """`ts` was sent before `than`, on a 32-bit clock that wraps."""
    return (ts - than) % TS_MOD >= TS_MOD // 2


def _where(mask_local: int, mask_remote: int, p: int) -> str:
    ends = [e for e, m in (("at this host", mask_local), ("at the peer", mask_remote)) if m >> p & 1]
    return " and ".join(ends) or "at neither end"


# ----- TODO 1: which reports to believe --------------------------------------------------------
def reports_in_order(ctx: Context) -> str:
    """200 QPs each get 6 reports of the peer's mask, delivered in a random order (different
    reverse paths); half of the QPs' timestamps wrap past 2**32 between reports. The mask must
    be the newest report's among those that arrived."""
    base_cls = _sender_cls(ctx)

    class Recording(base_cls):  # type: ignore[misc, valid-type]
        def _steer(self, now: float) -> None:  # only the mask matters here, not the reaction
            self.steered += 1

    rng = random.Random(7)
    wrapped = 0
    for case in range(200):
        snd = Recording(1, 2, sim_fabric(2, 1).evs, CONFIG, 1)
        snd.steered = 0
        start = TS_MOD - rng.randrange(1, 3_000_000) if case % 2 else rng.randrange(TS_MOD // 2)
        ts, reports = start, []
        for _ in range(6):
            ts = (ts + rng.randrange(1, 1_000_000)) % TS_MOD
            reports.append((rng.randrange(8), ts))
        wrapped += any(b < a for (_, a), (_, b) in zip(reports, reports[1:], strict=False))
        order = rng.sample(range(6), 6)
        known, known_ts, steered = 0, None, 0
        for k in order:
            mask, echo = reports[k]
            if mask == snd.ports.remote:
                continue  # the sender compares before it calls: nothing new
            snd._peer_ports(mask, echo, 0.01 * k)
            if known_ts is None or not _older(echo, known_ts):
                known, previous_ts, known_ts, steered = mask, known_ts, echo, steered + 1
                if snd.ports.remote != mask:
                    raise CheckFailed(
                        f"a report echoing ts {echo} (newer than {previous_ts}, the one that set "
                        f"the mask) said {mask:#05b}, but the mask stayed {snd.ports.remote:#05b}: "
                        f"a newer report must be heard (TODO 1)")
            elif snd.ports.remote != known:
                wrap = (" (the 32-bit timestamps wrapped past 2**32 between them: compare modulo "
                        "2**32)" if echo > known_ts else "")
                raise CheckFailed(
                    f"a report echoing ts {echo}, older than ts {known_ts} of the report that set "
                    f"the mask {known:#05b}, arrived late and changed it to "
                    f"{snd.ports.remote:#05b}: an older report must not undo a newer one{wrap} "
                    f"(TODO 1)")
        if snd.steered != steered:
            raise CheckFailed(f"the reaction (_steer) ran {snd.steered} times for {steered} "
                              f"changes of the peer's mask: call it once per change (TODO 1)")
    return (f"200 QPs, 6 reports each in a random order ({wrapped} across the 2**32 wrap): "
            f"the newest report sets the mask, a late older one never undoes it")


# ----- TODOs 2-3: which planes to park, when to resume ------------------------------------------
def _walk(rng: random.Random, steps: int) -> list[tuple[str, int]]:
    """Random port events (which end, its new down mask), never every plane down at once."""
    out: list[tuple[str, int]] = []
    masks = {"local": 0, "remote": 0}
    while len(out) < steps:
        end = rng.choice(("local", "remote"))
        mask = 0  # every port of that end back, else one plane's port down, sometimes two
        if rng.random() >= 0.3:
            mask = sum(1 << p for p in rng.sample(range(PLANES), rng.choice((1, 1, 2))))
        other = masks["remote" if end == "local" else "local"]
        if mask | other == (1 << PLANES) - 1 or mask == masks[end]:
            continue
        masks[end] = mask
        out.append((end, mask))
    return out


def follows_the_ports(ctx: Context) -> str:
    """60 QPs, 12 port events each (a port at this host or at the peer goes down or comes
    back, one or two planes at a time): after each, the parked planes are exactly those down at
    either end, none of their EVs in use or benched, and with every port up the EV set is as it
    was before."""
    rng = random.Random(11)
    events = 0
    for _ in range(60):
        snd = _sender(ctx)
        evs = snd.evs
        before = {p: sorted(ev for ev in evs.active if evs.plane[ev] == p) for p in range(PLANES)}
        prev_parked: set[int] = set()
        ts = rng.randrange(TS_MOD)
        for step, (end, mask) in enumerate(_walk(rng, 12)):
            now = 0.1 * (step + 1)
            if end == "local":
                snd.set_local_ports(mask, now)
                what = f"this host's ports down {mask:#06b}"
            else:
                ts = (ts + 1000) % TS_MOD  # each report newer than the last
                snd._peer_ports(mask, ts, now)
                what = f"the peer's report of its ports down {mask:#06b}"
            events += 1
            log, evs.log = getattr(evs, "log", []), []
            local, remote = snd.ports.local, snd.ports.remote
            down = set(planes_of(local | remote))
            parked = set(evs.parked)
            at = f"after {what} (down at this host {local:#06b}, at the peer {remote:#06b})"
            benched = [ev for ev, s in evs.state.items() if s == ASSUMED_BAD]
            if benched:
                raise CheckFailed(f"{at}, EV {benched[0]:#x} of plane {evs.plane[benched[0]]} is "
                                  f"ASSUMED_BAD: a dead port is no broken path: park its plane "
                                  f"(evs.park), do not bench its EVs (TODO 2)")
            for p in sorted(down - parked):
                if p in prev_parked or ("unpark", p) in log:
                    raise CheckFailed(f"{at}, plane {p} was unparked while its port is still down "
                                      f"{_where(local, remote, p)} (TODO 3)")
                wrong = sorted(parked - down)
                instead = (f"; plane {wrong[0]} was parked instead: bit p of the mask is plane p"
                           if wrong else "")
                raise CheckFailed(f"{at}, plane {p} is not parked though its port is down "
                                  f"{_where(local, remote, p)}{instead} (TODO 2)")
            for p in sorted(parked - down):
                if p in prev_parked:
                    raise CheckFailed(f"{at}, plane {p} is still parked though its port is up at "
                                      f"both ends again (TODO 3)")
                raise CheckFailed(f"{at}, plane {p} was parked though its port is up at both ends "
                                  f"(TODO 2)")
            in_use = [ev for ev in evs.active if evs.plane[ev] in down]
            if in_use:
                raise CheckFailed(f"{at}, EV {in_use[0]:#x} of plane {evs.plane[in_use[0]]} is "
                                  f"still active (TODO 2)")
            if not down:
                now_active = {p: sorted(ev for ev in evs.active if evs.plane[ev] == p)
                              for p in range(PLANES)}
                if now_active != before:
                    p = next(p for p in range(PLANES) if now_active[p] != before[p])
                    raise CheckFailed(f"{at}, every port is up but plane {p} has "
                                      f"{len(now_active[p])} active EVs, not the {len(before[p])} "
                                      f"it had: evs.unpark brings the plane back as it was (TODO 3)")
            prev_parked = parked
    return (f"{events} port events on 60 QPs: the planes down at either end parked at once, "
            f"none benched, each back with its port, the EV set as it was")


# ----- TODO 4: what to resend --------------------------------------------------------------------
def resend_stranded(ctx: Context) -> str:
    """A window in flight on every plane; the peer's port on plane 1 dies, then this host's on
    plane 2: each time exactly what was in flight on the plane parked then is taken out of
    flight and resent at once, on the planes that work."""
    snd = _sender(ctx)
    plane = {e.ev: e.plane for e in sim_fabric(PLANES, SPINES).evs}
    snd.send_message(bytes(256 * 1024), 0.0)
    sent = snd.poll(0.0)
    last_ts = wire.decode(sent[-1][1]).tsval
    resent_total = 0
    for step, (how, dead) in enumerate((("the peer's", 1), ("this host's", 2))):
        now = 0.001 * (step + 1)
        on_dead = sorted(q.seq for q in snd.outstanding.values() if plane[q.ev] == dead)
        if not on_dead:
            raise CheckFailed(f"checker: nothing in flight on plane {dead}")  # pragma: no cover
        if how == "the peer's":
            snd._peer_ports(1 << dead, last_ts, now)
        else:
            snd.set_local_ports(1 << dead, now)
        what = f"{how} port on plane {dead} died with {len(on_dead)} packets in flight there"
        queued = sorted(q.seq for q in snd.retx_queue)
        missing, extra = sorted(set(on_dead) - set(queued)), sorted(set(queued) - set(on_dead))
        if len(missing) == len(on_dead):
            raise CheckFailed(f"{what}: none was resent at once; waiting for a loss timer stalls "
                              f"the transfer (TODO 4)")
        if missing:
            raise CheckFailed(f"{what}: {len(missing)} of them (PSN {missing[0]} first) were not "
                              f"resent at once (TODO 4)")
        if extra:
            where = plane[next(q.ev for q in snd.retx_queue if q.seq == extra[0])]
            raise CheckFailed(f"{what}: PSN {extra[0]} was resent too, though it was in flight on "
                              f"plane {where}, whose port is up: resend only what was on the "
                              f"plane parked now (TODO 4)")
        still = [s for s in on_dead if s in snd.outstanding]
        if still:
            raise CheckFailed(f"{what}: PSN {still[0]} was resent but is still counted in flight: "
                              f"take it out of self.outstanding (TODO 4)")
        out = [(ev, wire.decode(d)) for ev, d in snd.poll(now)]
        again = [(ev, pkt) for ev, pkt in out if isinstance(pkt, wire.Data) and pkt.flags & wire.F_RETRANSMIT]
        if sorted(pkt.psn for _, pkt in again) != [s & wire.PSN_MASK for s in on_dead] or \
                any(plane[ev] in snd.evs.parked for ev, _ in again):
            raise CheckFailed(f"{what}: the resent packets did not all go out at once on the live "
                              f"planes (TODO 4)")
        resent_total += len(on_dead)
    return (f"{resent_total} packets stranded on two dead planes, each resent at once on the "
            f"live planes, nothing else resent")


# ----- the whole transfer, simulated ----------------------------------------------------------
DEAD, DOWN_AT, UP_AT = 1, 0.5, 1.2  # plane DEAD's port is down from DOWN_AT to UP_AT (s)
# The longest run of empty 10 ms goodput bins from the cut to 0.5 s after the restore. The
# product's steering (seed 1): 0 ms either side (the other planes carry on without a gap); with
# no resend at all, the stranded packets wait for a loss timer: a stall of hundreds of ms.
SIM_STALL_MS = 50.0


def port_down_simulated(ctx: Context) -> str:
    """The product's sender with the student's steering, 40 x 256 KiB over 4 planes x 3 spines
    at 10 Mbit/s; plane 1's port dead from 0.5 s to 1.2 s, once at the receiver (the sender
    learns it from SACKs), once at the sender (its own NIC)."""
    said = []
    for side in ("receiver", "sender"):
        fab = sim_fabric(PLANES, SPINES)
        sim = Simulation(1)
        snd = _sender_cls(ctx)(1, 2, fab.evs, CONFIG, 1)
        rcv = cores({})[1](2, 1, fab.evs, CONFIG, 1)
        for name in (("nic_d", "rnic_d") if side == "receiver" else ("nic_s", "rnic_s")):
            fab.links[(name, DEAD)].down.append((DOWN_AT, UP_AT))
        host = rcv if side == "receiver" else snd
        sim.schedule(DOWN_AT, lambda h=host, c=sim: h.set_local_ports(1 << DEAD, c.now))
        sim.schedule(UP_AT, lambda h=host, c=sim: h.set_local_ports(0, c.now))
        msgs = [random.Random(1).randbytes(256 * 1024)] * 40
        res = run_transfer(sim, snd, rcv, fab.fwd, fab.rev, msgs, 10.0)
        cut = f"with the {side}'s plane-{DEAD} port down from {DOWN_AT} s to {UP_AT} s"
        if [data for _, data in res.completed] != msgs:
            raise CheckFailed(f"{cut}: {len(res.completed)} of 40 messages delivered intact")
        plane = {e.ev: e.plane for e in fab.evs}
        benched = [e for e in res.sender_events if isinstance(e, EvBad) and plane[e.ev] == DEAD]
        if benched:
            raise CheckFailed(f"{cut}: EV {benched[0].ev:#x} of the dead plane was benched at "
                              f"{benched[0].t:.3f} s: the plane was not parked in time")
        settle = 4 * snd.cc.srtt  # the news crosses in a SACK (or is local)
        load = [(e.t - e.interval, e.t, sum(n for ev, n in e.sent.items() if plane[int(ev)] == DEAD))
                for e in res.sender_events if isinstance(e, EvLoad)]
        wasted = sum(n for t0, t1, n in load if t0 >= DOWN_AT + settle and t1 <= UP_AT)
        if wasted:
            raise CheckFailed(f"{cut}: {wasted} data packets were sent on plane {DEAD} while its "
                              f"port was down")
        after = sum(n for t0, _, n in load if t0 >= UP_AT + settle)
        if not after:
            raise CheckFailed(f"{cut}: plane {DEAD} carried nothing after its port came back")
        mbps = metrics.series(res.bins, 0, round(res.end / metrics.BIN_S))
        stall = metrics.longest_stall_ms(mbps, round(DOWN_AT / metrics.BIN_S),
                                         round((UP_AT + 0.5) / metrics.BIN_S))
        if stall > SIM_STALL_MS:
            raise CheckFailed(f"{cut}: the goodput stalled {stall:.0f} ms (want at most "
                              f"{SIM_STALL_MS:.0f})")
        said.append(f"{side}'s port: stall {stall:.0f} ms, plane back with {after} packets")
    return "; ".join(said) + "; all 40 messages intact each time"


# ----- the real emulation: a host's NIC link cut -----------------------------------------------
# The port-failure scenario on the smallest fabric it takes (2 planes x 2 leaves x 2 spines,
# one host per leaf), h0 -> h1, the receiver's
# plane-0 NIC link cut at FAULT[0] s and restored at FAULT[1] s: the sender learns it from the
# receiver's SACKs. The solution (seed 1, 2-core VM): see the README's output. Bounds with room
# for a busy machine: the news takes an RTT or two; a stall would be a loss timer's.
EMULATED = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
DURATION, FAULT = 4.0, (1.5, 3.0)
EMU_STALL_MS = 100.0
EMU_PARK_WITHIN = 0.150  # s after the receiver's agent heard its port go down
# The receiver's kernel tells its agent of the lost carrier only once the leaf's end has closed
# (its qdiscs deactivated, an RCU grace period): 0 ms on one VM, 109-162 ms on another, so the
# sender's parking is timed from that news, and the news itself gets a bound of its own.
EMU_NEWS_WITHIN = 1.0  # s after the cut
EMU_BACK_WITHIN = 0.150  # s after the restore
EMU_EARLY = 0.050  # s: a fault's recorded time may trail the kernel's news


def _trace(path: Path, qpn: int) -> list[dict]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the last line may still be being written
        if rec.get("qpn") == qpn:
            out.append(rec)
    return out


def real_port_failure(ctx: Context) -> str:
    s = fabric.scenario_run(ctx, "port-failure",
                            {"port_steering": ("port_steering.py", "LabPortSteering")},
                            fabric=EMULATED, transports=("mrc",), duration=DURATION,
                            fault_at=FAULT[0], fault_end=FAULT[1])
    t = s["transports"]["mrc"]
    src, dst, qpn, _ = s["traces"]["qps"]["mrc"][0]
    start = s["traces"]["windows"]["mrc"][0]
    cut, restore = (e["t"] for e in s["faults"])  # since the transfer started
    link = t["target"]
    records = _trace(fabric.REPO / s["_out"] / "traces" / f"{src}-trace.jsonl", qpn)
    ports = [(r["t"] - start, r["parked"]) for r in records if r["event"] == "ports"]
    # The fault's times are taken as the command returns: the agents may react a little before.
    parked = [at for at, planes in ports if 0 in planes and at >= cut - EMU_EARLY]
    # When the receiver's agent heard of its own port (its `ports` record: local bit 0 set)
    heard = [r["t"] - start for r in _trace(fabric.REPO / s["_out"] / "traces" / f"{dst}-trace.jsonl", qpn)
             if r["event"] == "ports" and r["local"] & 1 and r["t"] - start >= cut - EMU_EARLY]
    if not heard or heard[0] > cut + EMU_NEWS_WITHIN:
        when = f"{(heard[0] - cut) * 1e3:.0f} ms after the cut" if heard else "never"
        fabric.fail(s, f"{link} was cut: the receiver's agent heard of its port {when} (want within "
                       f"{EMU_NEWS_WITHIN * 1e3:.0f} ms: the kernel's news, not your code)")
    if not parked or parked[0] > heard[0] + EMU_PARK_WITHIN:
        when = f"{(parked[0] - heard[0]) * 1e3:.0f} ms after" if parked else "never, though"
        fabric.fail(s, f"{link} (the receiver's plane-0 port) was cut: the sender parked plane 0 {when} "
                       f"the receiver heard of it (want within {EMU_PARK_WITHIN * 1e3:.0f} ms)")
    back = [at for at, planes in ports if at > parked[0] and 0 not in planes]
    if back and back[0] < restore - EMU_EARLY:
        fabric.fail(s, f"plane 0 was unparked {(restore - back[0]) * 1e3:.0f} ms before {link} was restored")
    if not back or back[0] > restore + EMU_BACK_WITHIN:
        fabric.fail(s, f"plane 0 was not unparked within {EMU_BACK_WITHIN * 1e3:.0f} ms of restoring {link}")
    plane0 = {r.ev for r in build(EMULATED).routes(src, dst) if r.plane == 0}
    used = sum(n for r in records if r["event"] == "ev_load" and r["t"] - start > back[0]
               for ev, n in r["sent"].items() if int(ev) in plane0)
    if not used:
        fabric.fail(s, "plane 0 carried no data after its port came back")
    if t["stall_ms"] > EMU_STALL_MS:
        fabric.fail(s, f"the goodput stalled {t['stall_ms']:.0f} ms around the cut (want at most "
                       f"{EMU_STALL_MS:.0f})")
    if not t["data_ok"]:
        fabric.fail(s, "the receiver did not get every message intact")
    return (f"{link} cut in the emulation: plane 0 parked {(parked[0] - cut) * 1e3:+.0f} ms from "
            f"the cut ({(parked[0] - heard[0]) * 1e3:+.0f} ms from the receiver's news), "
            f"back {(back[0] - restore) * 1e3:+.0f} ms from the restore, {used} packets on it "
            f"since; stall {t['stall_ms']:.0f} ms; data intact")


LAB = Lab(__file__, "A NIC port dies", files=("port_steering.py",), checks=[
    Check("reports-in-order", reports_in_order,
          "TODO 1: return early when echo_ts is older than self._ports_ts, modulo 2**32: "
          "(echo_ts - self._ports_ts) & 0xFFFFFFFF >= 0x80000000 (and only when _ports_ts is set)"),
    Check("follows-the-ports", follows_the_ports,
          "TODOs 2-3: down >> p & 1 is plane p's port down at either end (self.ports.down, both "
          "masks); park each such plane of evs.backup with evs.park(p) (never mark_bad), unpark "
          "each plane of evs.parked whose bit is 0"),
    Check("resend-stranded", resend_stranded,
          "TODO 4: for each packet of self.outstanding whose EV's plane (evs.plane[q.ev]) is in "
          "`gone`: del self.outstanding[q.seq], then self._queue_retx(q, now, \"port_down\")",
          needs=("follows-the-ports",)),
    Check("port-down-simulated", port_down_simulated,
          "the product's sender relies on your steering to keep a dead plane out of use and to "
          "bring it back: pass the checks before this one first (TODOs 1-4)",
          needs=("reports-in-order", "follows-the-ports", "resend-stranded")),
    Check("real-port-failure", real_port_failure,
          "the same steering in every host agent of the emulation: if the simulated check "
          "passes, look at the run's plots and summary.json, then run `sudo make check-lab N=7` "
          "again",
          needs=("reports-in-order", "follows-the-ports", "resend-stranded", "port-down-simulated"),
          emulated=True),
])
