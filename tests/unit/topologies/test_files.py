"""Atomic writes and private work directories."""

from __future__ import annotations

import json
import os
import stat

from topologies import files


def test_json_is_written_atomically(tmp_path):
    out = tmp_path / "sub" / "agent.json"
    files.write_json(out, {"agent_pps_per_core": 1.0})
    files.write_json(out, {"agent_pps_per_core": 2.0})
    assert json.loads(out.read_text()) == {"agent_pps_per_core": 2.0}
    assert os.listdir(out.parent) == ["agent.json"]  # no temporary file left behind
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # results are for everyone to read


def test_read_json_gives_the_object_or_nothing_recorded(tmp_path):
    path = tmp_path / "status.json"
    assert files.read_json(path) == {}  # not written yet
    files.write_json(path, {"ready_dpids": [1, 2]})
    assert files.read_json(path) == {"ready_dpids": [1, 2]}
    for text in ('{"ready_dpids": [1', "[1, 2]", "null", ""):  # cut short, not an object
        path.write_text(text)
        assert files.read_json(path) == {}, text
    path.unlink()
    path.mkdir()  # unreadable as a file
    assert files.read_json(path) == {}


def test_private_dir_is_its_owners_only(tmp_path):
    path = files.private_dir("x-", parent=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("x-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_a_work_folder_is_created_private(tmp_path):
    path = files.ensure_private(tmp_path / "new" / "work")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_an_existing_folder_open_to_others_is_refused_not_changed(tmp_path):
    """`mrclab cli --workdir /` (or the checkout, or a home folder) used to chmod it 0700 as
    root: a work folder that exists must already be private; its mode is never changed."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    try:
        files.ensure_private(shared)
    except OSError as exc:
        assert "open to others" in str(exc)
    else:
        raise AssertionError("a folder open to others was accepted")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert files.ensure_private(private) == private
