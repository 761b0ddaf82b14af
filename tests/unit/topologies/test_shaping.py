"""The HTB scripts tc runs: the switch ports' strict-priority control class and data class."""

from __future__ import annotations

from endpoints.protocol.config import TransportConfig
from topologies import shaping


def test_htb_batch_priority_classes():
    batch = shaping.switch_htb_batch(["s1-eth1", "s1-eth2"], 10.0, 50, 3028,
                                     TransportConfig().mtu_payload)
    lines = batch.splitlines()
    assert len(lines) == 12
    assert "qdisc replace dev s1-eth1 root handle 1: htb default 3" in lines
    ctl = next(line for line in lines if "classid 1:2" in line and "s1-eth1" in line)
    dat = next(line for line in lines if "classid 1:3" in line and "s1-eth1" in line)
    assert "parent 1:1" in ctl and "prio 0" in ctl and "rate 10.0mbit" in ctl
    assert "parent 1:1" in dat and "prio 1" in dat and "ceil 10.0mbit" in dat
    assert "qdisc add dev s1-eth1 parent 1:3 handle 13: pfifo limit 50" in lines
    assert shaping.CLASS_CONTROL == 0x10002 and shaping.CLASS_DATA == 0x10003
