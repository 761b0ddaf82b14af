"""`python -m topologies.dataplane build [--force] | check | cflags | attach FOLDER |
pinned FOLDER counters|reset|trim-on|trim-off`.

attach: the switch egress program on the ports a JSON list of PortSpec fields on standard input
names (each with the pid of a process in its namespace), left attached when this process exits,
pinned in FOLDER/bpf (a BPF file system mounted there, so the pins go with the run's folder:
unmounted, then removed with it), the ports' record in FOLDER/dataplane.json. pinned: what a
later process does with them: the counters of every port as JSON, or every port's counters and
virtual queue zeroed, or trimming on or off. What a split fabric's head runs on each server
(topologies/cluster.py, topologies/remote_dataplane.py), one Python start for all its ports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from topologies.dataplane.attach import available
from topologies.dataplane.build import build, cflags


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "build":
        ok, message = build(force="--force" in argv)
        if ok:
            print(f"setup: data plane: {message}")
        else:
            print(f"setup: warning: eBPF programs not built ({message}): no emulation can start "
                  f"(MRC's host encapsulation needs them; the switches would fall back to plain "
                  f"HTB queues)")
        return 0  # setup goes on: everything that needs no emulation still works
    if cmd == "cflags":
        print(" ".join(cflags()))
        return 0
    if cmd == "attach" and len(argv) == 2:
        from topologies.dataplane.attach import attach_ports
        from topologies.dataplane.ports import PortSpec

        folder = Path(argv[1])
        specs = [PortSpec(**item) for item in json.load(sys.stdin)]
        pins = mount_pins(folder)
        dp = attach_ports(specs, pin_root=pins)
        part = folder / "dataplane.json.part"  # whole or absent for a reader
        part.write_text(json.dumps(dp.record()))
        part.replace(folder / "dataplane.json")
        print(f"attached to {len(specs)} ports, pinned in {pins}")
        return 0  # no detach: the pins and the tc filters keep the program and its maps
    if cmd == "pinned" and len(argv) == 3 and argv[2] in PINNED_ACTIONS:
        from topologies.dataplane.attach import DataPlane

        dp = DataPlane.pinned(json.loads((Path(argv[1]) / "dataplane.json").read_text()))
        try:
            if argv[2] == "counters":
                print(json.dumps(dp.counters()))
            elif argv[2] == "reset":
                dp.reset()
            else:
                dp.set_trim(argv[2] == "trim-on")
        finally:
            dp.detach(remove_filters=False)  # closes the maps; the pins stay
        return 0
    if cmd == "check":
        reason = available()
        print("eBPF data plane: " + ("available" if reason is None else f"unavailable: {reason}"))
        return 0 if reason is None else 1
    print("usage: python -m topologies.dataplane {build [--force] | check | cflags | attach FOLDER"
          f" | pinned FOLDER {'|'.join(PINNED_ACTIONS)}}}", file=sys.stderr)
    return 2


PINNED_ACTIONS = ("counters", "reset", "trim-on", "trim-off")
PINS = "bpf"  # the BPF file system in a run's folder on a server


def mount_pins(folder: Path) -> Path:
    """A BPF file system of its own at FOLDER/bpf (mounted once): pins live only on one, and
    this one goes with the folder (`umount`, then the folder removed: its pins with it)."""
    pins = folder / PINS
    pins.mkdir(mode=0o700, exist_ok=True)
    if not pins.is_mount():
        subprocess.run(["mount", "-t", "bpf", "bpf", str(pins)], check=True, capture_output=True)
    return pins


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
