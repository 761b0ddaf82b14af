"""Lab 4's checker: the student's mark_bad and probe_result, first as the EV set's unit
properties, then in the product's sender over the simulated network while a link is cut and
restored: the cut path is benched within the bound, nothing else is, the transfer goes on at
full rate, and the path comes back after the restore. Last, the same in the real emulation:
the product's link-failure scenario with the student's EV set in every host agent."""

from __future__ import annotations

import random

from endpoints.host.goodput import BIN_S, bin_of
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.events import EvState
from endpoints.protocol.evset import ASSUMED_BAD, GOOD, SKIP, EvInfo
from endpoints.protocol.replaceable import cores
from experiments.api.flows import ev_timeline
from experiments.sim.simnet import Simulation, run_transfer, sim_fabric
from labs.checker import Check, CheckFailed, Context, Lab, fabric
from topologies.model import FabricParams, build, ev_value

CUT = (0.5, 1.0)  # simulated seconds: plane 0's uplink to spine 0 is down
BENCH_WITHIN = 0.100  # s after the cut: the product benches it in about 56 ms (seed 1)
BACK_WITHIN = 0.200  # s after the restore: 3 probes in a row, 5 ms apart, after a lost one times out
RATE_KEPT = 0.8  # goodput while cut over goodput before: the plane's other path takes the share
# What an agent derives from its fabric (2 planes of 10 Mbit/s links; these simulated links
# mark no ECN), as examples/simulated_transfer.py does.
CONFIG = TransportConfig().for_fabric(link_mbps=10.0, planes=2, ecn=False)


def _set(ctx: Context, planes: int, per_plane: int, **kw: object):  # -> LabEvSet
    args: dict[str, object] = dict(active_fraction=0.75, min_active=2, skip_rotations=1,
                                   rng=random.Random(3))
    args.update(kw)
    evs = [EvInfo((p << 16) | i, p) for p in range(planes) for i in range(per_plane)]
    return ctx.module("ev_states").LabEvSet(evs, **args)


def consistent(s, after: str) -> None:
    """The EV set's bookkeeping after any transition: every EV in at most one place (the active
    set or its plane's backups), only usable ones there, a plane never above its active share."""
    seen: dict[int, str] = {}
    places = [("the active set", ev) for ev in s.active]
    places += [(f"plane {p}'s backups", ev) for p in sorted(s.backup) for ev in s.backup[p]]
    for where, ev in places:
        if ev in seen:
            raise CheckFailed(f"after {after}, EV {ev:#x} is in {seen[ev]} and in {where}: an EV "
                              f"is active or a backup, never both, never twice")
        seen[ev] = where
        if s.state[ev] not in (GOOD, SKIP):
            raise CheckFailed(f"after {after}, EV {ev:#x} is {s.state[ev]} but in {where}: a "
                              f"benched EV leaves the active set and the backups")
    for p, evs in s.backup.items():
        wrong = [ev for ev in evs if s.plane[ev] != p]
        if wrong:
            raise CheckFailed(f"after {after}, plane {p}'s backups hold EV {wrong[0]:#x} of plane "
                              f"{s.plane[wrong[0]]}: each plane's backups are its own")
    for p, share in s._plane_active_target.items():
        active = sum(1 for ev in s.active if s.plane[ev] == p)
        if active > share:
            raise CheckFailed(f"after {after}, plane {p} has {active} active EVs, more than its "
                              f"share of {share}: extra GOOD EVs wait among the backups")


