"""Build-folder ownership by resolved path and content digest (issue 20 item 6): a byte-
identical copy may share a descriptor's build folder but never takes it over, so deleting
the copy does not hand the folder to a different file of the same name."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from porter.errors import PorterError
from porter.pipeline.runner import DESCRIPTOR_MARK, claim_out_dir


def _arch(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return SimpleNamespace(name="blackwell", path=str(path), digest=hashlib.sha256(text.encode()).hexdigest())


def test_an_identical_copy_that_is_deleted_does_not_hand_the_folder_on(tmp_path):
    out = tmp_path / "build" / "blackwell"
    out.mkdir(parents=True)
    original = _arch(tmp_path / "arch" / "blackwell.yaml", "name: blackwell\nsm_count: 148\n")
    claim_out_dir(out, original, explicit=True)
    copy = _arch(tmp_path / "copy" / "blackwell.yaml", "name: blackwell\nsm_count: 148\n")
    claim_out_dir(out, copy, explicit=True)                        # same bytes: may share
    owners = {o["path"] for o in json.loads((out / DESCRIPTOR_MARK).read_text())["owners"]}
    assert owners == {original.path, copy.path}
    (tmp_path / "copy" / "blackwell.yaml").unlink()
    other = _arch(tmp_path / "other" / "blackwell.yaml", "name: blackwell\nsm_count: 132\n")
    with pytest.raises(PorterError, match=r"holds the build of .*arch/blackwell\.yaml.*would overwrite it"):
        claim_out_dir(out, other, explicit=True)                   # the original is still there
    # The original, edited, keeps its folder; the copy of its old bytes no longer owns it.
    edited = _arch(tmp_path / "arch" / "blackwell.yaml", "name: blackwell\nsm_count: 140\n")
    claim_out_dir(out, edited, explicit=True)
    mark = json.loads((out / DESCRIPTOR_MARK).read_text())
    assert mark["owners"] == [{"path": edited.path, "digest": edited.digest}]


def test_a_folder_whose_files_are_all_gone_may_be_taken_over(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    first = _arch(tmp_path / "a" / "x.yaml", "one\n")
    claim_out_dir(out, first, explicit=False)
    (tmp_path / "a" / "x.yaml").unlink()
    second = _arch(tmp_path / "c" / "x.yaml", "two\n")
    claim_out_dir(out, second, explicit=False)
    assert json.loads((out / DESCRIPTOR_MARK).read_text())["path"] == second.path


def test_a_mark_from_before_owners_were_kept_still_guards(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    first = _arch(tmp_path / "a" / "x.yaml", "one\n")
    (out / DESCRIPTOR_MARK).write_text(json.dumps({"name": "blackwell", "path": first.path, "digest": first.digest}))
    with pytest.raises(PorterError, match="would overwrite it"):
        claim_out_dir(out, _arch(tmp_path / "c" / "x.yaml", "two\n"), explicit=True)
