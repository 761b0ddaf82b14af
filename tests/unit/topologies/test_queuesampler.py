"""The queue sampler on this process's own namespace (no root, no emulation): it samples only
while active, at its period, writes one JSON line per sample, and reports what it cost. The
switch ports here are the loopback interface; a fake data plane gives the virtual queues."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from topologies.queuesampler import QueueSampler


class _DataPlane:
    def virtual_queues(self) -> dict[str, int]:
        return {"lo": 4198}


def _em(dataplane=None) -> SimpleNamespace:
    specs = [SimpleNamespace(ifname="lo", netns_pid=None),
             SimpleNamespace(ifname="no-such-if0", netns_pid=None)]  # gone: not sampled
    return SimpleNamespace(switch_port_specs=lambda: specs, fabric=SimpleNamespace(hosts=()),
                           dataplane=dataplane, pid=lambda name: None)


def test_samples_only_while_active_at_its_period(tmp_path):
    with QueueSampler(_em(_DataPlane()), tmp_path, switch_interval=0.02, host_interval=0.01) as qs:
        time.sleep(0.15)  # not active: nothing written
        assert (tmp_path / "switch-queues.jsonl").read_text() == ""
        qs.active.set()
        time.sleep(0.3)
        qs.active.clear()
        time.sleep(0.1)
    lines = [json.loads(x) for x in (tmp_path / "switch-queues.jsonl").read_text().splitlines()]
    assert 3 <= len(lines) <= 17  # 0.3 s at 20 ms: never more, fewer on a busy CPU
    ts = [x["t"] for x in lines]
    assert ts == sorted(ts) and ts[-1] - ts[0] < 0.4
    assert all(set(x["ports"]) == {"lo"} for x in lines)
    qlen, backlog, vq = lines[0]["ports"]["lo"]
    assert qlen >= 0 and backlog >= 0 and vq == 4198
    hosts = [json.loads(x) for x in (tmp_path / "host-queues.jsonl").read_text().splitlines()]
    assert len(hosts) >= len(lines) and all(x["hosts"] == {} for x in hosts)
    cost = qs.cost(0.3)
    assert cost["switch"]["samples"] == len(lines) and cost["host"]["samples"] == len(hosts)
    assert cost["cpu_s"] > 0 and 0 < cost["core_share_pct"] < 50
    assert cost["switch"]["ms_p50"] <= cost["switch"]["ms_p99"]
    assert cost["errors"] == 0


def test_without_a_data_plane_the_virtual_queue_is_null(tmp_path):
    qs = QueueSampler(_em(), tmp_path, switch_interval=0.01).start()
    qs.active.set()
    time.sleep(0.08)
    qs.stop()
    qs.stop()  # idempotent
    first = json.loads((tmp_path / "switch-queues.jsonl").read_text().splitlines()[0])
    assert first["ports"]["lo"][2] is None


def test_host_sampling_can_be_left_to_the_agents(tmp_path):
    qs = QueueSampler(_em(), tmp_path, switch_interval=0.01, host_interval=None).start()
    qs.active.set()
    time.sleep(0.08)
    qs.stop()
    assert (tmp_path / "host-queues.jsonl").read_text() == ""
    assert qs.cost()["host"]["samples"] == 0 and qs.cost()["switch"]["samples"] > 0
