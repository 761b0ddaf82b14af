"""A second "server" on this one machine, for trying and testing a split fabric
(`--servers head,ADDR`, topologies/cluster.py) without a second VM.

The server is a network namespace reached from this one over a veth at a private address, with
an sshd of its own that lets root in with a key generated for it into a private folder. It runs
in its own PID namespace and mount namespace too (its own /proc, /sys, BPF file system,
/run/mrclab and /run/netns), so that what the head does to it has to go through ssh, as to a
real machine: a PID of the server means nothing on the head, and its run lock, BPF pins and
leftovers are its own. The file system is otherwise shared: the same checkout and Mininet are
there, as `make setup` puts them on every real server.

    python -m topologies.cluster_lab up      # prints the server's address and the ssh config
    python -m topologies.cluster_lab down      (--number N: the Nth such server, 10.252.N.2)

`down` (or `stop()`) kills the server's init (its sshd): the kernel kills every process of its
PID namespace with it, so nothing it ran survives; then the namespace, the veth and the folder go.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from topologies import cleanup

LAB_PREFIX = "mrcsrv-"  # not cleanup.NETNS_PREFIX: a run's teardown must not take the server
STATE = str(cleanup.RUN_DIR / "cluster-lab-{n}.json")  # where `down` finds what `up` made
SUBNET = "10.252.{n}.{host}"  # root side .1, server .2 (/30)
UNDERLAY_MTU = 9000  # the veth between the machines: a jumbo-frame network


class LabError(RuntimeError):
    pass


@dataclass
class LabServer:
    number: int
    netns: str
    veth: str
    address: str
    local_address: str
    folder: str
    pid: int  # the `unshare` process whose child is the server's init (sshd)

    @property
    def ssh_config(self) -> Path:
        return Path(self.folder) / "ssh_config"

    def ssh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run a shell command on the server as root, over ssh."""
        return subprocess.run(["ssh", "-F", str(self.ssh_config), self.address, command],
                              capture_output=True, text=True, timeout=timeout)


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {result.stderr.strip()[:300]}")
    return result


def _sshd_config(folder: Path, address: str) -> str:
    return "\n".join([
        f"ListenAddress {address}", "Port 22", f"HostKey {folder}/host_key",
        f"AuthorizedKeysFile {folder}/authorized_keys", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "UseDNS no", f"PidFile {folder}/sshd.pid",
        # The cluster edition's SSH links are tap tunnels; its nodes are one session each.
        "PermitTunnel yes", "MaxSessions 1000", "MaxStartups 1000", "LogLevel ERROR",
        "AcceptEnv MRCLAB_*", "",
    ])


def _ssh_config(folder: Path, address: str) -> str:
    return "\n".join([
        f"Host {address}", "  User root", f"  IdentityFile {folder}/id_ed25519",
        "  IdentitiesOnly yes", "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
        "  LogLevel ERROR", "  BatchMode yes",
        # One connection per server, shared by every node's session (the cluster edition
        # opens one per node otherwise).
        "  ControlMaster auto", f"  ControlPath {folder}/cm-%C", "  ControlPersist 60", "",
    ])


def _shell_rc_files() -> list[Path]:
    """Root's bash start-up files, which the server must not share with this machine: bash runs
    ~/.bashrc for every command sshd starts, and this machine's may wait on a lock (one running
    `pyenv init`: a kill -9 test killed a command during pyenv's rehash, its lock stayed, and
    every later ssh command waited on it past its time-out). A real server's are its own; the
    lab server's are empty (/dev/null bind-mounted over them)."""
    home = Path(os.path.expanduser("~root"))
    return [rc for rc in (home / ".bashrc", home / ".bash_profile", home / ".profile") if rc.is_file()]


