"""A full disk mid-run loses no finished result, and ``collect`` says exactly what is kept where.

A planted kernel (``fills_disk`` in tests/planted_kernels.py) fills a small tmpfs holding the working
folder, the journal and the database (or the ``--out`` artifact) while the run goes on: the journal
stops once the disk is full (how many lines still fit varies), the store at the end fails, and every
finished result must still be somewhere ``collect`` names, never in a journal that holds a few of them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.artifact import load_artifact
from db.journal import Journal
from kernelwatch.cli import main

PLANTED = ["collect", "--extra-kernels", "tests.planted_kernels", "--kernels", "planted", "--device", "cpu",
           "--no-progress", "--suite", "accuracy"]
VARIANTS = "correct,fills_disk,after,off_by_one_percent,unwritten"  # five results; the disk fills at the second
RESULTS = len(VARIANTS.split(","))


def _mount(folder: Path, size: str) -> None:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here (needs root with CAP_SYS_ADMIN): "
                    f"{(done.stderr or done.stdout).strip()}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "small"
    _mount(folder, "2M")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def full_run(small_disk: Path, tmp_path: Path, monkeypatch) -> Path:  # noqa: ANN001
    """The working folder on the small disk, the planted kernels set to fill it, $TMPDIR elsewhere."""
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.chdir(small_disk)
    monkeypatch.setenv("PLANTED_VARIANTS", VARIANTS)
    monkeypatch.setenv("PLANTED_FILL_PATH", str(small_disk / "filler"))
    monkeypatch.setenv("TMPDIR", str(spare))
    return spare


def _kept(stderr: str, spare: Path) -> Path:
    (path,) = spare.glob("kernelwatch-*.json.gz")
    assert f"all {RESULTS} finished results are kept in {path}" in stderr, stderr
    assert "the run is kept in" not in stderr, "the journal does not hold the run: it must never say so"
    return path


def _ingest_all(cli, kept: Path, tmp_path: Path) -> None:  # noqa: ANN001
    db = f"sqlite:///{tmp_path / 'after.db'}"
    result = cli.invoke(main, ["ingest", "--db", db, str(kept)])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(cli.invoke(main, ["runs", "--db", db, "--format", "json"]).output)
    rows = json.loads(cli.invoke(main, ["show", run["id"], "--db", db, "--format", "json"]).output)
    assert run["status"] == "complete" and len(rows) == RESULTS  # every case ran (two of them fail accuracy)
    assert "journal writes stopped (No space left on device)" in load_artifact(kept).run.notes
    assert {r["case"].split("/")[1] for r in rows} == set(VARIANTS.split(","))


def test_database_on_a_full_disk_keeps_every_result_in_tmpdir(full_run: Path, small_disk: Path, tmp_path: Path,
                                                               cli) -> None:  # noqa: ANN001
    result = cli.invoke(main, PLANTED)  # the database is ./kernelwatch.db, on the small disk
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    kept = _kept(result.stderr, full_run)
    assert not list(small_disk.glob(".kw-journal/*")), "the unfinished journal is removed"
    assert "was removed" in result.stderr
    _ingest_all(cli, kept, tmp_path)


def test_out_on_a_full_disk_keeps_every_result_in_tmpdir(full_run: Path, small_disk: Path, tmp_path: Path,
                                                          cli) -> None:  # noqa: ANN001
    out = small_disk / "run.json"
    result = cli.invoke(main, [*PLANTED, "--out", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "No space left on device" in result.stderr
    kept = _kept(result.stderr, full_run)
    assert not out.exists() and not out.with_name("run.json.journal").exists()
    assert len(load_artifact(kept).accuracy) == RESULTS
    _ingest_all(cli, kept, tmp_path)


def test_with_nowhere_to_write_it_says_how_many_the_journal_holds_and_how_many_are_lost(
        full_run: Path, small_disk: Path, tmp_path: Path, cli, monkeypatch) -> None:  # noqa: ANN001
    elsewhere = tmp_path / "elsewhere"
    _mount(elsewhere, "64k")
    try:
        with open(elsewhere / "filler", "wb", buffering=0) as f:  # the fallback folders are full too
            try:
                while True:
                    f.write(bytes(4096))
            except OSError:
                pass
        monkeypatch.setenv("TMPDIR", str(elsewhere))
        monkeypatch.setenv("HOME", str(elsewhere))
        monkeypatch.setattr("tempfile.tempdir", str(elsewhere))
        result = cli.invoke(main, [*PLANTED, "--out", str(small_disk / "run.json")])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "the run is kept in" not in result.stderr
        assert "could not be written anywhere" in result.stderr and "No space left on device" in result.stderr
        journal = small_disk / "run.json.journal"  # how many lines fit before the disk filled varies
        held = len(Journal(journal).results) if journal.exists() else 0
        assert held < RESULTS
        expected = (f"its journal {journal} holds {held} of the {RESULTS} finished results" if held else
                    f"all {RESULTS} finished results are lost")
        assert expected in result.stderr, result.stderr
        if held:
            assert f"the rest ({RESULTS - held}) are lost" in result.stderr
    finally:
        subprocess.run(["umount", "-l", str(elsewhere)], check=False)
