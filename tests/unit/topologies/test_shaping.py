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


def test_host_nics_get_the_same_control_class_with_a_deep_data_fifo():
    lines = shaping.host_htb_batch(["h0-eth0"], 10.0, shaping.HOST_QUEUE_PACKETS,
                                   TransportConfig().mtu_payload).splitlines()
    assert "qdisc replace dev h0-eth0 root handle 1: htb default 3" in lines
    assert any("classid 1:2" in line and "prio 0" in line for line in lines)
    assert f"qdisc add dev h0-eth0 parent 1:3 handle 13: pfifo limit {shaping.HOST_QUEUE_PACKETS}" in lines