def start(number: int = 1) -> LabServer:
    """Make server `number` (10.252.N.2) and wait until ssh reaches it."""
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        raise LabError("sshd not found: apt-get install openssh-server (make setup installs it)")
    netns, veth = f"{LAB_PREFIX}{number}", f"mrcsrv{number}"
    address, local_address = SUBNET.format(n=number, host=2), SUBNET.format(n=number, host=1)
    if Path(f"/run/netns/{netns}").exists():
        raise LabError(f"{netns} exists already: `python -m topologies.cluster_lab down` first")
    folder = Path(tempfile.mkdtemp(prefix=f"mrclab-lab{number}-"))
    folder.chmod(0o700)
    server = LabServer(number, netns, veth, address, local_address, str(folder), 0)
    try:
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "host_key")])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "id_ed25519")])
        shutil.copy(folder / "id_ed25519.pub", folder / "authorized_keys")
        (folder / "sshd_config").write_text(_sshd_config(folder, address))
        server.ssh_config.write_text(_ssh_config(folder, address))
        _run(["ip", "netns", "add", netns])
        _run(["ip", "link", "add", veth, "mtu", str(UNDERLAY_MTU), "type", "veth", "peer", "name",
              "eth0", "mtu", str(UNDERLAY_MTU), "netns", netns])
        _run(["ip", "addr", "add", f"{local_address}/30", "dev", veth])
        _run(["ip", "link", "set", veth, "up"])
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "eth0", "up"],
                    ["ip", "addr", "add", f"{address}/30", "dev", "eth0"]):
            _run(["ip", "netns", "exec", netns, *cmd])
        cleanup.run_dir()  # the mount point of the server's own /run/mrclab
        inside = " && ".join([
            "mount -t sysfs sysfs /sys", "mount -t bpf bpf /sys/fs/bpf",
            "mount -t tmpfs -o mode=0700 tmpfs /run/mrclab",
            "mount -t tmpfs -o mode=0755 tmpfs /run/netns",
            *(f"mount --bind /dev/null {rc}" for rc in _shell_rc_files()),
            "mkdir -p /run/sshd", f"exec /usr/sbin/sshd -D -f {folder}/sshd_config -E {folder}/sshd.log"])
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{netns}", "unshare", "--pid", "--fork", "--kill-child",
             "--mount", "--propagation", "private", "--mount-proc", "sh", "-c", inside],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(folder / "server.log", "w"))
        server.pid = proc.pid
        cleanup.files.write_json(STATE.format(n=number), asdict(server))
        _wait_ssh(server, proc)
        return server
    except BaseException:
        stop(server)
        raise


def _wait_ssh(server: LabServer, proc: subprocess.Popen, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (Path(server.folder) / "server.log").read_text().strip()
            raise LabError(f"the lab server exited: {log[-300:]}")
        with contextlib.suppress(OSError), socket.create_connection((server.address, 22), 0.5):
            if server.ssh("true").returncode == 0:
                return
        time.sleep(0.1)
    raise LabError(f"ssh to the lab server {server.address} did not answer within {timeout:.0f} s")


def stop(server: LabServer | None = None, number: int = 1) -> None:
    """Everything `start` made, gone (idempotent; without `server`, what server `number`'s
    STATE records)."""
    if server is None:
        try:
            server = LabServer(**json.loads(Path(STATE.format(n=number)).read_text()))
        except (OSError, ValueError, TypeError):
            return
    if server.pid:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # unshare --kill-child: sshd, then its PID namespace
        with contextlib.suppress(ChildProcessError):
            os.waitpid(server.pid, 0)
        _wait_gone(server.pid)
    subprocess.run(["ip", "link", "del", server.veth], capture_output=True)
    subprocess.run(["ip", "netns", "delete", server.netns], capture_output=True)
    shutil.rmtree(server.folder, ignore_errors=True)
    Path(STATE.format(n=server.number)).unlink(missing_ok=True)


def _wait_gone(pid: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def leftovers() -> list[str]:
    """Lab servers still present (namespaces named LAB_PREFIX...)."""
    try:
        return sorted(n for n in os.listdir("/run/netns") if n.startswith(LAB_PREFIX))
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topologies.cluster_lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--number", type=int, default=1, choices=range(1, 250), metavar="N")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            server = start(args.number)
            print(f"server {server.address}: MRCLAB_SSH_CONFIG={server.ssh_config} "
                  f"mrclab check-fabric --servers head,{server.address} ...")
        else:
            stop(number=args.number)
    except LabError as exc:
        print(f"cluster_lab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
