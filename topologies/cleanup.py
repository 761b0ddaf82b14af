"""The one place that knows every kind of leftover a run can leave, and the run lock's files.

The lock (`RUN_DIR/lock`) and its registry (`RUN_DIR/run.json`: the holder's pid, run id, and
the folders and servers it uses) are taken and written by topologies/runctx.py alone; here is
what reads them, and what the taker calls to remove a killed predecessor's leftovers
(`cleanup_leftovers`).

Leftovers, and how each is recognised:
* processes: everything a run starts (controller, Mininet host shells, agents, TCP peers)
  inherits `MRCLAB_RUN=<run id>` in its environment, read back through /proc/PID/environ: a
  process is killed because it carries the marker, never because of its name;
* each switch backend's own (topologies/switches/: OVS bridges, tagged in their external_ids or
  named like the model's switches; whatever the Linux routers leave);
* switch-side veths: named like the model's interfaces;
* named network namespaces starting with `mrclab-` (the bench's);
* the nftables table `NFT_TABLE` of the fault injector (its netdev chains would otherwise bind
  to the next fabric's interfaces by name);
* BPF pins of processes that no longer exist;
* the work and staging directories the dead run registered;
* on the servers of a split fabric the dead run registered (topologies/cluster.py), the same,
  over ssh (its router shells and control planes there end with their ssh sessions).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from topologies import files
from topologies.preflight import PreflightError

RUN_DIR = Path("/run/mrclab")
LOCK_NAME, REGISTRY_NAME = "lock", "run.json"
LOCK_PATH = RUN_DIR / LOCK_NAME
LEGACY_LOCK = Path("/run/mrclab.lock")  # earlier versions' pid file
MARKER = "MRCLAB_RUN"  # environment variable every process of a run inherits
NFT_TABLE = "mrclab_faults"  # the fault injector's nftables table (netdev family)
NETNS_PREFIX = "mrclab-"
VETH_NAME = re.compile(r"^(p\d+[ls]\d+|h\d+)-eth\d+$")  # the model's interface names
CLEAN_HINT = "`sudo mrclab clean` (or `make clean`)"


# ----- the run directory ------------------------------------------------------------------------
def run_dir(path: Path | None = None) -> Path:
    """`RUN_DIR`, created 0700 if missing; refused if it is a symlink, not a directory, not
    ours or open to others (never follow or trust what someone else put there)."""
    path = path or RUN_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PreflightError(f"{path} is not a directory private to this user (a symlink, another "
                             f"owner, or open to others): remove it with `sudo rm -rf {path}`")
    return path


# ----- the run lock's files (topologies/runctx.py takes it) -------------------------------------
def holder(directory: Path | None = None) -> dict:
    """What the registry says about the last run that held the lock (empty if none)."""
    return files.read_json((directory or RUN_DIR) / REGISTRY_NAME)


def lock_free(directory: Path | None = None) -> bool:
    """True when no live process holds the run lock (checked by taking and dropping it through
    a descriptor of its own, which this process's hold, if any, refuses too)."""
    path = (directory or RUN_DIR) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def busy_message(info: dict) -> str:
    """The one line a run refused by the lock prints, naming the holder `info` (its registry)."""
    pid = info.get("pid", "?")
    what = " ".join(str(a) for a in info.get("argv", [])[1:4])
    return (f"another mrclab run holds the emulation (pid {pid}{': ' + what if what else ''}): "
            f"wait for it, or stop it with `sudo kill {pid}` (it tears down; after a kill -9, "
            f"{CLEAN_HINT} removes what it left)")


# ----- processes ----------------------------------------------------------------------------------
def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def marked_processes() -> dict[int, str]:
    """pid -> run id of every process carrying `MARKER` in its environment, or as an argument
    (`env MRCLAB_RUN=<id> ...` run by sudo over ssh: the sudo parent of a split fabric's router
    shell on its server), except this one and its ancestors. A zombie has neither."""
    skip, key, out = _ancestors(), MARKER.encode() + b"=", {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        for part in ("environ", "cmdline"):
            try:
                items = Path(f"/proc/{entry}/{part}").read_bytes().split(b"\0")
            except OSError:
                continue
            found = next((item[len(key):] for item in items if item.startswith(key)), None)
            if found is not None:
                out[int(entry)] = found.decode(errors="replace")
                break
    return out


# A killed process is gone (or a zombie) within milliseconds on a quiet machine; on a loaded one
# its parent (sudo, sshd) may take longer. `mrclab clean` and a teardown return only once it has.
KILL_WAIT_S = 5.0


def kill_marked(spare: str | None = None, only: str | None = None, grace: float = 0.0) -> int:
    """SIGKILL every marked process (but those of run `spare`; with `only`, those of that run
    alone), after `grace` seconds for them to end on their own, and wait (at most KILL_WAIT_S)
    until none is left, as a parent that outlives its killed child is killed in turn; returns how
    many were killed."""
    def targets() -> list[int]:
        return [pid for pid, rid in marked_processes().items()
                if rid != spare and (only is None or rid == only)]

    deadline = time.monotonic() + grace
    while targets() and time.monotonic() < deadline:
        time.sleep(0.05)
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_WAIT_S
    while (left := targets()) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return len(killed)


def run_marker() -> list[str]:
    """`MARKER=<id>` of the run this process belongs to, as a word for `env` in a command run
    elsewhere (a server's shell over ssh, whose environment ssh does not carry); [] outside one."""
    run_id = os.environ.get(MARKER)
    return [f"{MARKER}={run_id}"] if run_id else []


# ----- the other kinds --------------------------------------------------------------------------
def our_veths() -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return [n for link in ipr.get_links()
                if (n := link.get_attr("IFLA_IFNAME")) and VETH_NAME.match(n)]


def delete_veths() -> int:
    """Root-side ends of our veths (switch ports) survive the bridges; host ends die with
    their namespaces."""
    from pyroute2 import IPRoute

    removed = 0
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and VETH_NAME.match(name):
                try:
                    ipr.link("del", index=link["index"])
                    removed += 1
                except Exception:  # noqa: BLE001 - its peer's deletion may have taken it already
                    pass
    return removed


def our_netns() -> list[str]:
    try:
        return sorted(n for n in os.listdir("/run/netns") if n.startswith(NETNS_PREFIX))
    except OSError:
        return []


def nft_table_present() -> bool:
    if shutil.which("nft") is None:
        return False
    return subprocess.run(["nft", "list", "table", "netdev", NFT_TABLE],
                          capture_output=True).returncode == 0


def _delete_nft_table() -> int:
    if not nft_table_present():
        return 0
    subprocess.run(["nft", "delete", "table", "netdev", NFT_TABLE], capture_output=True)
    return 1


def stale_bpf_pins() -> list[Path]:
    """Pin directories of processes that no longer exist."""
    from topologies.dataplane.bpf import PIN_ROOT

    if not PIN_ROOT.is_dir():
        return []
    out = []
    for entry in PIN_ROOT.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            out.append(entry)
    return out


def _remove_dirs(paths: list[str]) -> int:
    """Directories a dead run registered, if they are still plain directories of ours."""
    removed = 0
    for name in paths:
        path = Path(name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def cleanup_leftovers(registry: Path | None = None, spare: str | None = None) -> dict[str, int]:
    """Remove every kind of leftover (see the module docstring). `registry`: also the
    directories and servers the run recorded there (the lock taker, cleaning after a dead
    predecessor); `spare`: a run whose processes live on (the taker's own); None, as in an
    emulation's own teardown: its own stragglers are killed too. Returns counts by kind."""
    from topologies import switches

    out = {"processes": kill_marked(spare)}
    out.update(switches.cleanup_leftovers())
    out["veths"] = delete_veths()
    out["netns"] = 0
    for name in our_netns():
        if subprocess.run(["ip", "netns", "delete", name], capture_output=True).returncode == 0:
            out["netns"] += 1
    out["nftables"] = _delete_nft_table()
    pins = stale_bpf_pins()
    for pin in pins:
        shutil.rmtree(pin, ignore_errors=True)
    out["bpf_pins"] = len(pins)
    out["dirs"] = _remove_dirs(files.read_json(registry).get("dirs", [])) if registry else 0
    out["servers"] = _clean_servers(files.read_json(registry).get("servers", [])) if registry else 0
    out["legacy_lock"] = _remove_legacy_lock()
    return out


def _clean_servers(servers: list[dict]) -> int:
    """Every server a dead run registered, cleaned over ssh; how many answered."""
    from topologies.servers import clean_server

    return sum(clean_server(s["address"], s["folder"]) for s in servers)


def _remove_legacy_lock() -> int:
    """The pid file earlier versions used as a lock, once its process is gone."""
    try:
        pid = int(LEGACY_LOCK.read_text().strip() or 0)
    except (OSError, ValueError):
        pid = 0
    if LEGACY_LOCK.exists() and not (pid and Path(f"/proc/{pid}").exists()):
        LEGACY_LOCK.unlink(missing_ok=True)
        return 1
    return 0


def leftovers() -> dict[str, list]:
    """What is left right now, by kind (every list empty: nothing): what a run must not leave
    behind, and what `cleanup_leftovers` removes. For `mrclab clean`, the soak and the tests."""
    from topologies import switches

    free = lock_free()
    # A live holder's directories are in use; a dead one's are what it left.
    dirs = [d for d in holder().get("dirs", []) if os.path.lexists(d)] if free else []
    return {
        "processes": sorted(marked_processes()),
        **switches.leftovers(),
        "veths": our_veths(),
        "netns": our_netns(),
        "nftables": [NFT_TABLE] if nft_table_present() else [],
        "bpf_pins": [str(p) for p in stale_bpf_pins()],
        "dirs": dirs,
        "lock": [] if free else [str(LOCK_PATH)],
    }

