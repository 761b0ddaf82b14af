"""`mrclab check-fabric`: prove every source-routed path, and that a cut takes out exactly the
paths through it.

One process opens a UDP receiver inside every host's namespace (setns), sends one probe along
every path of every (sampled) host pair, cuts a T0-T1 link, checks that exactly the paths
crossing it stop delivering, restores it and checks that all deliver again. Probes lost for no
reason are retried, so only a path that fails every try counts as lost.

Each probe leaves its host exactly as an agent's MRC datagram does (netio.open_path_socket: NIC
to NIC, marked with the path's EV, encapsulated by the host to the path's carrier, decapsulated
by the receiving host), so the host encapsulation is proven on every path along with the
switches. A probe's socket is opened, used once and closed: a large fabric has more paths
than a process may hold sockets.
"""

from __future__ import annotations

import errno
import random
import selectors
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from endpoints.host import netio
from topologies import netns, runctx
from topologies.cluster import make_emulation
from topologies.emulation import Emulation
from topologies.model import Fabric, FabricError, Route

PROBE_PORT = 4792  # not the MRC port: agents never see probes
PROBE = struct.Struct("!4sBI")  # magic, round, probe id: a late probe never counts twice
MAGIC = b"MRCP"
BATCH = 64  # probes sent between receiver drains
RATE_PPS = 8000  # OVS-netdev forwards every hop in one thread; faster probing overruns it
RETRIES = 3


@dataclass
class Probe:
    path: Route  # sent as its EV (`path.ev`), which picks its carrier at the sending host


class Prober:
    def __init__(self, em: Emulation, probes: list[Probe]) -> None:
        self.em = em
        self.probes = probes
        self.selector = selectors.DefaultSelector()
        self.send_errors: dict[str, int] = {}  # errno name -> probes the kernel refused
        for host in em.fabric.hosts:
            with netns.inside(em.pid(host.name)):
                sock = netio.open_receiver(PROBE_PORT)
            self.selector.register(sock, selectors.EVENT_READ)

    def _send(self, ident: int, tag: int) -> None:
        path = self.probes[ident].path
        try:
            with netns.inside(self.em.pid(path.src)):
                sock = netio.open_path_socket(path.src_addr.packed, path.dst_addr.packed, path.ev,
                                              dport=PROBE_PORT, mark=path.ev)
            try:
                sock.send(PROBE.pack(MAGIC, tag, ident))
            finally:
                sock.close()
        except OSError as exc:  # counted; the probe is retried like a lost one
            name = errno.errorcode.get(exc.errno or 0, str(exc))
            self.send_errors[name] = self.send_errors.get(name, 0) + 1

    def _drain(self, got: set[int], wait: float, tag: int) -> None:
        deadline = time.monotonic() + wait
        while True:
            timeout = deadline - time.monotonic()
            events = self.selector.select(max(timeout, 0))
            if not events and timeout <= 0:
                return
            for key, _ in events:
                sock = key.fileobj
                while True:
                    try:
                        data = sock.recv(64)  # type: ignore[union-attr]
                    except BlockingIOError:
                        break
                    if len(data) == PROBE.size:
                        magic, round_tag, ident = PROBE.unpack(data)
                        if magic == MAGIC and round_tag == tag:
                            got.add(ident)

    def round(self, tag: int) -> set[int]:
        """Send every probe tagged `tag`, retrying the missing; return the ids delivered."""
        pending = list(range(len(self.probes)))
        got: set[int] = set()
        for _ in range(RETRIES):
            started = time.monotonic()
            for start in range(0, len(pending), BATCH):
                for ident in pending[start:start + BATCH]:
                    self._send(ident, tag)
                # Pace to RATE_PPS, draining receivers meanwhile.
                self._drain(got, started + (start + BATCH) / RATE_PPS - time.monotonic(), tag)
            self._drain(got, 0.3, tag)
            pending = [i for i in pending if i not in got]
            if not pending:
                break
        return got

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self.selector.close()


def choose_pairs(fabric: Fabric, sample: int | None, seed: int) -> list[tuple[str, str]]:
    pairs = list(fabric.host_pairs())
    if sample is None or sample >= len(pairs):
        return pairs
    if sample < 1:
        raise FabricError(f"--sample-pairs must be 1 or more, got {sample}")
    return random.Random(seed).sample(pairs, sample)


def default_cut(fabric: Fabric, pairs: list[tuple[str, str]]) -> str:
    """A T0-T1 link that some probed path crosses (the first cross-leaf pair's plane-0 uplink)."""
    for src, dst in pairs:
        for path in fabric.routes(src, dst):
            if path.spine is not None:
                return path.links[1]
    raise FabricError("no probed pair crosses a T0-T1 link: use a fabric with 2+ leaves")


def check_fabric(fabric: Fabric, workdir: Path | None = None, sample_pairs: int | None = None,
                 seed: int = 1, cut: str | None = None, datapath: str = "auto",
                 switch: str = "auto", servers: tuple[str, ...] | None = None) -> dict:
    """Probe every path of `fabric` (or `sample_pairs` host pairs), cut a link, probe, restore,
    probe. `workdir`: where the emulation keeps its files (a fresh private one by default)."""
    if workdir is None:
        with runctx.scratch_dir("mrclab-check-fabric-") as scratch:
            return check_fabric(fabric, scratch, sample_pairs, seed, cut, datapath, switch, servers)
    pairs = choose_pairs(fabric, sample_pairs, seed)
    cut_link = cut or default_cut(fabric, pairs)
    if fabric.link(cut_link).kind != "fabric":
        raise FabricError(f"{cut_link} is a host link: check-fabric cuts a T0-T1 link like p0l0-p0s0")
    probes: list[Probe] = []
    for src, dst in pairs:
        probes += [Probe(path) for path in fabric.routes(src, dst)]
    expected_lost = {i for i, p in enumerate(probes) if cut_link in p.path.links}
    result: dict = {"hosts": len(fabric.hosts), "switches": len(fabric.switches),
                    "links": len(fabric.links), "pairs": len(pairs), "paths_total": len(probes),
                    "cut_link": cut_link, **{f"fabric_{k}": v for k, v in fabric.params.as_dict().items()}}
    with make_emulation(fabric, workdir, servers, datapath=datapath, switch=switch) as em:
        result["setup_seconds"] = round(em.setup_seconds, 2)
        result["datapath"] = em.datapath
        result.update(em.switch_info())
        prober = Prober(em, probes)
        try:
            t0 = time.monotonic()
            delivered = prober.round(1)
            em.set_link(cut_link, up=False)
            during = prober.round(2)
            em.set_link(cut_link, up=True)
            result["restore_wait_seconds"] = round(em.wait_link_state(cut_link, up=True), 3)
            restored = prober.round(3)
            result["probe_seconds"] = round(time.monotonic() - t0, 2)
            send_errors = prober.send_errors
        finally:
            prober.close()
    result["teardown_seconds"] = round(em.timings.get("teardown", 0.0), 2)
    result["timings"] = {k: round(v, 2) for k, v in em.timings.items()}
    lost = set(range(len(probes))) - during
    result.update({
        "paths_delivered": len(delivered),
        "paths_expected_lost": len(expected_lost),
        "paths_lost": len(lost),
        "paths_lost_unexpected": len(lost - expected_lost),
        "paths_survived_cut": len(expected_lost - lost),
        "paths_restored": len(restored),
        "probe_send_errors": send_errors,
    })
    result["ok"] = (len(delivered) == len(probes) and lost == expected_lost
                    and len(restored) == len(probes))
    return result
