"""A receiver's NIC port cut on kernel routers (`mrclab run port-failure --switch linux`): the
receiver's agent sees its port go down, tells the sender in its SACKs, the sender takes every
EV of that plane out at once, and brings the plane back when the port returns."""

import json

import pytest

from tests.conftest import require_backend_or_skip
from tests.integration.helpers import assert_nothing_left
from tests.integration.test_scenarios import _run

pytestmark = pytest.mark.usefixtures("emulation_ready")

# The MRC paper's Fig. 9a goal for a receiver-side NIC port: at most 100 ms without goodput.
STALL_MAX_MS = 100


def _ports_events(out, host):
    lines = (out / "traces" / f"{host}-trace.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == "ports"]


def test_a_receivers_dead_port_costs_mrc_one_planes_share_and_no_stall(tmp_path):
    require_backend_or_skip("linux")
    s, out = _run(tmp_path, "port-failure", "linux", "--transports", "mrc", "--duration", "5",
                  "--fault-at", "2.5", "--fault-end", "3.8")  # faithful first (_run); the link-rate
    # check reads the warm-up to the fault: 2 s of it, as test_scenarios' fault scenarios
    mrc = s["transports"]["mrc"]
    src, dst = mrc["src"], mrc["dst"]
    assert mrc["target"].startswith(f"{dst}-p0l")  # the receiver's plane-0 NIC link
    assert [e["action"] for e in s["faults"]] == ["cut", "restore"]
    assert mrc["stall_ms"] <= STALL_MAX_MS
    # While the port is down: the 3 other planes' share; after: all of it again.
    cap = mrc["capacity_mbps"]
    assert mrc["goodput_during_mbps"] >= 0.8 * mrc["goodput_before_mbps"] * cap["during"] / cap["before"]
    assert mrc["goodput_after_mbps"] >= 0.9 * mrc["goodput_before_mbps"]
    # The receiver learnt it from the kernel, the sender from the receiver's port status.
    local = _ports_events(out, dst)
    remote = _ports_events(out, src)
    assert [e["local"] for e in local] == [1, 0], local
    assert [e["remote"] for e in remote] == [1, 0] and remote[0]["parked"] == [0], remote
    assert_nothing_left()
