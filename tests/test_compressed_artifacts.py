"""Run artifacts stored gzip-compressed: written by ``collect --out x.json.gz`` and ``export``, read by
``ingest`` and ``gate``, the same run as the plain JSON they hold; a gzip bomb is refused in one line."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import zlib
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.artifact import load_artifact, write_artifact
from kernelwatch.store.schema import MAX_ARTIFACT_BYTES, ArtifactError, content_hash

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "ci" / "history"
PLANTED = [
    "collect",
    "--project",
    str(Path(__file__).resolve().parent / "projects" / "planted.toml"),
    "--kernels",
    "planted",
    "--device",
    "cpu",
    "--no-progress",
    "--suite",
    "accuracy",
]


def _ingest(cli, db: str, *files: Path):
    return cli.invoke(main, ["ingest", "--db", db, *map(str, files)])


def test_collect_out_gz_writes_gzip_that_ingests_and_a_recompressed_copy_is_unchanged(
    tmp_path: Path, cli, monkeypatch
) -> None:
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,off_by_one_percent")
    out = tmp_path / "run.json.gz"
    result = cli.invoke(main, [*PLANTED, "--out", str(out)])
    assert result.exit_code == 0, result.output
    raw = out.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "--out NAME.gz is a gzip file"
    doc = json.loads(gzip.decompress(raw))
    assert {a["case"].split("/")[1] for a in doc["accuracy"]} == {"correct", "off_by_one_percent"}
    assert not out.with_name(out.name + ".journal").exists()

    db = f"sqlite:///{tmp_path / 'kw.db'}"
    first = _ingest(cli, db, out)
    assert first.exit_code == 0 and "ingested" in first.output, first.output
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(raw))
    again = tmp_path / "again.json.gz"  # another compressor, level and header: other bytes, the same run
    again.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1, mtime=12345))
    assert again.read_bytes() != raw
    for copy in (plain, again, out):
        result = _ingest(cli, db, copy)
        assert result.exit_code == 0 and "unchanged" in result.output, (copy, result.output)


def test_export_to_gz_round_trips_and_the_same_document_gives_the_same_bytes(tmp_path: Path) -> None:
    doc = load_artifact(min(HISTORY.glob("*.json.gz")))
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    write_artifact(doc, a)
    write_artifact(doc, b)
    assert a.read_bytes() == b.read_bytes()  # no time stamp or file name in the gzip header
    assert content_hash(load_artifact(a)) == content_hash(doc)
    write_artifact(doc, tmp_path / "c.json")
    assert (tmp_path / "c.json").read_bytes()[:1] == b"{", "a name without .gz stays plain JSON"


def test_the_shipped_history_is_compressed_and_holds_the_committed_json() -> None:
    """Every ci/history file is gzip (history grows by a fraction of the plain JSON); each holds one JSON
    document that is its own canonical text (``dumps``), so decompressing gives back what was measured."""
    files = sorted(HISTORY.iterdir())
    assert files and all(p.name.endswith(".json.gz") for p in files), [
        p.name for p in files if not p.name.endswith(".json.gz")
    ]
    plain = sum(len(gzip.decompress(p.read_bytes())) for p in files)
    assert sum(p.stat().st_size for p in files) < plain / 3


def test_the_history_json_is_byte_for_byte_what_was_committed_before_compression() -> None:
    """The conversion changed no measurement: each file's JSON has the hash its plain file had in git."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--format=%H", "-1", "--diff-filter=D", "--", "ci/history/*.json"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not sha:  # a source tree without git history: nothing to compare with
        return
    for path in sorted(HISTORY.glob("*.json.gz")):
        old = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{sha}^:ci/history/{path.name[:-3]}"], capture_output=True
        ).stdout
        if old:
            assert hashlib.sha256(old).digest() == hashlib.sha256(gzip.decompress(path.read_bytes())).digest(), path


def _bomb(path: Path, size: int) -> None:
    """A small file that decompresses to ``size`` bytes of spaces: gzip members of 16 MiB, concatenated."""
    member = gzip.compress(b" " * (16 << 20), compresslevel=9, mtime=0)
    path.write_bytes(member * -(-size // (16 << 20)))


def test_a_gzip_bomb_is_refused_in_one_line_and_stores_nothing(tmp_path: Path, cli) -> None:
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, MAX_ARTIFACT_BYTES + (16 << 20))
    assert bomb.stat().st_size < 1 << 20
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    result = _ingest(cli, db, bomb)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"{bomb}: decompresses to more than 512 MiB" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "kw.db").exists(), "a refused file creates nothing"


def test_broken_gzip_is_one_line(tmp_path: Path, cli) -> None:
    good = min(HISTORY.glob("*.json.gz")).read_bytes()
    cases = {
        "cut.json.gz": (good[: len(good) // 2], "cut short"),
        "garbage.json.gz": (b"\x1f\x8b" + b"x" * 40, "not a valid gzip file"),
        "bad-crc.json.gz": (good[:-8] + bytes(8), "not a valid gzip file"),
    }
    for name, (data, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        result = _ingest(cli, f"sqlite:///{tmp_path / 'kw.db'}", path)
        assert result.exit_code != 0 and "Traceback" not in result.output, name
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)


def test_a_bomb_inflating_inside_one_member_is_stopped_too(tmp_path: Path, monkeypatch) -> None:
    """One deflate stream past the limit (no member boundary to stop at): refused, not read to the end."""
    from kernelwatch.store import artifact

    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    path = tmp_path / "one.json.gz"
    path.write_bytes(comp.compress(b" " * (4 << 20)) + comp.flush())
    monkeypatch.setattr(artifact, "MAX_ARTIFACT_BYTES", 1 << 20)
    with pytest.raises(ArtifactError, match="decompresses to more than 1 MiB"):
        artifact.load_artifact(path)