def bench_swaps_in_backup(ctx: Context) -> str:
    s = _set(ctx, 4, 8)  # 6 active and 2 backups per plane
    for plane in sorted(s.backup):  # an active EV of every plane fails in turn
        victim = next(e for e in s.active if s.plane[e] == plane)
        spares = set(s.backup[plane])
        what = f"mark_bad({victim:#x}, 1.0) on plane {plane}"
        if s.mark_bad(victim, 1.0) is not True:
            raise CheckFailed(f"{what}, an active EV with backups, returned something else than True")
        if s.state[victim] != ASSUMED_BAD:
            raise CheckFailed(f"after mark_bad the EV is {s.state[victim]}, not ASSUMED_BAD (TODO 3)")
        if victim in s.active:
            raise CheckFailed("the benched EV is still in the active set: packets keep going to it "
                              "(TODO 4)")
        consistent(s, what)
        active = [e for e in s.active if s.plane[e] == plane]
        if len(active) != 6 or not set(active) & spares:
            raise CheckFailed(f"after {what}, plane {plane} has {len(active)} active EVs, "
                              f"{len(set(active) & spares)} of them from its backups: one backup of "
                              f"the same plane steps in, keeping 6 (TODOs 1, 4)")
        if s.bad_since.get(victim) != 1.0:
            raise CheckFailed(f"after {what}, bad_since[{victim:#x}] is {s.bad_since.get(victim)}: "
                              f"keep when it failed (TODO 3)")
        if (victim, GOOD, ASSUMED_BAD) not in s.changes:
            raise CheckFailed("the change is not recorded: set the state with self._set (TODO 3)")
    benched = set(s.bad())
    if benched & {s.next_ev() for _ in range(500)}:
        raise CheckFailed("a benched EV was still picked for packets (TODO 4)")
    backup = s.backup[0][0]
    if not s.mark_bad(backup, 2.0) or s.state[backup] != ASSUMED_BAD or backup in s.backup[0]:
        raise CheckFailed("a backup that fails must be benched and leave the backups (TODO 4)")
    consistent(s, f"mark_bad({backup:#x}, 2.0) on a backup")
    return "a failed EV is benched, a backup of its plane takes its place, it is never used"


def floor(ctx: Context) -> str:
    s = _set(ctx, 1, 4, active_fraction=1.0, min_active=2)
    a, b, c, _ = s.active
    if not (s.mark_bad(a, 0) and s.mark_bad(b, 0)):
        raise CheckFailed("benching 2 of 4 EVs (min_active 2) was refused")
    if s.mark_bad(c, 0) is not False or s.state[c] != GOOD or c not in s.active:
        raise CheckFailed("a third was benched: the floor keeps min_active usable EVs in use "
                          "(mark_bad returns False and leaves it GOOD)")
    s = _set(ctx, 1, 3, active_fraction=0.67, min_active=2)  # 2 active (the floor), 1 backup
    x, _ = s.active
    if not s.mark_bad(x, 1.0) or len(s.usable()) != 2:
        raise CheckFailed("at the floor with a backup ready, the failed EV must still be swapped "
                          "out: the backup keeps the count")
    return "the floor keeps min_active EVs in use, but never instead of a ready backup"


def probes_resurrect(ctx: Context) -> str:
    s = _set(ctx, 2, 4)  # 3 active, 1 backup per plane
    ev = next(e for e in s.active if s.plane[e] == 1)
    s.mark_bad(ev, 0.0)
    for round_ in ("", "benched again, "):
        steps = [(True, False), (False, False), (True, False), (True, False), (True, True)]
        for i, (ok, want) in enumerate(steps):
            got = s.probe_result(ev, ok, 3)
            if got != want:
                seq = ", ".join("ok" if o else "lost" for o, _ in steps[:i + 1])
                raise CheckFailed(f"{round_}after probes {seq} (3 needed in a row) probe_result "
                                  f"returned {got}" + (" (TODO 3 resets the count when it is "
                                                       "benched)" if round_ else ""))
        if s.state[ev] != GOOD:
            raise CheckFailed(f"a resurrected EV is {s.state[ev]}, not GOOD")
        consistent(s, f"{round_}EV {ev:#x} of plane 1 resurrected")
        if ev not in s.backup[1]:
            raise CheckFailed("a resurrected EV of plane 1, whose active share is full again, "
                              "must wait among plane 1's backups (TODO 6)")
        s.mark_bad(ev, 1.0)  # it fails again (as a backup): probed from scratch
    if [c for c in s.changes if c[0] == ev][:2] != [(ev, GOOD, ASSUMED_BAD), (ev, ASSUMED_BAD, GOOD)]:
        raise CheckFailed("the resurrection is not recorded: set the state with self._set")
    s = _set(ctx, 1, 4)  # 3 active and 1 backup: bench two, the plane is one short
    first, second = s.active[0], s.active[1]
    s.mark_bad(first, 1.0)  # the backup steps in
    s.mark_bad(second, 1.0)  # no backup left: the plane runs on 2
    for _ in range(3):
        s.probe_result(second, True, 3)
    if second not in s.active:
        raise CheckFailed("a resurrected EV whose plane is short of active EVs must be active "
                          "again (self._rebalance)")
    consistent(s, "a resurrection into a plane short of active EVs")
    return "3 probe replies in a row bring an EV back, a lost probe starts the count again"


