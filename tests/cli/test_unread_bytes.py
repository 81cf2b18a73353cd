"""A file holding more than its reader reads is never "ok" (issue 24): a zip checkpoint is read
from its end, so archives before it (a torch DCP rank file holds several, back to back) or
bytes after it were skipped in silence. ``verify`` fails it naming the bytes; ``inspect``
warns."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.cli._support import ERROR_PREFIX
from weightstore.cli import main
from weightstore.pytorch_reader import _extent
from weightstore.pytorch_reader._extent import zip_extent

torch = pytest.importorskip("torch")


def _saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]


def test_two_torch_saves_back_to_back_fail_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _saved({"a": torch.arange(4.0)})
    second = _saved({"b": torch.arange(2.0)})
    path = tmp_path / "__0_0.distcp"
    path.write_bytes(first + second)
    code, out, err = _run(capsys, "verify", str(path))
    assert code == 2
    assert _errors(err) == [f"{ERROR_PREFIX}{path}: verification failed (1 problem)"]
    lines = out.splitlines()
    assert lines[0] == f"{path}: FAILED (pytorch, 1 tensor, 8 bytes read)"
    assert lines[1] == (
        f"  holds 2 zip archives back to back (a torch DCP rank file?); only the last is read "
        f"({len(second):,} bytes at offset {len(first):,}), the {len(first):,} bytes before it "
        "are not"
    )


def test_inspect_warns_about_archives_it_does_not_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _saved({"a": torch.arange(4.0)})
    path = tmp_path / "rank.distcp"
    path.write_bytes(one * 6)
    code, _, err = _run(capsys, "inspect", str(path))
    assert code == 0
    assert f"weightstore: warning: {path}: holds 6 zip archives back to back" in err
    assert not _errors(err)


def test_bytes_after_the_archive_fail_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(_saved({"a": torch.arange(4.0)}) + b"trailing garbage")
    code, out, _ = _run(capsys, "verify", str(path))
    assert code == 2
    assert "  16 bytes follow the zip archive's end, not read" in out.splitlines()


def test_a_single_torch_save_still_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(_saved({"a": torch.arange(4.0)}))
    code, out, err = _run(capsys, "verify", str(path))
    assert (code, err) == (0, "")
    assert out == f"{path}: ok (pytorch, 1 tensor, 16 bytes read)\n"


def test_a_set_shard_holding_two_archives_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "pytorch_model-00001-of-00002.bin"
    good.write_bytes(_saved({"a": torch.arange(4.0)}))
    doubled = tmp_path / "pytorch_model-00002-of-00002.bin"
    doubled.write_bytes(_saved({"x": torch.arange(2.0)}) + _saved({"b": torch.arange(2.0)}))
    index = {"metadata": {}, "weight_map": {"a": good.name, "b": doubled.name}}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    code, out, _ = _run(capsys, "verify", str(tmp_path))
    assert code == 2
    assert f"  shard {doubled.name} holds 2 zip archives back to back" in out
    assert f"shard {good.name}" not in out


def _tiny_zip(number: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"entry{number}", b"x")
    return buffer.getvalue()


def test_archives_are_counted_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_extent, "MAX_ARCHIVES_COUNTED", 3)
    path = tmp_path / "many.zip"
    path.write_bytes(b"".join(_tiny_zip(n) for n in range(4)))  # 3 before the last: the limit
    extent = zip_extent(path)
    assert extent is not None and (extent.archives_before, extent.counted_all) == (3, True)
    path.write_bytes(b"".join(_tiny_zip(n) for n in range(5)))  # 4 before: past it
    extent = zip_extent(path)
    assert extent is not None and (extent.archives_before, extent.counted_all) == (3, False)
    assert "holds at least 4 zip archives" in str(extent.describe())


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_a_real_dcp_rank_file_is_not_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    state = {"a": torch.arange(4.0), "b": torch.ones(3), "c": torch.zeros(2, 2)}
    try:
        dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    except Exception as err:  # a torch build whose DCP needs a process group here
        pytest.skip(f"dcp.save without a process group: {err}")
    ranks = sorted((tmp_path / "ckpt").glob("*.distcp"))
    extents = [zip_extent(rank) for rank in ranks]
    several = [r for r, e in zip(ranks, extents, strict=True) if e and e.archives_before]
    if not several:
        pytest.skip("this torch writes one archive per rank file")
    code, out, _ = _run(capsys, "verify", str(several[0]))
    assert code == 2
    assert "zip archives back to back" in out
