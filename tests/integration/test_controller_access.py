"""The OpenFlow controller is reachable only by the run's own switches (issue 11, item 11): a
local user cannot even reach its socket, and a local root process posing as switch p0l0 gets no
flow table and cannot make the controller withdraw a link with a forged port-down. The impostor
is a few lines of OpenFlow 1.3."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.integration.helpers import assert_nothing_left
from topologies.emulation import Emulation
from topologies.model import build
from topologies.switches.ovs import OF_SOCKET

pytestmark = pytest.mark.usefixtures("emulation_ready")

IMPOSTOR = r'''
import json, socket, struct, sys, time
path, dpid, uplink = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(path)
except PermissionError:
    print(json.dumps({"unreachable": True}))
    sys.exit(0)
closed = False
def send(kind, body=b"", xid=0):
    global closed
    try:
        s.sendall(struct.pack("!BBHI", 4, kind, 8 + len(body), xid) + body)
    except OSError:  # the controller hung up first (a loaded machine's timing): refused all the same
        closed = True
send(0)  # HELLO
seen, buf, deadline, downed = [], b"", time.time() + 4, False
while not closed and time.time() < deadline:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        break
    except OSError:
        closed = True
        break
    if not chunk:
        closed = True
        break
    buf += chunk
    while len(buf) >= 8:
        _, kind, length, xid = struct.unpack("!BBHI", buf[:8])
        if len(buf) < length:
            break
        body, buf = buf[8:length], buf[length:]
        seen.append(kind)
        if kind == 5:  # FEATURES_REQUEST: "I am p0l0"
            send(6, struct.pack("!QIBB2xII", dpid, 0, 254, 0, 0, 0), xid)
        elif kind == 2:  # ECHO_REQUEST
            send(3, body, xid)
        elif kind == 18:  # MULTIPART_REQUEST (port descriptions): none
            send(19, struct.pack("!HH4x", 13, 0), xid)
            if not downed:  # and a forged "uplink down" (PORT_STATUS, reason MODIFY)
                port_desc = struct.pack("!I4x6s2x16sIIIIIIII", uplink, b"\0" * 6, b"fake", 0, 1,
                                        0, 0, 0, 0, 0, 0)
                send(12, struct.pack("!B7x", 2) + port_desc)
                downed = True
print(json.dumps({"seen": seen, "closed": closed}))
'''


def test_a_local_impostor_gets_no_flows_and_cannot_withdraw_a_link(tmp_path):
    fabric = build(planes=1, leaves=2, spines=2, hosts_per_leaf=1, link_mbps=10.0)
    leaf = fabric.leaf(0, 0)
    uplink = fabric.params.hosts_per_leaf + 1  # leaf 0's port towards spine 0
    # The OpenFlow controller is the ovs backend's (topologies/switches/ovs.py).
    with Emulation(fabric, tmp_path, detect_ms=300, switch="ovs") as em:
        argv = ["/usr/bin/python3", "-c", IMPOSTOR, str(OF_SOCKET), str(leaf.dpid), str(uplink)]
        nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 *argv], capture_output=True, text=True, timeout=30, cwd="/")
        assert nobody.returncode == 0, nobody.stderr
        assert json.loads(nobody.stdout) == {"unreachable": True}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/")
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        time.sleep(0.6)  # past detect_ms: a forged port-down would have been acted on
        events = [json.loads(line) for line in em.events_path.read_text().splitlines()]
        status = json.loads(em.status_path.read_text())
    assert 14 not in seen["seen"] and 15 not in seen["seen"], \
        f"the impostor received flow/group mods: {seen}"
    assert seen["closed"], "the controller kept talking to the impostor"
    assert not [e for e in events if e["event"] in ("port_down", "baseline_converged")], events
    assert [e for e in events if e["event"] == "refused_connection"]
    assert status["withdrawn_links"] == []
    assert_nothing_left()
