"""Start the controller process: `python -m controller.run [--backend ovs|linux] --config FILE`.

os-ken 4.x no longer ships `osken-manager`, so this is the launcher: it runs `controller.app`
with os-ken's native (thread) hub, listening for OpenFlow on the Unix socket `of_socket` of the
configuration. A Unix socket, not TCP on loopback: the switches run in one network namespace
per plane, which cannot reach the root namespace's loopback, while a path is reachable from
every namespace; and only root can connect (the socket's folder is root's only).

os-ken binds AF_UNIX when its listen "host" is a path in an existing folder. Two of its habits
need care: its Datapath sets TCP_NODELAY, which a Unix socket refuses (`_UnixStream` ignores TCP
options), and with listen port 0 it also serves the old OpenFlow port 6633 on the same "host",
a second bind of the same path that fails and takes every app down with it (so a port is always
given; it means nothing for a path). Each connection's address becomes (socket path, the peer
process's pid from SO_PEERCRED), so the app knows which process a switch is.

linux: `controller.kernel_app`, which programs the kernel routers over netlink and `ip`; both
write the same status and events files and listen on the same notify socket.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import struct
import sys

os.environ.setdefault("OSKEN_HUB_TYPE", "native")
_UNUSED_TCP_PORT = 6653  # any non-zero port: os-ken ignores it for a path (see above)


class _UnixStream(socket.socket):
    """An accepted OpenFlow connection on the Unix socket; TCP options are no-ops."""

    def setsockopt(self, level: int, option: int, value: int | bytes) -> None:  # type: ignore[override]
        if level != socket.IPPROTO_TCP:
            super().setsockopt(level, option, value)


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process at the other end of a Unix stream socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True,
                        help="JSON: fabric, status, events, detect_ms, notify, and of_socket "
                             "(ovs) or routers (linux)")
    parser.add_argument("--backend", choices=("ovs", "linux"), default="ovs",
                        help="the switches it controls (topologies/switches/)")
    args = parser.parse_args(argv)
    with open(args.config) as fh:
        settings = json.load(fh)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.backend == "linux":
        from controller import kernel_app

        return kernel_app.main(settings)

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller as ofc

    from controller import app

    path = settings["of_socket"]
    serve = ofc.datapath_connection_factory

    def factory(sock: socket.socket, address: object) -> None:
        if sock.family == socket.AF_UNIX:
            sock = _UnixStream(socket.AF_UNIX, socket.SOCK_STREAM, fileno=sock.detach())
            address = (path, peer_pid(sock))
        serve(sock, address)

    ofc.datapath_connection_factory = factory  # what os-ken's server loop calls per connection
    app.SETTINGS.update(settings)
    if os.path.lexists(path):
        os.unlink(path)
    cfg.CONF(args=["--ofp-listen-host", path, "--ofp-tcp-listen-port", str(_UNUSED_TCP_PORT)],
             project="os_ken")
    AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
