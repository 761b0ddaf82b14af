#!/usr/bin/env bash
# Idempotent set-up: system packages, the venv, the eBPF object. A second run takes seconds.
# (No Open vSwitch service: every emulation runs its own OVS instances, one per plane on large fabrics.)
set -euo pipefail
cd "$(dirname "$0")/.."
# --no-calibration: everything but the calibration below (the targets that run no emulation)
calibrate=1
[ "${1:-}" = "--no-calibration" ] && calibrate=0

if [ "$(id -u)" -ne 0 ]; then
  echo "mrclab: error: setup installs packages: run it as root (sudo make setup)" >&2
  exit 2
fi

# tcpdump: captures (`capture` in the CLI, `mrclab run --capture`); tshark: reading them with the
# MRC dissector (experiments/tools/wireshark/mrc.lua; Lua is built into Debian's libwireshark),
# installed without asking (debconf's "may non-superusers capture?" keeps its default, no: the
# testbed runs as root); iputils-ping: Mininet's pingall (not a dependency of Debian's mininet);
# libtcmalloc-minimal4: the allocator preloaded into every ovs-vswitchd (topologies/switches/ovs.py);
# openssh-server, sudo: a split fabric (docs/cluster.md): Mininet's cluster edition reaches every
# server over ssh and runs its commands with sudo (the tests run a second server on this machine).
APT_PACKAGES="mininet openvswitch-switch iproute2 ethtool nftables python3-venv python3-pip procps tcpdump tshark iputils-ping libtcmalloc-minimal4 openssh-server sudo"
missing=""
for pkg in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  dp_updated=1
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The venv is made from the system Python so that it sees Debian's Mininet package.
SYS_PY=/usr/bin/python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$SYS_PY" -m venv --system-site-packages .venv
fi
stamp=.venv/.mrclab-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  echo "setup: installing Python dependencies"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
  touch "$stamp"
fi

# eBPF programs (topologies/dataplane/): the hosts' MRC encapsulation, which every emulation
# needs, and the switch data plane (ECN marking, trimming, priority class), without which the
# switches keep plain HTB queues. Not in APT_PACKAGES: setup still succeeds without them, and an
# emulation then says what is missing. Objects are rebuilt only when a source or the wire
# constants change.
for pkg in clang llvm libbpf-dev bpftool; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
  echo "setup: installing $pkg (eBPF data plane)"
  [ -n "${dp_updated:-}" ] || { apt-get update -qq || true; dp_updated=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null \
    || echo "setup: warning: $pkg is not installable here"
done
.venv/bin/python -m topologies.dataplane build || echo "setup: warning: data plane build step failed: plain HTB queues"
# The data-plane benchmark's load generator (experiments/tools/dataplane_bench.py), with the
# same clang.
if [ ! -x build/mrcblast ] || [ experiments/tools/mrcblast.c -nt build/mrcblast ]; then
  mkdir -p build
  clang -O2 -Wall -o build/mrcblast experiments/tools/mrcblast.c \
    || echo "setup: warning: build/mrcblast not built: no data-plane benchmark"
fi

# `mrclab` on the PATH, as README writes every command: /usr/local/bin/mrclab runs this checkout.
scripts/install-command.sh

# This machine's own figures for what a run costs (experiments/analysis/calibration.py), one per
# switch backend it runs: measured once, again only when the machine or the code that sets the
# cost changes (about a minute each: two or three permutation runs, the fastest 20 s long to read
# its standing queues, and an idle reading).
# Without one, runs count on the committed figures.
[ "$calibrate" = 1 ] && for backend in $(.venv/bin/python -c 'from topologies import switches
print(" ".join(n for n in switches.FASTEST_FIRST if switches.BACKENDS[n].unavailable() is None))'); do
  .venv/bin/python -m experiments.tools.cost_bench --calibrate --if-stale --switch "$backend" \
    || echo "setup: warning: no calibration of the $backend switches: their runs count on the committed figures"
done

echo "setup: ok ($(.venv/bin/python -c 'import topologies.preflight as p; print("OVS datapath:", p.choose_datapath())'))"
