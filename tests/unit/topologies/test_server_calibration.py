"""topologies/server_calibration.py: what the head makes of each server's forwarding calibration
(the ssh part is tested on the lab server, tests/integration/test_cluster.py)."""

from topologies import placement, server_calibration
from topologies.model import build

FABRIC = build(planes=4, leaves=2, spines=2, hosts_per_leaf=1)


def test_a_calibrated_server_brings_its_figure_the_others_the_heads():
    p = placement.place(FABRIC, ("head", "s1", "s2"))
    cal = {"packet_hops_per_s": 450000, "fabric": {"planes": 2}, "measured_at": "t",
           "fingerprint": {"cpu": "x"}, "calibrated_now": True, "sweep": [1, 2]}
    asked = []
    got = server_calibration.figures(p, {"s1": cal, "s2": None},
                                     lambda planes: asked.append(planes) or 380000)
    assert got["s1"] == {"planes": [0, 2], "packet_hops_per_s": 450000, "source": "calibrated",
                         "calibration": {"fabric": {"planes": 2}, "measured_at": "t",
                                         "fingerprint": {"cpu": "x"}, "calibrated_now": True}}
    assert got["s2"] == {"planes": [1, 3], "packet_hops_per_s": 380000, "source": "head"}
    assert asked == [2]  # the head's figure for as many planes as s2 carries


def test_the_benchs_last_line_is_read_back(monkeypatch):
    import subprocess

    def answer(stdout, code=0, stderr=""):
        return lambda ip, command, timeout: subprocess.CompletedProcess([], code, stdout, stderr)

    line = '{"forwarding_calibration": {"packet_hops_per_s": 7}}'
    monkeypatch.setattr(server_calibration, "server_run", answer(f'{{"trial": 1}}\n{line}\n'))
    assert server_calibration._bench("ip", "--cached", "linux", 1) == ({"packet_hops_per_s": 7}, "")
    monkeypatch.setattr(server_calibration, "server_run", answer('{"forwarding_calibration": null}\n'))
    assert server_calibration._bench("ip", "--cached", "linux", 1) == (None, "none cached")
    monkeypatch.setattr(server_calibration, "server_run", answer("", 2, "dataplane_bench: error: no\n"))
    assert server_calibration._bench("ip", "--calibrate", "linux", 1) == (None, "dataplane_bench: error: no")


def test_a_server_without_one_is_calibrated_once_or_named_in_a_warning(monkeypatch):
    p = placement.place(FABRIC, ("head", "s1", "s2"))
    monkeypatch.setattr(server_calibration, "check_servers", lambda p: {"s1": "10.0.0.1", "s2": "10.0.0.2"})
    asked = []

    def bench(ip, flag, backend, timeout):
        asked.append((ip, flag.split()[0]))
        if ip == "10.0.0.1" and flag.startswith("--calibrate"):
            return {"packet_hops_per_s": 9}, ""
        return None, "none cached" if flag == "--cached" else "mrcblast is missing"

    monkeypatch.setattr(server_calibration, "_bench", bench)
    said = []
    got = server_calibration.forwarding(p, "linux", said.append)
    assert got == {"s1": {"packet_hops_per_s": 9, "calibrated_now": True}, "s2": None}
    assert asked == [("10.0.0.1", "--cached"), ("10.0.0.1", "--calibrate"),
                     ("10.0.0.2", "--cached"), ("10.0.0.2", "--calibrate")]
    assert any("s1 has no forwarding calibration" in line for line in said)
    assert any(line.startswith("warning: s2:") and "mrcblast is missing" in line and
               "head's figure" in line for line in said)
