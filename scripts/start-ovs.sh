#!/usr/bin/env bash
# Start Open vSwitch when it is not running. Works without systemd (containers, CI): ovs-ctl
# starts ovsdb-server and ovs-vswitchd directly, loading the kernel module where one exists;
# where none does, mrclab uses the userspace (netdev) datapath.
set -euo pipefail
if ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
  exit 0
fi
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
echo "setup: starting Open vSwitch"
"$OVS_CTL" --no-ovs-vswitchd start >/dev/null 2>&1 || "$OVS_CTL" --no-ovs-vswitchd start
"$OVS_CTL" --no-ovsdb-server start >/dev/null 2>&1 || "$OVS_CTL" --no-ovsdb-server start
ovs-vsctl --timeout=10 show >/dev/null
