"""A full disk mid-run loses no finished result, and ``collect`` says exactly what is kept where.

A planted kernel (``fills_disk`` in tests/planted_kernels.py) fills a small tmpfs holding the working
folder, the journal and the database (or the ``--out`` artifact) while the run goes on: the journal
stops once the disk is full (how many lines still fit varies), the store at the end fails, and every
finished result must still be somewhere ``collect`` names, never in a journal that holds a few of them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.journal import Journal

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
VARIANTS = "correct,fills_disk,after,off_by_one_percent,unwritten"  # five results; the disk fills at the second
RESULTS = len(VARIANTS.split(","))


def _mount(folder: Path, size: str) -> None:
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(
            f"mounting a small tmpfs is not permitted here (needs root with CAP_SYS_ADMIN): "
            f"{(done.stderr or done.stdout).strip()}"
        )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "small"
    _mount(folder, "2M")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def full_run(small_disk: Path, tmp_path: Path, monkeypatch) -> Path:
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


def _ingest_all(cli, kept: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'after.db'}"
    result = cli.invoke(main, ["ingest", "--db", db, str(kept)])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(cli.invoke(main, ["runs", "--db", db, "--format", "json"]).output)
    rows = json.loads(cli.invoke(main, ["show", run["id"], "--db", db, "--format", "json"]).output)
    assert run["status"] == "complete" and len(rows) == RESULTS  # every case ran (two of them fail accuracy)
    assert "journal writes stopped (No space left on device)" in load_artifact(kept).run.notes
    assert {r["case"].split("/")[1] for r in rows} == set(VARIANTS.split(","))


def test_database_on_a_full_disk_keeps_every_result_in_tmpdir(
    full_run: Path, small_disk: Path, tmp_path: Path, cli
) -> None:
    result = cli.invoke(main, PLANTED)  # the database is ./kernelwatch.db, on the small disk
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    kept = _kept(result.stderr, full_run)
    assert not list(small_disk.glob(".kw-journal/*")), "the unfinished journal is removed"
    assert "was removed" in result.stderr
    _ingest_all(cli, kept, tmp_path)


def test_out_on_a_full_disk_keeps_every_result_in_tmpdir(full_run: Path, small_disk: Path, tmp_path: Path, cli) -> None:
    out = small_disk / "run.json"
    result = cli.invoke(main, [*PLANTED, "--out", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "No space left on device" in result.stderr
    kept = _kept(result.stderr, full_run)
    assert not out.exists() and not out.with_name("run.json.journal").exists()
    assert len(load_artifact(kept).accuracy) == RESULTS
    _ingest_all(cli, kept, tmp_path)


def test_with_nowhere_to_write_it_says_how_many_the_journal_holds_and_how_many_are_lost(
    full_run: Path, small_disk: Path, tmp_path: Path, cli, monkeypatch
) -> None:
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
        expected = (
            f"its journal {journal} holds {held} of the {RESULTS} finished results"
            if held
            else f"all {RESULTS} finished results are lost"
        )
        assert expected in result.stderr, result.stderr
        if held:
            assert f"the rest ({RESULTS - held}) are lost" in result.stderr
    finally:
        subprocess.run(["umount", "-l", str(elsewhere)], check=False)


# The hostile-input probe's case: $TMPDIR full, /tmp and /var/tmp unusable (read-only in a private mount namespace:
# mounting over /tmp would hide this test's own folders), --out on a full disk. tempfile.gettempdir() raised
# "No usable temporary directory found" inside the fallback before ~/.cache/kernelwatch was tried: that line was
# all collect said, the finished results were lost and the journal left behind was never named.
NAMESPACE = (
    "mount --rbind /tmp /tmp && mount -o remount,bind,ro /tmp && "
    'mount --rbind /var/tmp /var/tmp && mount -o remount,bind,ro /var/tmp && exec "$@"'
)


def _in_namespace(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE, "sh", *args],
        capture_output=True,
        text=True,
        **kwargs,
    )


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError:
            pass


@pytest.mark.parametrize("home", ["writable", "full"])
def test_with_every_temporary_folder_unusable_the_run_goes_to_home_or_is_counted_lost(
    home: str, small_disk: Path, tmp_path: Path, cli
) -> None:
    probe = _in_namespace(["sh", "-c", "! touch /tmp/kw-probe 2>/dev/null"])
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.strip()}")
    tmpdir, home_dir = tmp_path / "tmpdir", tmp_path / "home"
    _mount(tmpdir, "64k")
    _mount(home_dir, "4M" if home == "writable" else "64k")
    try:
        _fill(tmpdir)
        if home == "full":
            _fill(home_dir)
        out = small_disk / "run.json"
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "TMPDIR": str(tmpdir),
            "HOME": str(home_dir),
            "PLANTED_VARIANTS": VARIANTS,
            "PLANTED_FILL_PATH": str(small_disk / "filler"),
        }
        proc = _in_namespace(
            [sys.executable, "-m", "kernelwatch", *PLANTED, "--out", str(out)], cwd=small_disk, env=env, timeout=600
        )
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "No usable temporary directory" not in proc.stderr, proc.stderr
        journal = small_disk / "run.json.journal"
        cache = home_dir / ".cache" / "kernelwatch"
        if home == "writable":
            (kept,) = cache.glob("kernelwatch-*.json.gz")
            assert (
                f"all {RESULTS} finished results are kept in {kept}: store them with `kernelwatch ingest {kept}`"
                in proc.stderr
            ), proc.stderr
            assert f"its unfinished journal {journal} (" in proc.stderr and not journal.exists(), proc.stderr
            assert len(load_artifact(kept).accuracy) == RESULTS
            _ingest_all(cli, kept, tmp_path)
        else:
            assert "could not be written anywhere" in proc.stderr, proc.stderr
            for folder in (tmpdir, cache):  # each folder tried on its own, each named with why it failed
                assert re.search(
                    rf"{re.escape(str(folder))}/kernelwatch-[-0-9a-f]+\.json\.gz: cannot write "
                    r"\(No space left on device\)",
                    proc.stderr,
                ), proc.stderr
            held = len(Journal(journal).results) if journal.exists() else 0
            expected = (
                f"its journal {journal} holds {held} of the {RESULTS} finished results"
                if held
                else f"all {RESULTS} finished results are lost"
            )
            assert expected in proc.stderr, proc.stderr
    finally:
        for folder in (tmpdir, home_dir):
            subprocess.run(["umount", "-l", str(folder)], check=False)
