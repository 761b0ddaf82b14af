"""The agent's override hook: only the named points may be replaced, a bad file is one line
(exit 2 on the command line), a run records what it replaced with each file's SHA-256, and a
replacement is what the agent really runs (a real agent process, asked over its socket)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from endpoints.host import overrides
from endpoints.host.control import AgentClient
from endpoints.host.overrides import OverrideError, Replacement
from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from endpoints.protocol.evset import EvSet
from endpoints.protocol.receiver import MrcReceiver
from endpoints.protocol.replaceable import MRC_TRIM_REACTION, cores
from endpoints.protocol.sender import MrcSender
from experiments.sim.simnet import sim_fabric
from topologies.model import FabricParams, build
from topologies.pathtables import agent_paths

ROOT = Path(__file__).resolve().parents[4]
LAB4 = ROOT / "labs/04-ev-state-machine/solution/ev_states.py"
LAB5 = ROOT / "labs/05-trimming-incast/solution/trim_reactions.py"
LAB6 = ROOT / "labs/06-congestion-control/solution/nscc.py"


def test_only_the_named_points_can_be_replaced() -> None:
    with pytest.raises(OverrideError, match="no override point 'MrcSender': the points are evset, nscc"):
        overrides.parse(f"MrcSender={LAB4}:LabEvSet")
    with pytest.raises(OverrideError, match="POINT=FILE:NAME"):
        overrides.parse(str(LAB4))
    with pytest.raises(OverrideError, match="evset is replaced twice"):
        overrides.check([Replacement("evset", str(LAB4), "LabEvSet")] * 2)
    # Each point's contract: a class of the right kind, a function where a decision is replaced.
    with pytest.raises(OverrideError, match="ev_states.py:LabEvSet is not a subclass of Nscc"):
        overrides.load([Replacement("nscc", str(LAB4), "LabEvSet")])
    with pytest.raises(OverrideError, match="nscc.py:LabNscc is not a function"):
        overrides.load([Replacement("trim_reaction", str(LAB6), "LabNscc")])
    with pytest.raises(OverrideError, match="trim_reactions.py has no nope"):
        overrides.load([Replacement("trim_reaction", str(LAB5), "nope")])


def test_a_bad_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x = 1\n")
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    for text, why in ((f"evset={tmp_path}/missing.py:X", "missing.py does not exist"),
                      (f"evset={tmp_path}/notes.txt:X", "is not a regular .py file"),
                      (f"evset={tmp_path}/folder.py:X", "is not a regular .py file"),
                      (f"evset={LAB4}:not-a-name", "is not a Python name")):
        with pytest.raises(OverrideError, match=why) as err:
            overrides.parse(text)
        assert "\n" not in str(err.value)
    with pytest.raises(OverrideError, match="importing .*broken.py failed: ModuleNotFoundError"):
        overrides.load([overrides.parse(f"evset={tmp_path}/broken.py:X")])


def test_bad_replacement_on_the_command_line_is_exit_2_before_anything_starts(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "run", "link-failure",
                          "--replace", f"evset={tmp_path}/missing.py:LabEvSet",
                          "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"mrclab: error: --replace: evset: {tmp_path}/missing.py does not exist"]
    assert not (tmp_path / "out").exists()


def test_provenance_is_recorded_in_the_runs_config() -> None:
    from experiments.scenarios import default_options

    rep = overrides.parse(f"evset={LAB4}:LabEvSet")
    config = default_options("link-failure", replace=(rep,)).as_dict()
    assert config["replace"] == {"evset": {"file": str(LAB4), "name": "LabEvSet",
                                           "sha256": hashlib.sha256(LAB4.read_bytes()).hexdigest()}}
    assert "replace" not in default_options("link-failure").as_dict()  # the product's own code


def test_cores_use_the_replacements_and_the_products_classes_otherwise() -> None:
    assert cores({}) == (MrcSender, MrcReceiver)
    loaded = overrides.load([overrides.parse(f"evset={LAB4}:LabEvSet"),
                             overrides.parse(f"nscc={LAB6}:LabNscc")])
    sender_cls, receiver_cls = cores(loaded)
    assert receiver_cls is MrcReceiver
    snd = sender_cls(1, 2, sim_fabric(2, 2).evs, TransportConfig(), 1)
    assert type(snd.evs).__name__ == "LabEvSet" and isinstance(snd.evs, EvSet)
    assert type(snd.cc).__name__ == "LabNscc"


def test_a_replaced_trim_reaction_is_carried_out() -> None:
    """A decision other than MRC's (bench the path on a trim) is what the sender then does."""
    def bench(reason: int) -> object:
        return type("R", (), {"resend": True, "skip_ev": False, "slow_down": False, "bench_ev": True})

    evs = sim_fabric(2, 2).evs
    for decide, state in ((None, "SKIP"), (bench, "ASSUMED_BAD")):
        sender_cls, receiver_cls = cores({} if decide is None else {"trim_reaction": decide})
        snd, rcv = sender_cls(1, 2, evs, TransportConfig(), 1), receiver_cls(2, 1, evs, TransportConfig(), 1)
        snd.send_message(b"x" * 8192, 0.0)
        ev, pkt = snd.poll(0.0)[0]
        rcv.on_datagram(wire.trimmed(pkt), ev, 0.001)
        nack = next(p for _, p in rcv.poll(0.001) if p[0] == wire.OP_NACK)
        snd.on_datagram(nack, evs[0].ev, 0.002)
        assert snd.ev_states()[ev] == state
    assert MRC_TRIM_REACTION[wire.NACK_TRIMMED]["skip_ev"] is True


