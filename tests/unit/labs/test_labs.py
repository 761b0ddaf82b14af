"""Every lab's checker can pass and can fail: on its reference solution every check passes, on
the untouched skeleton exactly the expected checks fail (the rest are skipped behind them or,
for what the skeleton leaves alone, pass). The checks that need the emulation run in
tests/integration/test_labs.py; here they are skipped (--no-emulation). Also: the checker's
command line (bad N, JSON verdict) and the drift test (skeleton + solution = solution; the
solution behaves like the product module it stands for)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labs.checker import gaps
from labs.checker.core import FAIL, PASS, SKIP, find, lab_dirs

ROOT = Path(__file__).resolve().parents[3]
FAKE_RUN = {  # lab 3's checks read a permutation run: this one stands for it (no emulation here)
    "scenario": "permutation", "seed": 1, "switch_backend": "ovs",
    "fabric": {"planes": 1, "leaves": 2, "spines": 3, "hosts_per_leaf": 3, "link_mbps": 10.0},
    "fidelity": {"faithful": True, "problems": []},
    "transports": {
        "roce": {"data_ok": True, "capacity_mbps": 60.0,
                 "flow_goodput_mbps": [9.4, 4.7, 4.6, 9.5, 9.3, 9.4]},
        "spray": {"data_ok": True, "capacity_mbps": 60.0,
                  "flow_goodput_mbps": [8.1, 8.3, 7.9, 8.2, 8.0, 8.4]}}}

# Lab 8's checks read a capture of its incast: a small one kept as test data stands for it
# (cut from a real run of the lab's command, data packets cut to their headers: INSTRUCTORS.md).
LAB8_CAPTURE = ROOT / "tests" / "data" / "lab-08"


def fake_results(folder: Path) -> None:
    """`folder` as the labs' run: lab 3's summary.json and lab 8's capture."""
    (folder / "summary.json").write_text(json.dumps(FAKE_RUN))
    for f in LAB8_CAPTURE.iterdir():
        shutil.copyfile(f, folder / f.name)


def needs_tshark(number: int) -> None:
    """Lab 8's checks run tshark (make setup installs it)."""
    if number == 8:
        from tests.conftest import require_or_skip

        require_or_skip(None if shutil.which("tshark") else "tshark is not installed (make setup)")


# What the untouched skeleton gets from each checker, check by check (pure checks only).
SKELETON = {
    1: {"usid-numbers": FAIL, "segment-lists": SKIP, "carrier-addresses": FAIL, "by-hand": FAIL,
        "datagrams-on-path": SKIP},
    2: {"un-entry": FAIL, "static-routes": FAIL, "every-path-delivers": SKIP, "real-switch": SKIP},
    3: {"run-present": PASS, "run-faithful": PASS, "flow-goodputs": FAIL, "cdf": FAIL,
        "fair-share-and-starved": SKIP, "better-tail": SKIP},
    4: {"bench-swaps-in-backup": FAIL, "floor": SKIP, "probes-resurrect": FAIL,
        "link-cut-simulated": SKIP, "real-link-cut": SKIP},
    5: {"receiver-nacks": FAIL, "sender-reacts": FAIL, "incast-simulated": FAIL, "real-incast": SKIP},
    6: {"proportional-increase": FAIL, "fair-increase": FAIL, "multiplicative-decrease": FAIL,
        "ecn-below-target": PASS, "shared-bottleneck-simulated": FAIL, "real-permutation": SKIP},
    7: {"reports-in-order": FAIL, "follows-the-ports": FAIL, "resend-stranded": SKIP,
        "port-down-simulated": SKIP, "real-port-failure": SKIP},
    8: {"capture-present": PASS, "own-parser": PASS, "mrc-datagrams": FAIL, "bth-fields": FAIL,
        "sack-bitmaps": FAIL, "nack-reasons": FAIL, "filter-trimmed-nacks": FAIL,
        "filter-retransmissions": FAIL, "filter-sack-holes": FAIL},
}
# The checks that need the emulation; with the skeleton they are skipped behind the checks
# they need (`needs`), so CI spends emulation time on the solutions only.
EMULATED = {1: {"datagrams-on-path"}, 2: {"real-switch"}, 4: {"real-link-cut"},
            5: {"real-incast"}, 6: {"real-permutation"}, 7: {"real-port-failure"}}


@pytest.fixture(autouse=True)
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_results(tmp_path)
    monkeypatch.setenv("LAB_RESULTS", str(tmp_path))


def test_every_lab_folder_is_covered() -> None:
    assert set(lab_dirs()) == set(SKELETON)
    for number, names in EMULATED.items():
        assert {c.name for c in find(str(number)).checks if c.emulated} == names


@pytest.mark.parametrize("number", sorted(SKELETON))
def test_solution_passes_every_pure_check(number: int) -> None:
    needs_tshark(number)
    verdicts = find(str(number)).run(solution=True, emulation=False)
    got = {v.name: v.status for v in verdicts}
    want = {name: SKIP if name in EMULATED.get(number, ()) else PASS for name in SKELETON[number]}
    assert got == want, [v for v in verdicts if v.status != want[v.name]]


