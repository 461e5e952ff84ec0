"""`kernelwatch dashboard` becomes the server (exec): stopping its PID stops Streamlit, nothing is left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _streamlit_processes(port: int) -> list[int]:
    """PIDs of processes whose command line runs streamlit on ``port``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(argv) and str(port).encode() in argv:
            out.append(int(entry.name))
    return out


def test_sigterm_to_the_command_stops_the_server(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    history = sorted((ROOT / "ci" / "history").glob("*.json.gz"))[:2]
    ingest_documents(open_database(url), [(str(p), load_artifact(p)) for p in history])
    port = _free_port()
    exe = str(Path(sys.executable).with_name("kernelwatch"))
    proc = subprocess.Popen(
        [exe, "dashboard", "--db", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError(f"no server on port {port}")
        assert _streamlit_processes(port) == [proc.pid]  # the command's own PID is the server
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.time() + 10
        while _listening(port) and time.time() < deadline:
            time.sleep(0.2)
        assert not _listening(port)
        assert _streamlit_processes(port) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
