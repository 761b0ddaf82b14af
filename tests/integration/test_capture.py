"""Packets Wireshark can read: `mrclab run --capture` keeps a pcap of an MRC transfer through a
link cut, tshark (Debian's) with the shipped dissector decodes every frame on UDP 4791 without a
malformed mark or an expert warning or error, Wireshark's own InfiniBand dissector shows each
BTH's opcode, QP and PSN, and every frame's MRC fields are what the agents logged for it
(the agents' packet log, `packet` records in their traces): nothing captured that was not
logged, nothing logged that was not captured (what counts as a failure: tests/captures.py)."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from experiments.tools import dissector
from tests.captures import compare_with_log
from tests.conftest import require_or_skip
from tests.integration.helpers import REPO, assert_nothing_left
from topologies.model import Fabric, FabricParams


def test_capture_of_a_transfer_through_a_cut_reads_as_the_agents_sent_it(tmp_path, switch_backend):
    require_or_skip(None if shutil.which("tshark") else "tshark is not installed (make setup)")
    out = tmp_path / "lf"
    argv = [sys.executable, "-m", "experiments.cli", "run", "link-failure", "--transports", "mrc",
            "--duration", "2.5", "--fault-at", "0.8", "--fault-end", "1.6", "--capture", "h0,h1",
            "--switch", switch_backend, "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["capture"] == ["h0", "h1"] and summary["transports"]["mrc"]["data_ok"]
    assert [e["action"] for e in summary["faults"]][:1] == ["cut"]
    fabric = Fabric(FabricParams.from_dict(summary["fabric"]))
    # The data frames the host's NICs carry in the run at the rate it ran at (the scenario's, or
    # less on a loaded machine); each capture holds them or their SACKs, and probes, so at least
    # half as many packets (at 20 Mbit/s over a thousand; at 1 Mbit/s, three times as many).
    carried = fabric.params.planes * fabric.params.link_mbps * 1e6 / 8 \
        / wire.frame_bytes(TransportConfig().mtu_payload) * 2.5
    kinds: collections.Counter[str] = collections.Counter()
    for me, peer in (("h0", "h1"), ("h1", "h0")):
        assert summary["captures"][me]["packets"] > 0.5 * carried
        records = [r for r in map(json.loads, (out / "traces" / f"{me}-trace.jsonl").read_text().splitlines())
                   if r["event"] == "packet"]
        assert records and not any(r.get("log_full") for r in records), "the log must hold the run"
        assert not any(r["hdr"].get("malformed") for r in records)
        frames = dissector.read(out / f"{me}.pcap", display_filter=f"udp.dstport == {wire.MRC_PORT}")
        matched, problems = compare_with_log(frames, records, fabric, me, peer)
        assert problems == [], f"{me}: {len(problems)} problems, first: {problems[:8]}"
        assert matched == len(frames) == len(records)
        for f in frames:
            flags = int(f.values("mrc.flags")[0], 0)
            kinds[f"{me} {f.values('mrc.opcode')[0]}{' retx' if flags & wire.F_RETRANSMIT else ''}"] += 1
    # The transfer and the cut: data out of h0 and into h1, SACKs back, probes of the cut path,
    # retransmissions of what the cut swallowed (each with the dissector's expert note).
    for want in ("h0 0xe1", "h1 0xe1", "h0 0xf1", "h1 0xf1", "h0 0xf3", "h0 0xe1 retx"):
        assert kinds[want] > 0, (want, kinds)
    print(dict(kinds))
    assert_nothing_left()
