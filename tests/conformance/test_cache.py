"""The wheel cache the conformance suite imports from: a damaged or stale unpacked tree is
unpacked again, a bad wheel is named with what to do, and a release whose sources lack a module
every release since one version ships fails the suite instead of leaving it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conformance import releases

RELEASE = "0.5.19"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of one release: its real wheel (linked, not copied), nothing unpacked."""
    wheel = releases._wheel(RELEASE)
    folder = tmp_path / "wheels" / RELEASE
    folder.mkdir(parents=True)
    (folder / wheel.name).symlink_to(wheel)
    monkeypatch.setattr(releases, "CACHE", tmp_path)
    return tmp_path


def _existence_cache(tree: Path) -> Path:
    return tree / "sglang/srt/mem_cache/buffer_mode/storage_existence_cache.py"


def test_a_tree_that_lost_files_is_unpacked_again(cache: Path) -> None:
    tree = releases.source_dir(RELEASE)
    assert _existence_cache(tree).is_file()
    shutil.rmtree(tree / "sglang/srt/mem_cache/buffer_mode")
    assert _existence_cache(releases.source_dir(RELEASE)).is_file()


@pytest.mark.parametrize(
    "stamp",
    [
        "{wheel}\n",
        "{wheel} sha256:{zeros} files:{files}\n",
        "another.whl sha256:{sha} files:{files}\n",
    ],
    ids=["old-stamp", "other-digest", "other-wheel"],
)
def test_a_stamp_that_does_not_name_the_cached_wheel_is_unpacked_again(
    cache: Path, stamp: str
) -> None:
    tree = releases.source_dir(RELEASE)
    written = (tree / ".unpacked").read_text()
    wheel, sha, files = written.split()
    planted = tree / "sglang" / "planted.py"
    planted.write_text("")
    (tree / ".unpacked").write_text(
        stamp.format(
            wheel=wheel,
            zeros="0" * 64,
            sha=sha.removeprefix("sha256:"),
            files=int(files.removeprefix("files:")) + 1,
        )
    )
    assert releases.source_dir(RELEASE) == tree
    assert (tree / ".unpacked").read_text() == written and not planted.exists()


def test_a_bad_wheel_names_the_file_to_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "wheels" / RELEASE
    folder.mkdir(parents=True)
    bad = folder / f"sglang-{RELEASE}-py3-none-any.whl"
    bad.write_bytes(b"not a zip archive")
    monkeypatch.setattr(releases, "CACHE", tmp_path)
    with pytest.raises(RuntimeError) as err:
        releases.source_dir(RELEASE)
    assert f"{bad} is not a readable wheel" in str(err.value)
    assert "delete it and run again" in str(err.value)
    assert not (tmp_path / RELEASE).exists()


def test_a_release_missing_a_module_fails_instead_of_dropping_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = releases.module
    monkeypatch.setattr(
        releases,
        "module",
        lambda release, name: None if release == "0.5.21" else real(release, name),
    )
    with pytest.raises(RuntimeError) as err:
        releases.shipping("buffer_mode", since="0.5.19")
    assert "missing from the unpacked sources of 0.5.21" in str(err.value)
    assert str(releases.CACHE / "0.5.21") in str(err.value)


def test_the_suite_runs_every_release_it_expects() -> None:
    assert releases.shipping("buffer_mode", since="0.5.19") == list(releases.RELEASES[1:])
    assert releases.shipping("storage_prefetch", since="0.5.20") == list(releases.RELEASES[2:])
