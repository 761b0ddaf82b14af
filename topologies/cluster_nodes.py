"""The cluster edition's nodes and links for a split fabric's kernel routers (topologies/cluster.py):
a remote kernel router (`RemoteMixin` over the router class) and a tunnelled host link whose
tunnel is VXLAN at the fabric's MTU (the cluster edition's GRE links cap it at 1450)."""

from __future__ import annotations

from typing import Any

from topologies import cleanup
from topologies.model import LINK_MTU
from topologies.preflight import EmulationError
from topologies.servers import ssh_options

VXLAN_PORT = 4789


def classes() -> tuple[type, type]:
    """(RemoteKernelRouter, VxlanLink), built on Mininet's cluster edition (imported late:
    Mininet is not needed to import this module)."""
    from mininet.examples.cluster import RemoteGRELink, RemoteMixin
    from mininet.link import Link
    from mininet.util import quietRun

    from topologies.switches.routers import KernelRouter

    class RemoteKernelRouter(RemoteMixin, KernelRouter):
        """A kernel router on its server: the cluster edition's remote node (its shell over
        ssh), with the router's own shell start (not waiting for each prompt in turn)."""

        def __init__(self, name: str, **kwargs: Any) -> None:
            self.sshbase = [*RemoteMixin.sshbase, *ssh_options()]
            # The run's marker as an argument: the shell does not inherit it over ssh, and
            # `mrclab clean` on its server finds the shell (and its sudo parent) by it.
            self.shell_env = tuple(cleanup.run_marker())
            super().__init__(name, **kwargs)

        def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 - Mininet's
            KernelRouter.startShell(self, mnopts="-c" if self.isRemote else mnopts)

        def finish_shell(self) -> None:
            KernelRouter.finish_shell(self)
            if self.isRemote:  # the shell's pid over there (the local one is ssh's)
                self.pid = int(self.cmd("echo $$").strip())

    class VxlanLink(RemoteGRELink):
        """The cluster edition's tunnelled link with a VXLAN tunnel in place of gretap, at the
        fabric's MTU, each end created with the model's MAC and ifindex (`ends`: node name ->
        " address MAC [index N]"; not addr1/addr2, which Mininet would set again with ifconfig)."""

        VNI = 0

        def __init__(self, node1: Any, node2: Any, ends: dict[str, str], **kwargs: Any) -> None:
            self.ends = ends
            super().__init__(node1, node2, **kwargs)

        def makeTunnel(self, node1: Any, node2: Any, intfname1: str, intfname2: str,  # noqa: N802
                       addr1: str | None = None, addr2: str | None = None) -> None:
            assert node1.server != node2.server
            if node2.server == "localhost":
                return self.makeTunnel(node2, node1, intfname2, intfname1, addr2, addr1)
            ip1, ip2 = node1.serverIP, node2.serverIP
            if node1.server == "localhost":  # the head's address towards that server
                ip1 = quietRun(f"ip route get {ip2}").split(" src ")[1].split()[0]
            type(self).VNI += 1
            self.vni = self.VNI
            for node, name, local, remote in ((node1, intfname1, ip1, ip2), (node2, intfname2, ip2, ip1)):
                out = node.rcmd(
                    f"ip link add name {name}{self.ends.get(node.name, '')} mtu {LINK_MTU} type vxlan"
                    f" id {self.VNI} local {local} remote {remote} dstport {VXLAN_PORT} nolearning ttl 64")
                if out.strip():
                    raise EmulationError(f"creating the tunnel {name} on {node.server}: {out.strip()[:200]}")
                if not self.moveIntf(name, node):
                    raise EmulationError(f"moving {name} into {node} on {node.server} failed")
                node.cmd(f"ip link set dev {name} up")  # a move into a namespace sets it down
            return None

        def status(self) -> str:  # the CLI's `links`: RemoteLink's polls `tunnel` (here 1)
            return f"{Link.status(self)} VXLAN id {self.vni} (UDP {VXLAN_PORT})"

    return RemoteKernelRouter, VxlanLink
