"""`--out` never deletes what mrclab did not make."""

from __future__ import annotations

import json

import pytest

from experiments import outdir


def _result(path, marker=True):
    path.mkdir()
    summary = {"scenario": "x", "transports": {}}
    if marker:
        summary[outdir.RESULT_MARKER] = outdir.RESULT_FORMAT
    else:  # written before the marker existed: the fields every summary has
        summary.update({"fabric": {}, "fidelity": {}, "software": {}})
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "goodput.png").write_bytes(b"png")
    return path


@pytest.mark.parametrize("name, words", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("/", "is /"),
    (str(outdir.REPO), "the repository or a parent of it"),
    (str(outdir.REPO.parent), "the repository or a parent of it"),
    (str(outdir.REPO / "experiments" / ".."), "the repository or a parent of it"),
])
def test_dangerous_names_are_refused(name, words):
    with pytest.raises(outdir.OutDirError, match=words):
        outdir.check(name)


def test_a_folder_that_is_not_a_result_is_refused_and_kept(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    _result(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")  # not followed: a link is not a result
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("[1, 2]")
    for name in ("mine", "empty", "afile", "link", "bad"):
        with pytest.raises(outdir.OutDirError, match="exists and is not an mrclab result"):
            outdir.check(tmp_path / name)
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_absent_folders_and_earlier_results_are_accepted(tmp_path):
    assert outdir.check(tmp_path / "new") == tmp_path / "new"
    assert outdir.check(_result(tmp_path / "now")) == tmp_path / "now"
    assert outdir.check(_result(tmp_path / "old", marker=False)) == tmp_path / "old"


def test_replace_swaps_in_the_new_result_and_removes_the_earlier_one(tmp_path):
    out = _result(tmp_path / "out")
    staging = tmp_path / ".out-xyz"
    staging.mkdir()
    (staging / "summary.json").write_text(json.dumps({outdir.RESULT_MARKER: 1, "new": True}))
    outdir.replace(staging, out)
    assert json.loads((out / "summary.json").read_text())["new"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    fresh = tmp_path / ".fresh"
    fresh.mkdir()
    outdir.replace(fresh, tmp_path / "first")
    assert (tmp_path / "first").is_dir() and not fresh.exists()


def test_replace_checks_again_at_the_end(tmp_path):
    out = tmp_path / "out"
    staging = tmp_path / ".out-xyz"
    staging.mkdir()
    out.mkdir()
    (out / "notes.txt").write_text("made during the run")  # appeared while the run ran
    with pytest.raises(outdir.OutDirError):
        outdir.replace(staging, out)
    assert (out / "notes.txt").exists()


def test_a_collection_holds_only_results_and_its_index(tmp_path):
    col = tmp_path / "validate"
    col.mkdir()
    _result(col / "link-failure")
    (col / "validate.json").write_text("[]")
    assert outdir.check_collection(col) == col
    (col / "mine.txt").write_text("x")
    with pytest.raises(outdir.OutDirError, match="holds more than mrclab results"):
        outdir.check_collection(col)
