"""Reaching the servers of a split fabric (topologies/cluster.py): ssh as root, with the
ssh_config `MRCLAB_SSH_CONFIG` names if set; a message for a control plane's notify socket
there, its events file read back and merged with the other servers'; and a killed run's
leftovers cleaned over there (what topologies/runctx.py's lock taker calls for every server a
dead run registered)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from topologies import placement
from topologies.dataplane import usid
from topologies.preflight import PreflightError

SSH_CONFIG_ENV = "MRCLAB_SSH_CONFIG"  # an ssh_config for every connection to a server
CHECKOUT = Path(__file__).resolve().parent.parent  # the same path on every server
SERVER_TOOLS = ("mnexec", "sudo", "ip", "tc", "nsenter")


def ssh_options() -> list[str]:
    config = os.environ.get(SSH_CONFIG_ENV)
    return ["-F", config] if config else []


def ssh_command(server_ip: str, remote: str, tty: bool = False) -> list[str]:
    """argv running the shell command `remote` as root on a server."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", *ssh_options(),
            *(["-tt"] if tty else []), f"root@{server_ip}", remote]


def server_run(server_ip: str, remote: str, stdin: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(ssh_command(server_ip, remote), input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def resolve(server: str) -> str:
    """A server's IPv4 address (the cluster edition connects by address)."""
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", server):
        return server
    out = subprocess.run(["getent", "ahostsv4", server], capture_output=True, text=True).stdout.split()
    if not out:
        raise PreflightError(f"--servers: unknown server {server!r} (no IPv4 address for it)")
    return out[0]


def check_servers(p: placement.Placement) -> dict[str, str]:
    """Every server with planes reachable as root over ssh, with what it needs; its address
    by name. One PreflightError line per problem, before anything starts."""
    return survey_servers(p, seg6local=False)[0]


# What a server's kernel said of the seg6local probe: its exit status, then its last line
_SEG6LOCAL = (f"err=$({shlex.join(usid.PROBE_ARGV)} 2>&1 >/dev/null); rc=$?;"
              " echo \"seg6local $rc $(printf '%s\\n' \"$err\" | tail -n 1)\"")


def survey_servers(p: placement.Placement, seg6local: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """`check_servers`'s addresses and, in the same ssh round trip, server -> what its kernel
    said of SRv6 seg6local for each server that refuses it: the probe this machine asks of its
    own kernel (topologies/dataplane/usid.py), asked there (`seg6local` False: not asked)."""
    ips, refused = {}, {}
    for server in p.servers[1:]:
        ip = resolve(server)
        probe = (f"for t in {' '.join(SERVER_TOOLS)}; do command -v $t >/dev/null || echo missing $t; done;"
                 f" test -x {shlex.quote(sys.executable)} || echo missing {shlex.quote(sys.executable)};"
                 f" test -d {shlex.quote(str(CHECKOUT))} || echo missing {shlex.quote(str(CHECKOUT))}")
        if seg6local:
            probe += "; " + _SEG6LOCAL
        try:
            result = server_run(ip, probe, timeout=15)
        except subprocess.TimeoutExpired:
            raise PreflightError(f"--servers: ssh to {server} ({ip}) did not answer within 15 s") from None
        if result.returncode == 255:
            why = (result.stderr.strip().splitlines() or ["refused"])[-1]
            raise PreflightError(f"--servers: cannot ssh to root@{server} ({ip}): {why} "
                                 f"(see docs/cluster.md; {SSH_CONFIG_ENV} names an ssh_config)")
        lines = result.stdout.splitlines()
        missing = [line.split(" ", 1)[1] for line in lines if line.startswith("missing ")]
        if missing:
            raise PreflightError(f"--servers: {server} lacks {', '.join(missing)}: run `make setup` "
                                 f"there, in a checkout at {CHECKOUT}")
        ips[server] = ip
        said = [line.split(" ", 2)[1:] for line in lines if line.startswith("seg6local ")]
        if seg6local:
            if not said or not said[-1][0].isdigit():
                raise PreflightError(f"--servers: {server} gave no answer to the seg6local probe "
                                     f"(its shell said: {result.stdout.strip()[-200:]!r})")
            rc, *last = said[-1]
            why = usid.refusal(int(rc), last[0] if last else "")
            if why is not None:
                refused[server] = why
    return ips, refused


# Sends stdin as one datagram to the Unix socket argv[1]: what Emulation.notify_controller does
# on the head. -I -S: only the standard library, no site start-up (this is on a fault's path).
_NOTIFY = ("import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
           "s.sendto(sys.stdin.buffer.read(), sys.argv[1])")


def notify(server_ip: str, socket_path: str, message: dict) -> str | None:
    """Deliver `message` to the datagram socket `socket_path` on a server (its control plane's
    notify socket), as the same datagram a local one gets. None once delivered, or what failed."""
    command = f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(_NOTIFY)} {shlex.quote(socket_path)}"
    try:
        result = server_run(server_ip, command, stdin=json.dumps(message), timeout=15)
    except subprocess.TimeoutExpired:
        return "no answer within 15 s"
    if result.returncode == 0:
        return None
    return (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1][:300]


def read_text(server_ip: str, path: str, timeout: float = 30) -> str | None:
    """A file on a server, or None when it cannot be read."""
    try:
        result = server_run(server_ip, f"cat {shlex.quote(path)}", timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return result.stdout if result.returncode == 0 else None


def merge_events(by_server: dict[str, str]) -> list[dict]:
    """The servers' control-plane events (each one's events file as text) as one list, each
    tagged with its server, in time order; times as each server recorded them (its monotonic
    clock: the head's own on the one-VM lab). A line cut short by a reader is left out."""
    events = []
    for server, text in by_server.items():
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("t"), (int, float)):
                events.append({**event, "server": server})
    return sorted(events, key=lambda e: e["t"])


def unmount_pins(quoted_folder: str) -> str:
    """Shell words unmounting the BPF file system the eBPF data plane's pins live on in a run's
    folder (`python -m topologies.dataplane attach FOLDER`), if mounted: the folder can then go,
    the pins with it."""
    return f"umount -l {quoted_folder}/bpf 2>/dev/null || true"


def clean_server(address: str, folder: str) -> bool:
    """What a killed run left on a server: its leftovers as `mrclab clean` sees them there,
    and its folder (the data plane's pins with it). True when the server answered."""
    quoted = shlex.quote(folder)
    command = (f"cd {shlex.quote(str(CHECKOUT))} && {shlex.quote(sys.executable)} -c "
               f"'from topologies import runctx; runctx.clean_all()'; {unmount_pins(quoted)}; "
               f"rm -rf {quoted}")
    try:
        return server_run(address, command, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False
