"""What every host gets (pure: the `ip -batch` lines), and the encapsulation map's contents."""

from __future__ import annotations

import ipaddress

from topologies import hostnet
from topologies.dataplane import encap, usid
from topologies.model import build

ENCAP = "encap bpf xmit pinned /sys/fs/bpf/mrclab/1-encap0/prog headroom 40"


def test_host_script_holds_one_address_per_nic_and_decapsulates_at_its_sids():
    f = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    host = f.host("h3")
    lines = hostnet.host_script(host, ENCAP).splitlines()
    addrs = [line for line in lines if line.startswith("addr add")]
    assert addrs == [f"addr add {nic.addr}/128 dev {nic.ifname} nodad" for nic in host.nics]
    for nic in host.nics:
        # The SID is decapsulated, never an address of the NIC.
        assert not any(str(nic.sid) in line for line in addrs)
        decap = [line for line in lines if "End.DT6" in line and f"{nic.sid}/48" in line]
        assert decap == [f"route replace local {nic.sid}/48 encap seg6local action End.DT6 "
                         f"table local count dev lo"]
        # MRC (marked) and the baseline (unmarked) share the route to the plane's NICs, which
        # runs the encapsulation program; encapsulated packets leave by the plane's uSID /36.
        plane_nics = ipaddress.IPv6Network(hostnet.baseline_prefix(nic.plane))
        assert all(h.nics[nic.plane].addr in plane_nics for h in f.hosts)
        assert f"route replace {hostnet.baseline_prefix(nic.plane)} {ENCAP} via fe80::1 " \
               f"dev {nic.ifname}" in lines
        assert f"route replace fcbb:bb00:{(nic.plane + 1) << 12:x}::/36 via fe80::1 " \
               f"dev {nic.ifname}" in lines
        assert f"neigh replace fe80::1 lladdr 02:ff:00:00:00:01 dev {nic.ifname} nud permanent" in lines


def test_encap_map_has_every_path_once_keyed_by_inner_addresses_and_ev():
    f = build(planes=2, leaves=3, spines=2, hosts_per_leaf=2)
    entries = list(encap.path_entries(f))
    hosts = len(f.hosts)
    same_leaf = 3 * 2 * 1  # ordered pairs on one leaf
    cross = hosts * (hosts - 1) - same_leaf
    assert len(entries) == 2 * (same_leaf + cross * 2)  # planes x (1 or spines) paths a pair
    keys = [(src, dst, ev) for src, dst, ev, _ in entries]
    assert len(set(keys)) == len(keys)
    route = f.routes("h0", "h5")[3]
    assert (route.src_addr.packed, route.dst_addr.packed, route.ev, route.address.packed) in entries
    assert route.src_addr == f.host("h0").nics[route.plane].addr
    assert all(len(k) == encap.KEY.size for k in (encap.KEY.pack(s, d, e) for s, d, e in keys[:3]))


def test_without_seg6local_the_nics_decapsulate_in_ebpf_and_nothing_else_changes():
    f = build(planes=2, leaves=2, spines=2, hosts_per_leaf=2)
    host = f.host("h3")
    kernel = hostnet.host_script(host, ENCAP).splitlines()
    ebpf = hostnet.host_script(host, ENCAP, usid.EBPF).splitlines()
    assert ebpf == [line for line in kernel if "seg6local" not in line]
    assert len(kernel) - len(ebpf) == len(host.nics)
    script = hostnet.decap_script([nic.ifname for nic in host.nics]).splitlines()
    for nic in host.nics:
        assert f"qdisc replace dev {nic.ifname} clsact" in script
        assert any(line.startswith(f"filter replace dev {nic.ifname} ingress pref {usid.FILTER_PREF} ")
                   and line.endswith(f"sec {usid.DECAP_SECTION}") for line in script)
