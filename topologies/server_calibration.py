"""Each server's own forwarding figure for a split run's `--link-mbps auto` (docs/cluster.md).

A server of a split fabric carries switches only, so what bounds it is what its kernel routers
forward. That is measured on the server itself, by the data-plane benchmark's short form
(`python -m experiments.tools.dataplane_bench --calibrate`, run there over ssh from the same
checkout, as the head's own calibration is run there by `make setup`) and cached there with that
server's fingerprint (its CPU, cores, kernel, code): the head only reads it back
(`--cached`), and has a server without a usable one calibrated once. A server that cannot be
calibrated leaves its planes on the head's figure, with a warning naming it. The arithmetic is
experiments/analysis/capacity.py's (`server_bounds`); this module only asks the servers.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from topologies import placement
from topologies.servers import CHECKOUT, check_servers, server_run

CACHED_TIMEOUT_S = 30  # reading the cache back: one Python start over there
# Measuring: an emulation brought up and down plus CALIBRATE_TRIALS windows of ~5 s each.
CALIBRATE_TIMEOUT_S = 240
KEY = "forwarding_calibration"  # the bench's last line: {KEY: {...} | null}


def _bench(ip: str, flag: str, backend: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """(the server's calibration or None, why not) from the bench run there with `flag`."""
    command = (f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -m "
               f"experiments.tools.dataplane_bench {flag} --switch {shlex.quote(backend)}")
    try:
        result = server_run(ip, command, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout:.0f} s"
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    try:
        cal = json.loads(lines[-1])[KEY] if lines else None
    except (ValueError, KeyError, TypeError):
        cal = None
    if isinstance(cal, dict) and cal.get("packet_hops_per_s"):
        return cal, ""
    said = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
    return None, "none cached" if result.returncode == 0 else said[:200]


def forwarding(p: placement.Placement, backend: str,
               say: Callable[[str], None]) -> dict[str, dict[str, Any] | None]:
    """Every server with planes -> its forwarding calibration ({"packet_hops_per_s", "fabric",
    "measured_at", "fingerprint", ...} plus "calibrated_now"), or None where it has none and
    could not make one (said in a warning). Servers that cannot be reached raise
    PreflightError (one line), as the run itself would."""
    ips = check_servers(p)
    out: dict[str, dict[str, Any] | None] = {}
    for server in p.servers[1:]:
        if not p.planes_on(server):
            continue
        cal, _ = _bench(ips[server], "--cached", backend, CACHED_TIMEOUT_S)
        if cal is not None:
            out[server] = {**cal, "calibrated_now": False}
            continue
        say(f"{server} has no forwarding calibration of its {backend} switches: measuring it "
            f"there once (about half a minute; cached there)")
        cal, why = _bench(ips[server], "--calibrate --if-stale", backend, CALIBRATE_TIMEOUT_S)
        if cal is None:
            say(f"warning: {server}: its forwarding calibration failed ({why}): its planes "
                f"count on the head's figure")
        out[server] = None if cal is None else {**cal, "calibrated_now": True}
    return out


def figures(p: placement.Placement, cals: dict[str, dict[str, Any] | None],
            head: Callable[[int], int]) -> dict[str, dict[str, Any]]:
    """What capacity.server_bounds takes: per server with planes, its planes and figure, from
    its calibration, or `head(planes)` (the head's figure for that many planes) without one."""
    out = {}
    for server, cal in cals.items():
        planes = p.planes_on(server)
        if cal is not None:
            out[server] = {"planes": planes, "packet_hops_per_s": int(cal["packet_hops_per_s"]),
                           "source": "calibrated",
                           "calibration": {k: cal.get(k) for k in ("fabric", "measured_at",
                                                                   "fingerprint", "calibrated_now")}}
        else:
            out[server] = {"planes": planes, "packet_hops_per_s": head(len(planes)), "source": "head"}
    return out
