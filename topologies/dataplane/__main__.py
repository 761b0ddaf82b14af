"""`python -m topologies.dataplane build [--force] | check | cflags`."""

from __future__ import annotations

import sys

from topologies.dataplane.attach import available
from topologies.dataplane.build import build, cflags


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "build":
        ok, message = build(force="--force" in argv)
        if ok:
            print(f"setup: data plane: {message}")
        else:
            print(f"setup: warning: eBPF data plane not built ({message}): the emulation falls "
                  f"back to plain HTB queues (no ECN marking, no trimming)")
        return 0  # optional component: setup goes on either way
    if cmd == "cflags":
        print(" ".join(cflags()))
        return 0
    if cmd == "check":
        reason = available()
        print("eBPF data plane: " + ("available" if reason is None else f"unavailable: {reason}"))
        return 0 if reason is None else 1
    print("usage: python -m topologies.dataplane {build [--force] | check | cflags}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
