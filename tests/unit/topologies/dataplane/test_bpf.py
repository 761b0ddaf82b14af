"""topologies/dataplane/bpf.py's loader: a map sized to the run is made first and the program
loaded to use it (the object's own map is only a ceiling); a refusal names the step and leaves
no pin directory behind. bpftool itself is replaced by a recorder (no root needed); the real
load is proven by tests/integration (test_dataplane.py, test_transfer.py: the kernel's
max_entries is the size asked)."""

import subprocess
from pathlib import Path

import pytest

from topologies.dataplane import bpf
from topologies.dataplane.encap import BPF_F_NO_PREALLOC, CARRIER_BYTES, KEY


class Recorder:
    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[tuple[list[str], Path]] = []
        self.fail_at = fail_at

    def __call__(self, argv, capture_output=True, text=True, cwd=None, **_):
        self.calls.append((list(argv), Path(cwd)))
        failed = self.fail_at == len(self.calls) - 1
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "Error: refused" if failed else "")


def test_a_sized_map_is_made_first_and_the_program_loads_with_it(tmp_path, monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(bpf.subprocess, "run", rec)
    paths = bpf.SizedMap("mrc_paths", KEY.size, CARRIER_BYTES, 448, BPF_F_NO_PREALLOC)
    pin = bpf.load_pinned(Path("/obj/mrc_encap.bpf.o"), "lwt_xmit", "encap", root=tmp_path, sized=(paths,))
    assert pin.parent == tmp_path and pin.is_dir()
    (create, cwd1), (load, cwd2) = rec.calls
    assert cwd1 == cwd2 == tmp_path
    sized = f"{pin.name}/sized_mrc_paths"
    assert create == ["bpftool", "map", "create", sized, "type", "hash", "key", "36", "value", "16",
                      "entries", "448", "name", "mrc_paths", "flags", "1"]
    assert load[:3] == ["bpftool", "prog", "load"] and load[4:7] == [f"{pin.name}/prog", "type", "lwt_xmit"]
    assert load[7:12] == ["map", "name", "mrc_paths", "pinned", sized]
    assert load[-2:] == ["pinmaps", pin.name]


def test_without_sized_maps_the_object_loads_as_it_is(tmp_path, monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(bpf.subprocess, "run", rec)
    pin = bpf.load_pinned(Path("/obj/mrc_qos.bpf.o"), "classifier", root=tmp_path)
    [(load, _)] = rec.calls
    assert "map" not in load and load[-2:] == ["pinmaps", pin.name]


def test_an_empty_fabric_still_gets_a_map_the_kernel_accepts():
    assert bpf.SizedMap("m", 4, 4, 0).create_argv("x")[11] == "1"  # max_entries 0 is refused


@pytest.mark.parametrize("step, words", [(0, "bpftool map create"), (1, "bpftool prog load")])
def test_a_refused_step_is_named_and_leaves_no_pin_directory(tmp_path, monkeypatch, step, words):
    monkeypatch.setattr(bpf.subprocess, "run", Recorder(fail_at=step))
    paths = bpf.SizedMap("mrc_paths", KEY.size, CARRIER_BYTES, 8, BPF_F_NO_PREALLOC)
    with pytest.raises(RuntimeError, match=f"{words} of mrc_encap.bpf.o failed: Error: refused"):
        bpf.load_pinned(Path("/obj/mrc_encap.bpf.o"), "lwt_xmit", "encap", root=tmp_path, sized=(paths,))
    assert list(tmp_path.iterdir()) == []
