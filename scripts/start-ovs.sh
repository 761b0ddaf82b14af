#!/usr/bin/env bash
# Start Open vSwitch when it is not running. Works without systemd (containers, CI): ovs-ctl
# starts ovsdb-server and ovs-vswitchd directly, loading the kernel module where one exists;
# where none does, mrclab uses the userspace (netdev) datapath.
#
# Socket buffers first: the userspace datapath sends every packet of every port through one
# AF_PACKET socket, whose send buffer (net.core.wmem_default at the time ovs-vswitchd opens it,
# 208 KB by default) holds every frame still queued in any port's qdisc. With 4 KB frames and a
# few queues building, sendmmsg fails with ENOBUFS and OVS drops the packets without counting
# them anywhere: measured as 40-80 silent losses per incast run. 16 MB keeps that from happening.
set -euo pipefail
WANT_BUF=16777216
restart=""
for key in wmem_default rmem_default wmem_max rmem_max; do
  if [ "$(cat /proc/sys/net/core/$key)" -lt "$WANT_BUF" ]; then
    echo "$WANT_BUF" > /proc/sys/net/core/$key
    [ "${key%_default}" != "$key" ] && restart=1
  fi
done
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
if ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
  if [ -n "$restart" ] && [ ! -e /run/mrclab.lock ]; then
    echo "setup: restarting ovs-vswitchd so its packet socket gets the larger buffers"
    "$OVS_CTL" --no-ovsdb-server restart >/dev/null 2>&1 || "$OVS_CTL" --no-ovsdb-server restart
    ovs-vsctl --timeout=10 show >/dev/null
  fi
  exit 0
fi
echo "setup: starting Open vSwitch"
"$OVS_CTL" --no-ovs-vswitchd start >/dev/null 2>&1 || "$OVS_CTL" --no-ovs-vswitchd start
"$OVS_CTL" --no-ovsdb-server start >/dev/null 2>&1 || "$OVS_CTL" --no-ovsdb-server start
ovs-vsctl --timeout=10 show >/dev/null