def link_cut(ctx: Context) -> str:
    # Paths like the fabric's between two hosts (experiments/sim/simnet.py), plane 0's uplink to
    # spine 0 down during CUT; the product's sender with the student's EV set
    # (endpoints/protocol/replaceable.py, as the agents use it), 8 messages posted at t=0.
    net = sim_fabric(planes=2, spines=2)
    net.links[("up", 0, 0)].down = [CUT]
    sender_cls, receiver_cls = cores({"evset": ctx.module("ev_states").LabEvSet})
    messages = [random.Random(1000 + i).randbytes(1 << 19) for i in range(8)]
    result = run_transfer(Simulation(1), sender_cls(1, 2, net.evs, CONFIG, 1),
                          receiver_cls(2, 1, net.evs, CONFIG, 1), net.fwd, net.rev, messages, 30.0)
    if [data for _, data in result.completed] != messages:
        raise CheckFailed(f"the transfer delivered {len(result.completed)} of 8 messages "
                          f"intact by t={result.end:.1f} s")

    def mbps(start: float, end: float) -> float:
        got = sum(v for k, v in result.bins.items() if bin_of(start) <= k < bin_of(end))
        return got * 8 / max(end - start, BIN_S) / 1e6

    changes = [e for e in result.sender_events if isinstance(e, EvState)]
    cut_ev = ev_value(0, 0)
    benched = [e for e in changes if e.new == ASSUMED_BAD]
    others = sorted({hex(e.ev) for e in benched if e.ev != cut_ev})
    if others:
        raise CheckFailed(f"EVs on healthy paths were benched: {', '.join(others)}")
    mine = [e.t for e in benched if e.ev == cut_ev]
    if not mine or not CUT[0] <= mine[0] <= CUT[0] + BENCH_WITHIN:
        when = f"at {mine[0]:.3f} s" if mine else "never"
        raise CheckFailed(f"the cut path's EV {cut_ev:#x} was benched {when}; the cut was at "
                          f"{CUT[0]} s (want within {BENCH_WITHIN * 1e3:.0f} ms)")
    back = [e.t for e in changes if e.new == GOOD and e.ev == cut_ev and e.t > CUT[1]]
    if not back or back[0] > CUT[1] + BACK_WITHIN:
        raise CheckFailed(f"EV {cut_ev:#x} was not back within {BACK_WITHIN * 1e3:.0f} ms of the "
                          f"restore at {CUT[1]} s")
    before, during = mbps(0.1, CUT[0]), mbps(mine[0] + 0.05, CUT[1])
    if during < RATE_KEPT * before:
        raise CheckFailed(f"goodput fell from {before:.1f} to {during:.1f} Mbit/s while cut")
    return (f"cut at {CUT[0]} s: EV {cut_ev:#x} benched after {(mine[0] - CUT[0]) * 1e3:.0f} ms, "
            f"back {(back[0] - CUT[1]) * 1e3:.0f} ms after the restore; {before:.1f} Mbit/s "
            f"before, {during:.1f} while cut; all 8 messages intact")


# The emulated cut: the link-failure scenario on the smallest fabric with a spare path per plane
# (h0 -> h1, 2 planes x 2 spines), the transfer's plane-0 uplink cut at FAULT[0] s, restored at
# FAULT[1] s. The solution's EV set (seed 1, 2-core VM, 4 runs on OVS and kernel routers):
# benched 71-80 ms after the cut, back 26-48 ms after the restore, goodput 19.0 Mbit/s while
# cut against 19.2-19.3 before; the skeleton's: never benched. Bounds with room for a
# busy machine: the loss timer and three probe replies, each a few RTTs.
EMULATED = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
DURATION, FAULT = 4.0, (1.5, 3.0)
EMU_BENCH_WITHIN = 0.250  # s after the cut
EMU_BACK_WITHIN = 0.300  # s after the restore


