"""`python -m experiments.tools.dataplane_bench`: what each switch backend forwards, measured
through the real emulation, in packet-hops per second.

For each backend (`--switch`, default every one this machine runs) and each shape (16x4 and
64x8 hosts x planes, the start-up bench's fabrics) an emulation starts exactly as a run does:
controller, switches, the HTB + eBPF egress program on every switch port, HTB on every host NIC,
only with links so fast (`LINK_MBPS`) that the shapers cost what they cost per packet but never
limit. Host h0 then sends MRC data frames (4 KB payload, the trimmable class, ECT(0), valid
checksums; IPv6-in-IPv6 as the hosts send them, decapsulated by the receiver's kernel) to the
last host, on every plane at once, sprayed over every spine (16 EVs per path): each packet
crosses leaf, spine, leaf, `HOPS` switch hops. Every shape is measured twice: with every plane
loaded (what a run does, MRC spraying over all of them: the figure runs count on) and with one
plane loaded (`one_plane`: one plane's leaf, spines and leaf only, one 3-switch path per
packet). The two differ where a backend's cost is per plane:
OVS runs one ovs-vswitchd per plane, and eight of them loaded at once share two cores. The
frames are prebuilt in Python and sent by a C program (`build/mrcblast`, AF_PACKET, paced)
because Python could not offer enough; a C sink drains a real UDP socket in the receiver, whose
kernel verifies every checksum.

Counted over a window after a warm-up, from /proc alone: datagrams that crossed every hop
(the receiver's Udp6InDatagrams + Udp6RcvbufErrors), frames the sender's NICs sent, checksum
errors, the forwarding processes' CPU (OVS: every ovs-vswitchd) and the machine's busy cores.
A rate is carried faithfully when at least `FAITHFUL_DELIVERY` of it arrives with no checksum
error; the bench searches the highest such rate (a few windows, doubling then bisecting) and
records it. Results merge into results/bench/dataplane.json:
`{"<backend>": {"16x4": {"packet_hops_per_s": N, ...}, "64x8": {...}}, ...}`.

`--calibrate`: the short form (`CALIBRATE_SHAPE`, every plane loaded, `CALIBRATE_TRIALS` windows),
cached as this machine's forwarding calibration (experiments/analysis/calibration.py,
results/calibration-forwarding-BACKEND.json, with its fingerprint); `--if-stale` keeps a cache
that still fits. Its last line is `{"forwarding_calibration": {...}}` (`null` for `--cached` on a
machine without a usable one): what a split run's head reads from each server over ssh
(topologies/server_calibration.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import struct
import subprocess
import sys
import time
from pathlib import Path

from endpoints.host import netio
from endpoints.protocol import wire
from experiments.analysis import calibration, fidelity
from experiments.outdir import REPO
from experiments.tools.startup_bench import SHAPES as STARTUP_SHAPES
from topologies import files, preflight, runctx, switches
from topologies.emulation import Emulation
from topologies.model import GATEWAY_MAC, Fabric, FabricParams
from topologies.preflight import PreflightError

BLAST = REPO / "build" / "mrcblast"
DEFAULT_OUT = REPO / "results" / "bench" / "dataplane.json"
SHAPES = {name: params for name, (params, _target) in STARTUP_SHAPES.items()}
LINK_MBPS = 100_000  # the model's maximum: shapers on every port, never the limit
PAYLOAD = 4096  # the agents' default mtu_payload
HOPS = 3  # leaf, spine, leaf: the sender and the receiver sit on different leaves
EVS_PER_PATH = 16
FAITHFUL_DELIVERY = 0.99
WARMUP_S, WINDOW_S = 1.0, 3.0
# Between trials: nothing arrived for DRAIN_QUIET_S (at most DRAIN_MAX_S of waiting).
DRAIN_QUIET_S, DRAIN_MAX_S = 0.3, 30.0
TRIALS = 6
START_PPS = 5000  # the first rate tried (delivered packets per second, all planes together)
# The short form: the smallest fabric with two planes loaded at once (kernel routers forward in
# softirq, per packet whatever the fabric's size), six windows from a rate kernel routers carry
# on any VM of the kind (the reference's is ~130k delivered/s): about half a minute.
CALIBRATE_SHAPE = FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=1)
CALIBRATE_TRIALS, CALIBRATE_START_PPS = 6, 20000
# What the head reads back of a forwarding calibration (not its sweep).
CALIBRATION_KEYS = ("packet_hops_per_s", "fabric", "measured_at", "fingerprint", "trials",
                    "machine_busy_cores", "dataplane")


def frames(fabric: Fabric, src: str, dst: str, plane: int) -> bytes:
    """Records <u16 little-endian length><Ethernet frame> for the mrcblast sender: MRC data
    frames from `src` to `dst` on `plane` as the host encapsulation sends them (NIC to NIC
    inside, the path's uSID carrier outside, the inner source as outer source), over every
    spine, several EVs per route."""
    nic = fabric.host(src).nics[plane]
    routes = [r for r in fabric.routes(src, dst) if r.plane == plane]
    mac = bytes.fromhex(GATEWAY_MAC.replace(":", "")) + bytes.fromhex(nic.mac.replace(":", ""))
    out = bytearray()
    for k in range(EVS_PER_PATH):
        route = routes[k % len(routes)]
        ev = (route.ev & ~0xFFFF) | (0xC000 + k)  # distinct source ports, as MRC sprays
        payload = wire.encode_data(wire.OP_DATA_MIDDLE, 0, 7, k, 0, k * PAYLOAD, 1 << 20,
                                   bytes(range(256)) * (PAYLOAD // 256))
        inner = netio.build_packet(route.src_addr.packed, route.dst_addr.packed, ev, payload,
                                   tclass=wire.DATA_TCLASS)
        packet = netio.encapsulate(route.src_addr.packed, route.address.packed, inner)
        frame = mac + b"\x86\xdd" + packet
        out += struct.pack("<H", len(frame)) + frame
    return bytes(out)


def _snmp6(pid: int) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in
                                   Path(f"/proc/{pid}/net/snmp6").read_text().splitlines())}


def _tx_packets(pid: int, ifnames: list[str]) -> int:
    total = 0
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]:
        name, rest = line.split(":", 1)
        if name.strip() in ifnames:
            total += int(rest.split()[9])
    return total


def _ticks(pid: int) -> int:
    with contextlib.suppress(OSError, IndexError):
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    return 0


def _arrived(snmp6: dict[str, int]) -> int:
    """Datagrams that reached the sink's socket, those its full buffer refused included."""
    return snmp6.get("Udp6InDatagrams", 0) + snmp6.get("Udp6RcvbufErrors", 0)


def _machine() -> tuple[int, int]:
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(f[:8]) - f[3] - f[4], sum(f[:8])


class Load:
    """One sender per loaded plane on h0, one sink in the last host, for the whole sweep."""

    def __init__(self, em: Emulation, workdir: Path, planes: int) -> None:
        self.em, self.workdir = em, workdir
        fabric = em.fabric
        self.src, self.dst = fabric.hosts[0].name, fabric.hosts[-1].name
        self.files = []
        for plane in range(planes):
            path = workdir / f"frames-p{plane}.bin"
            path.write_bytes(frames(fabric, self.src, self.dst, plane))
            self.files.append((fabric.host(self.src).nics[plane].ifname, path))
        self.sink = em.popen(self.dst, [str(BLAST), "recv", str(wire.MRC_PORT), "100000",
                                        str(PAYLOAD)], stdout=subprocess.PIPE, text=True)
        assert self.sink.stdout is not None
        self.sink.stdout.readline()  # {"mode": "ready"}

    def drain(self) -> float:
        """Wait until nothing more arrives (what an overloaded trial left queued in the
        switches' socket buffers would otherwise count in the next window): seconds waited."""
        t0 = time.monotonic()
        rx_pid, last = self.em.pid(self.dst), -1
        while time.monotonic() - t0 < DRAIN_MAX_S:
            now = _arrived(_snmp6(rx_pid))
            if now == last:
                break
            last = now
            time.sleep(DRAIN_QUIET_S)
        return time.monotonic() - t0

    def trial(self, pps: float) -> dict:
        """Offer `pps` (the loaded planes together) for a warm-up and a window: what arrived."""
        em, hz = self.em, os.sysconf("SC_CLK_TCK")
        drained = self.drain()
        share = pps / len(self.files)
        senders = [em.popen(self.src, [str(BLAST), "send", ifname, str(path),
                                       str(WARMUP_S + WINDOW_S + 0.5), f"{share:.1f}"],
                            stdout=subprocess.PIPE, text=True) for ifname, path in self.files]
        rx_pid, tx_pid = em.pid(self.dst), em.pid(self.src)
        nics = [ifname for ifname, _ in self.files]
        fwd = em.forwarding_pids()
        time.sleep(WARMUP_S)

        def sample() -> tuple:
            s = _snmp6(rx_pid)
            return (time.monotonic(), _arrived(s), s.get("Udp6InCsumErrors", 0), _tx_packets(tx_pid, nics),
                    sum(_ticks(p) for p in fwd), *_machine())

        a = sample()
        time.sleep(WINDOW_S)
        b = sample()
        for proc in senders:
            proc.communicate(timeout=30)
        dt = b[0] - a[0]
        delivered, offered = b[1] - a[1], b[3] - a[3]
        forwarding = (b[4] - a[4]) / hz / dt
        return {"offered_pps_asked": round(pps), "offered_pps": round(offered / dt),
                "delivered_pps": round(delivered / dt),
                "packet_hops_per_s": round(delivered * HOPS / dt),
                "delivery_ratio": round(delivered / offered, 4) if offered else None,
                "checksum_errors": b[2] - a[2],
                "forwarding_cores": round(forwarding, 3) if fwd else None,
                "machine_busy_cores": round((b[5] - a[5]) / (b[6] - a[6]) * (os.cpu_count() or 1), 2),
                "window_s": round(dt, 2), "drain_s": round(drained, 2)}

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.sink.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.sink.communicate(timeout=10)


def faithful(t: dict) -> bool:
    return t["delivery_ratio"] is not None and t["delivery_ratio"] >= FAITHFUL_DELIVERY \
        and t["checksum_errors"] == 0


def sweep(load: Load, start_pps: float, trials: int = TRIALS) -> tuple[dict | None, list[dict]]:
    """The highest faithfully carried rate: double while faithful, then bisect."""
    lo: dict | None = None
    hi_pps: float | None = None
    pps, tried = start_pps, []
    for _ in range(trials):
        t = load.trial(pps)
        tried.append(t)
        print(json.dumps({"trial": t}), flush=True)
        if faithful(t):
            if lo is None or t["packet_hops_per_s"] > lo["packet_hops_per_s"]:
                lo = t
            pps = pps * 2 if hi_pps is None else (pps + hi_pps) / 2
        else:
            hi_pps = pps
            pps = (lo["offered_pps_asked"] + pps) / 2 if lo else pps / 2
        if lo is not None and hi_pps is not None and hi_pps / lo["offered_pps_asked"] < 1.15:
            break
    return lo, tried


def measure(backend: str, params: FabricParams, workdir: Path, start_pps: float, trials: int,
            one_plane: bool = True) -> dict:
    """Both loads of one shape in one emulation: every plane (the figure), then one plane (not
    with `one_plane` False)."""
    fabric = Fabric(FabricParams(planes=params.planes, leaves=params.leaves, spines=params.spines,
                                 hosts_per_leaf=params.hosts_per_leaf, link_mbps=LINK_MBPS))
    em = Emulation(fabric, workdir, dataplane_mode="ebpf", switch=backend)
    loads: dict[int, tuple[dict | None, list[dict]]] = {}
    with em:
        for planes in (fabric.params.planes, 1) if one_plane else (fabric.params.planes,):
            load = Load(em, workdir, planes)
            try:
                loads[planes] = sweep(load, start_pps, trials)
            finally:
                load.close()
        info = {"switches": em.backend.info(), "dataplane": em.dataplane_info["mode"],
                "setup_seconds": round(em.setup_seconds, 2)}
    (best, tried), (one_best, one_tried) = loads[fabric.params.planes], loads.get(1, (None, []))
    result = dict(best) if best else {"packet_hops_per_s": 0}
    one = dict(one_best) if one_best else {"packet_hops_per_s": 0}
    result.update({"faithful_delivery": FAITHFUL_DELIVERY, "hops": HOPS, "payload": PAYLOAD,
                   "ipv6_in_ipv6": True, "planes_loaded": fabric.params.planes,
                   "fabric": fabric.params.as_dict(), "switch_ports": len(em.switch_port_specs()),
                   "teardown_seconds": round(em.timings.get("teardown", 0.0), 2),
                   "sweep": tried, "one_plane": {**one, "planes_loaded": 1, "sweep": one_tried},
                   **info})
    return result


def main(argv: list[str] | None = None) -> int:
    runctx.interrupts_raise()  # Ctrl-C and SIGTERM tear the emulation down, even as a background job
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switch", default=None, help="comma-separated backends (default: every "
                        "one this machine runs)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--start-pps", type=float, default=START_PPS,
                        help="the first rate offered (frames/s, every plane together)")
    parser.add_argument("--trials", type=int, default=TRIALS, help="windows per shape, at most")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--calibrate", action="store_true", help="the short form, cached as this "
                        "machine's forwarding calibration (results/calibration-forwarding-BACKEND.json)")
    parser.add_argument("--if-stale", action="store_true",
                        help="with --calibrate: only when the cache is stale")
    parser.add_argument("--cached", action="store_true", help="print the cached forwarding "
                        "calibration (null if none fits this machine); measure nothing")
    args = parser.parse_args(argv)
    if args.cached or args.calibrate:
        return calibrate(switches.resolve(args.switch or "linux"), args.cached, args.if_stale)
    try:
        preflight.check_all()
        backends = [b for b in switches.BACKENDS if switches.BACKENDS[b].unavailable() is None] \
            if args.switch is None else [switches.resolve(b) for b in args.switch.split(",")]
        if not backends:
            raise PreflightError(switches.BACKENDS["ovs"].unavailable() or "no switch backend runs here")
        if args.trials < 1 or args.start_pps <= 0:
            raise PreflightError("--trials and --start-pps must be positive")
        unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
        if unknown:
            raise PreflightError(f"unknown shape(s) {unknown}: use {', '.join(SHAPES)}")
        if not os.access(BLAST, os.X_OK):
            raise PreflightError(f"{BLAST.relative_to(REPO)} is missing: run `make setup` "
                                 f"(it compiles experiments/tools/mrcblast.c with clang)")
    except PreflightError as exc:
        print(f"dataplane_bench: error: {exc}", file=sys.stderr)
        return 2
    data = files.read_json(args.out)  # earlier shapes' and backends' results are kept
    load_before = os.getloadavg()
    for backend in backends:
        for shape in args.shapes.split(","):
            with runctx.scratch_dir(f"mrclab-dpbench-{backend}-{shape}-") as workdir:
                result = measure(backend, SHAPES[shape], workdir, args.start_pps, args.trials)
            result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            data.setdefault(backend, {})[shape] = result
            print(json.dumps({backend: {shape: {k: v for k, v in result.items()
                                                if k not in ("sweep", "one_plane")},
                                        "one_plane": {k: v for k, v in result["one_plane"].items()
                                                      if k != "sweep"}}}), flush=True)
            files.write_json(args.out, data)  # each result kept even if a later one fails
    data["software"] = fidelity.software_versions()
    data["machine"] = {"cpus": os.cpu_count(), "arch": platform.machine(),
                       "loadavg_before": [round(x, 2) for x in load_before]}
    files.write_json(args.out, data)
    return 0


