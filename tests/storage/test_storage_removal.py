"""Files removed a step at a time (so that one unlink is never one large file-system
transaction): whatever their size, they are gone afterwards, and a missing one is no error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from starquake.storage.removal import SHRINK_STEP_BYTES, remove_file, remove_tree


@pytest.mark.parametrize(
    "size", [0, 1, SHRINK_STEP_BYTES, SHRINK_STEP_BYTES + 1, 2 * SHRINK_STEP_BYTES + 12345]
)
def test_a_file_of_any_size_is_removed(tmp_path: Path, size: int) -> None:
    path = tmp_path / "1.log"
    with path.open("wb") as f:
        f.write(b"head")
        f.truncate(size)  # sparse beyond what was written: the sizes cost no disk
    remove_file(path)
    assert not path.exists()
    remove_file(path)  # already gone: nothing happens


def test_a_file_is_cut_down_step_by_step_before_its_unlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "2.log"
    with path.open("wb") as f:
        f.truncate(3 * SHRINK_STEP_BYTES + 10)
    sizes: list[int] = []
    truncate = os.truncate

    def observe(target: Path, length: int) -> None:
        sizes.append(length)
        truncate(target, length)

    monkeypatch.setattr(os, "truncate", observe)
    remove_file(path)
    assert sizes == [2 * SHRINK_STEP_BYTES + 10, SHRINK_STEP_BYTES + 10, 10]
    assert not path.exists()


def test_a_tree_is_removed_with_its_files(tmp_path: Path) -> None:
    tree = tmp_path / "%+0123"
    tree.mkdir()
    for name in ("1.log", "1.idx", "name"):
        (tree / name).write_bytes(b"x" * 100)
    with (tree / "2.log").open("wb") as f:
        f.truncate(SHRINK_STEP_BYTES * 2 + 1)
    remove_tree(tree, tmp_path)
    assert not tree.exists()
    remove_tree(tree, tmp_path)  # gone already: nothing happens