def real_link_cut(ctx: Context) -> str:
    s = fabric.scenario_run(ctx, "link-failure", {"evset": ("ev_states.py", "LabEvSet")},
                            fabric=EMULATED, transports=("mrc",), duration=DURATION,
                            fault_at=FAULT[0], fault_end=FAULT[1])
    t = s["transports"]["mrc"]
    src, dst, qpn, _ = s["traces"]["qps"]["mrc"][0]
    start = s["traces"]["windows"]["mrc"][0]
    cut, restore = (e["t"] for e in s["faults"])  # since the transfer started
    link = t["target"]
    route = next(r for r in build(EMULATED).routes(src, dst) if link in r.links)
    changes = [(at - start, ev, new) for at, ev, _, new in
               ev_timeline(fabric.REPO / s["_out"] / "traces" / f"{src}-trace.jsonl", qpn)]
    others = sorted({hex(ev) for _, ev, new in changes if new == ASSUMED_BAD and ev != route.ev})
    if others:
        fabric.fail(s, f"EVs on healthy paths were benched: {', '.join(others)}")
    benched = [at for at, ev, new in changes if ev == route.ev and new == ASSUMED_BAD]
    if not benched or not cut <= benched[0] <= cut + EMU_BENCH_WITHIN:
        when = f"{(benched[0] - cut) * 1e3:.0f} ms after the cut" if benched else "never"
        fabric.fail(s, f"{link} was cut: its EV {route.ev:#x} was benched {when} (want within "
                       f"{EMU_BENCH_WITHIN * 1e3:.0f} ms of the cut)")
    back = [at for at, ev, new in changes if ev == route.ev and new == GOOD and at > restore]
    if not back or back[0] > restore + EMU_BACK_WITHIN:
        fabric.fail(s, f"EV {route.ev:#x} was not back within {EMU_BACK_WITHIN * 1e3:.0f} ms of "
                       f"restoring {link}")
    before, during = t["goodput_before_mbps"], t["goodput_during_mbps"]
    if during < RATE_KEPT * before:
        fabric.fail(s, f"goodput fell from {before:.1f} to {during:.1f} Mbit/s while {link} was cut")
    if not t["data_ok"]:
        fabric.fail(s, "the receiver did not get every message intact")
    return (f"{link} cut in the emulation: EV {route.ev:#x} benched after "
            f"{(benched[0] - cut) * 1e3:.0f} ms, back {(back[0] - restore) * 1e3:.0f} ms after "
            f"the restore; {before:.1f} Mbit/s before, {during:.1f} while cut; data intact")


LAB = Lab(__file__, "The EV state machine", files=("ev_states.py",), checks=[
    Check("bench-swaps-in-backup", bench_swaps_in_backup,
          "TODOs 1, 3, 4: find a GOOD backup of the EV's own plane, self._set(ev, ASSUMED_BAD) "
          "(and bad_since, probe_ok), then move it out of self.active and the spare in, out of "
          "the backups"),
    Check("floor", floor, "TODO 2: without a spare, keep the EV when len(self.usable()) <= "
          "self.min_active; with a spare, always swap", needs=("bench-swaps-in-backup",)),
    Check("probes-resurrect", probes_resurrect,
          "TODOs 3, 5-6: self.probe_ok[ev] counts successes in a row; at `needed`, self._set(ev, "
          "GOOD), append to self.backup[plane], self._rebalance(plane)"),
    Check("link-cut-simulated", link_cut,
          "the product's sender relies on mark_bad to stop using a dead path and on "
          "probe_result to bring it back: pass the unit checks first",
          needs=("bench-swaps-in-backup", "probes-resurrect")),
    Check("real-link-cut", real_link_cut,
          "the same EV set in every host agent of the emulation: if the simulated check "
          "passes, look at the run's path_state.png and summary.json",
          needs=("bench-swaps-in-backup", "floor", "probes-resurrect", "link-cut-simulated"),
          emulated=True),
])