def _brief(cal: dict | None) -> str:
    return json.dumps({"forwarding_calibration": None if cal is None else
                       {k: cal.get(k) for k in CALIBRATION_KEYS}})


def calibrate(backend: str, cached_only: bool, if_stale: bool) -> int:
    """`--cached` / `--calibrate`: this machine's forwarding calibration of `backend`, read back
    or measured (and cached); the last line says which figure it is."""
    cal = calibration.load_forwarding(backend)
    if cached_only or (if_stale and cal is not None):
        print(_brief(cal))
        return 0
    try:
        preflight.check_all()
        if not os.access(BLAST, os.X_OK):
            raise PreflightError(f"{BLAST.relative_to(REPO)} is missing: run `make setup`")
    except PreflightError as exc:
        print(f"dataplane_bench: error: {exc}", file=sys.stderr)
        return 2
    with runctx.scratch_dir(f"mrclab-dpcal-{backend}-") as workdir:
        result = measure(backend, CALIBRATE_SHAPE, workdir, CALIBRATE_START_PPS, CALIBRATE_TRIALS,
                         one_plane=False)
    if not result["packet_hops_per_s"]:
        print("dataplane_bench: error: no rate was carried faithfully", file=sys.stderr)
        return 1
    result.update(measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), trials=CALIBRATE_TRIALS,
                  fingerprint=calibration.forwarding_fingerprint(backend))
    files.write_json(calibration.forwarding_path(backend), result)
    print(_brief(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