@pytest.mark.parametrize("number", sorted(SKELETON))
def test_skeleton_fails_the_expected_checks(number: int) -> None:
    needs_tshark(number)
    verdicts = find(str(number)).run(solution=False, emulation=False)
    assert {v.name: v.status for v in verdicts} == SKELETON[number]
    for v in verdicts:
        if v.status == FAIL:  # one friendly line with a hint, never a traceback
            assert v.hint and "\n" not in v.detail and "Traceback" not in v.detail


@pytest.mark.parametrize("number", sorted(SKELETON))
def test_skeleton_is_the_solution_with_gaps(number: int) -> None:
    lab = find(str(number))
    for name in lab.files:
        skeleton = (lab.folder / name).read_text()
        solution = (lab.folder / "solution" / name).read_text()
        bodies = gaps.gaps(solution)
        assert bodies and set(gaps.gaps(skeleton)) == set(bodies), name
        assert gaps.fill(skeleton, bodies) == solution, f"{name}: files differ outside the gaps"
        assert all("TODO" not in body for body in bodies.values())


def test_lab1_solution_is_the_model() -> None:
    from labs.checker.student import load
    from topologies.model import ROLE_HOST, build

    carrier = load(ROOT / "labs/01-paths-usids/solution/carrier.py")
    fabric = build(planes=3, leaves=3, spines=4, hosts_per_leaf=2)
    for sw in fabric.switches:
        assert carrier.usid(sw.role, sw.plane, sw.index) == sw.usid
    for host in fabric.hosts:
        for n in host.nics:
            assert carrier.usid(ROLE_HOST, n.plane, host.index) == n.usid
    for src, dst in fabric.host_pairs():
        for r in fabric.routes(src, dst):
            assert carrier.segment_list(fabric, src, dst, r.plane, r.spine or 0) == r.usids
            assert carrier.carrier(r.usids) == r.address


def test_lab2_solution_is_the_controllers_generator() -> None:
    from controller.tables import srv6_flows
    from labs.checker.student import load
    from topologies.model import build

    mine = load(ROOT / "labs/02-un-switch/solution/un_switch.py")
    for fabric in (build(planes=2, leaves=3, spines=2, hosts_per_leaf=3),
                   build(planes=1, leaves=1, spines=1)):
        for sw in fabric.switches:
            assert mine.srv6_flows(fabric, sw) == srv6_flows(fabric, sw)


# Labs whose solution stands in for a product class: the product's own unit tests run with the
# solution in its place (and must pass), then with the skeleton (and must fail: the replacement
# took effect). (target, lab file:class, product tests)
PRODUCT_TESTS = {
    4: ("endpoints.protocol.evset:EvSet", "labs/04-ev-state-machine/{}ev_states.py:LabEvSet",
        ("tests/unit/endpoints/protocol/test_evset.py",
         "tests/unit/endpoints/protocol/test_transport.py")),
    7: ("endpoints.protocol.portstatus:PortSteering",
        "labs/07-nic-port-dies/{}port_steering.py:LabPortSteering",
        ("tests/unit/endpoints/protocol/test_portstatus.py",)),
}


@pytest.mark.parametrize("number", sorted(PRODUCT_TESTS))
def test_product_tests_pass_with_the_solution_and_fail_with_the_skeleton(number: int) -> None:
    target, source, tests = PRODUCT_TESTS[number]
    for folder, passes in (("solution/", True), ("", False)):
        env = {**os.environ, "LAB_REPLACE": f"{target}={ROOT / source.format(folder)}"}
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "labs.checker.pytest_replace", *tests], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert (res.returncode == 0) == passes, f"{folder or 'skeleton'}: {res.stdout[-3000:]}"


