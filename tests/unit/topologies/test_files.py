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


def test_private_dir_is_its_owners_only(tmp_path):
    path = files.private_dir("x-", parent=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("x-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