def _agent(tmp_path: Path, replace: list[dict]) -> subprocess.Popen:
    """A real agent process (in a network namespace of its own when root can make one)."""
    fabric = build(FabricParams(planes=2, leaves=2, spines=2, hosts_per_leaf=1))
    settings = {"paths": agent_paths(fabric, "h0"),
                "control": str(tmp_path / "h0.sock"), "seed": 1, "replace": replace}
    (tmp_path / "agent.json").write_text(json.dumps(settings))
    command = [sys.executable, "-m", "endpoints.host.agent", "--config", str(tmp_path / "agent.json")]
    if os.geteuid() == 0 and shutil.which("unshare"):
        command = ["unshare", "--net", *command]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_the_agent_runs_the_replacement_and_says_so(tmp_path: Path) -> None:
    rep = overrides.parse(f"evset={LAB4}:LabEvSet")
    proc = _agent(tmp_path, overrides.as_settings([rep]))
    try:
        client = AgentClient(str(tmp_path / "h0.sock")).connect(wait=20)
        assert client.call("ping")["replaced"] == overrides.provenance([rep])
        opened = client.call("open", qpn=5, peer="h1", peer_qpn=6, role="send")
        assert opened["classes"] == {"core": "ReplacedSender", "evset": "LabEvSet", "cc": "Nscc"}
        client.call("shutdown")
        client.close()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_agent_given_a_bad_replacement_stops_with_one_line(tmp_path: Path) -> None:
    proc = _agent(tmp_path, [{"point": "nscc", "file": str(LAB4), "name": "LabEvSet"}])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err.splitlines() == ["agent: error: ev_states.py:LabEvSet is not a subclass of Nscc: "
                                "nscc must be the sender's congestion control, a subclass of Nscc"]
    assert not (tmp_path / "h0.sock").exists()


def test_the_testbed_refuses_a_bad_replacement_before_anything_starts(tmp_path: Path) -> None:
    from experiments.api.testbed import Testbed
    from topologies.model import build

    with pytest.raises(OverrideError, match="no override point 'sender'"):
        Testbed(build(planes=1, leaves=2, spines=1), tmp_path / "w", replace=[f"sender={LAB4}:X"])
    assert not (tmp_path / "w").exists()


def test_the_cli_session_takes_replacements_and_refuses_bad_ones(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "cli", "--replace",
                          f"nscc={tmp_path}:LabNscc"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"mrclab: error: --replace: nscc: {tmp_path} is not a regular .py file"]