def test_lab5_expected_reactions_are_the_products() -> None:
    """What lab 5 calls MRC's reactions to a trim is what the product's receiver and sender do
    (observed, as tests/unit/endpoints/protocol/test_trim.py does), and the solution decides
    them; with the solution at the override points, the incast runs exactly as with the
    product's own cores."""
    from endpoints.protocol import wire
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.receiver import MrcReceiver
    from endpoints.protocol.replaceable import cores, reaction
    from endpoints.protocol.sender import MrcSender
    from experiments.sim import simclos
    from experiments.sim.simnet import sim_fabric
    from labs.checker.student import load

    check = find("5")
    module = sys.modules["lab_check_05"]
    solution = load(ROOT / "labs/05-trimming-incast/solution/trim_reactions.py")
    evs = sim_fabric(2, 2).evs
    for reason, want in module.EXPECTED.items():
        snd = MrcSender(1, 2, evs, TransportConfig(), 1)
        rcv = MrcReceiver(2, 1, evs, TransportConfig(), 1)
        snd.send_message(b"x" * 8192, 0.0)
        ev, pkt = snd.poll(0.0)[0]
        cut = wire.trimmed(pkt, last_hop=reason == wire.NACK_TRIMMED_LASTHOP)
        assert solution.nack_reason(wire.decode(cut).flags) == reason
        rcv.on_datagram(cut, ev, 0.001)
        nacks = [wire.decode(p) for _, p in rcv.poll(0.001) if p[0] == wire.OP_NACK]
        assert [n.reason for n in nacks] == [reason]
        cwnd = snd.cc.cwnd
        snd.on_datagram(wire.encode_nack(1, nacks[0].psn, reason, ev), evs[0].ev, 0.003)
        resent = [wire.decode(p).psn for _, p in snd.poll(0.003) if p[0] in wire.DATA_OPCODES
                  and wire.decode(p).flags & wire.F_RETRANSMIT]
        seen = {"resend": resent == [nacks[0].psn], "skip_ev": snd.ev_states()[ev] == "SKIP",
                "slow_down": snd.cc.cwnd < cwnd, "bench_ev": snd.ev_states()[ev] == "ASSUMED_BAD"}
        assert seen == want == reaction(solution.on_trim_nack(reason))
    model = simclos.ClosModel(params=module.FABRIC.params)
    pairs = [(src, module.RECEIVER, 0.0, 0.5) for src in module.CROWD[:3]]

    def incast(lab_cores: tuple) -> dict:
        return simclos.run(model, pairs, simclos.config_for(model), seed=1, until=0.6,
                           cores=lab_cores).summary()

    replaced = cores({"trim_nack_reason": solution.nack_reason,
                      "trim_reaction": solution.on_trim_nack})
    assert replaced != (MrcSender, MrcReceiver)
    assert incast((MrcSender, MrcReceiver)) == incast(replaced)
    assert check.title == "Trimming and incast"


def test_lab6_products_nscc_passes_the_labs_simulated_check() -> None:
    """Lab 6 teaches what the product does: its own congestion control passes the lab's
    shared-bottleneck check."""
    from endpoints.protocol.congestion import Nscc

    find("6")
    module = sys.modules["lab_check_06"]

    class ProductAsStudent:
        def module(self, name: str) -> object:
            return type("nscc", (), {"LabNscc": Nscc})

    assert "Jain" in module.shared_bottleneck(ProductAsStudent())


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labs.checker", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_bad_lab_number_is_one_line_and_exit_2() -> None:
    for bad in ("0", "x", ""):
        res = _cli("check", bad)
        assert res.returncode == 2 and res.stdout == ""
        assert len(res.stderr.splitlines()) == 1 and "01-paths-usids" in res.stderr


def test_json_verdict_and_exit_codes(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    res = _cli("check", "2", "--no-emulation", "--json", str(out))
    assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr
    verdict = json.loads(out.read_text())
    assert verdict["passed"] is False and verdict["lab"] == "02-un-switch"
    assert [c["status"] for c in verdict["checks"]] == list(SKELETON[2].values())
    res = _cli("check", "2", "--solution", "--no-emulation")
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "3 of 4 checks pass, 1 skipped"


def test_lab8_solution_reads_what_the_products_cores_send() -> None:
    """Lab 8's parser stands for the product's decoder: on the SACKs and NACKs the product's
    own receiver sends for a transfer with trimmed and lost packets, the solution reads what
    `wire.decode` reads."""
    from endpoints.protocol import wire
    from endpoints.protocol.config import TransportConfig
    from endpoints.protocol.receiver import MrcReceiver
    from endpoints.protocol.sender import MrcSender
    from experiments.sim.simnet import sim_fabric
    from labs.checker.student import load

    parser = load(ROOT / "labs/08-mrc-on-the-wire/solution/mrc_parser.py")
    evs = sim_fabric(2, 2).evs
    snd = MrcSender(1, 2, evs, TransportConfig(), 1)
    rcv = MrcReceiver(2, 1, evs, TransportConfig(), 1)
    snd.send_message(bytes(64 * 4096), 0.0)
    sent = snd.poll(0.0)
    assert len(sent) > 8
    for i, (ev, pkt) in enumerate(sent):
        if i % 5 == 1:
            continue  # lost: a hole in the SACKs' bitmaps
        rcv.on_datagram(wire.trimmed(pkt, last_hop=i % 2 == 0) if i % 7 == 3 else pkt, ev, 0.001)
    replies = [p for _, p in rcv.poll(0.001)]
    kinds = {p[0] for p in replies}
    assert {wire.OP_SACK, wire.OP_NACK} <= kinds, kinds
    for datagram in [p for _, p in sent] + replies:
        pkt = wire.decode(datagram)
        assert tuple(parser.bth(datagram)) == (datagram[0], pkt.qpn, wire.fields(datagram)["psn"])
        if isinstance(pkt, wire.Sack):
            assert parser.sack_received(datagram) == [
                (pkt.base + i) & wire.PSN_MASK for i in range(64) if pkt.bitmap >> i & 1]
        if isinstance(pkt, wire.Nack):
            assert parser.nack_reason(datagram) == wire.NACK_REASON_NAMES[pkt.reason]
