"""Every command says what stopped it in one form (issue 29.5): ``kernelwatch CMD: error: WHAT``, one line on
stderr, nothing on stdout, exit status 2 for bad usage and bad input. Before, the prefixes were "Error:",
"kernelwatch: error:", "kernelwatch gate: cannot decide:" and "kernelwatch confirm:", and bad input exited 1 in
ingest, export, show, ack and collect --resume but 2 elsewhere. Each case runs in its own process, as a user
runs it. Also: a Python without KernelWatch's packages is one line naming the package and the install command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from kernelwatch.cli import COMMANDS, main
from tests.test_damaged_db import CASE, DOCS, _store
from tests.test_readonly import _env

ROOT = Path(__file__).resolve().parents[1]
MISSING_KEY = CASE.replace("n=", "m=") if "n=" in CASE else CASE + "x"

# command -> (arguments, what the line must say). {db} is a small synthetic history, {tmp} a scratch folder.
BAD_INPUT = {
    "collect": (["collect", "--suite", "speed", "--device", "cpu"], "unknown suite 'speed'"),
    "ingest": (["ingest", "{tmp}/absent.json", "--db", "{db}"], "absent.json"),
    "export": (["export", "ffffffff", "-o", "-", "--db", "{db}"], "no run with id 'ffffffff'"),
    "runs": (["runs", "--db", "{tmp}/absent.db"], "no database at"),
    "show": (["show", DOCS[-1]["run"]["id"][:8], "--kernel", "mse_los", "--db", "{db}"],
             "has no kernel 'mse_los' (closest: mse_loss)"),
    "gate": (["gate", "--baseline", "synthetic/main", "--db", "{db}"],
             "cannot decide: give exactly one of --candidate RUN_ID or --artifact FILE"),
    "confirm": (["confirm", "--case", CASE], "--case needs --baseline-commit SHA"),
    "bisect": (["bisect", MISSING_KEY, "--hardware", "H200", "--db", "{db}"], f"unknown case {MISSING_KEY!r}"),
    "ack": (["ack", MISSING_KEY, "--hardware", "H200", "--commit", "abcdef12", "--reason", "x", "--db", "{db}"],
            f"unknown case {MISSING_KEY!r}: closest known: {CASE}"),
    "synth": (["synth", "--step", "x", "--db", "{tmp}/s.db"], "'x': expected AT:FACTOR[:MATCH]"),
    "dashboard": (["dashboard", "--db", "{tmp}/absent.db"], "no database at"),
    "schema": (["schema", "--pretty"], "No such option '--pretty'"),
    "db upgrade": (["db", "upgrade", "--db", "sqlite:///file:{tmp}/x.db?uri=true"],
                   "SQLite URI filenames are not supported"),
    "db current": (["db", "current", "--db", "{tmp}/absent.db"], "no database at"),
    "doctor": (["doctor", "--device", "tpu"], "Invalid value for '--device'"),
}


def _commands() -> list[str]:
    """Every command and subcommand, by name, as COMMANDS lists them."""
    names = []
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        if isinstance(command, click.Group):
            names += [f"{name} {sub}" for sub in command.commands]
        else:
            names.append(name)
    return names


def test_the_table_covers_every_command_and_each_goes_through_clean_errors() -> None:
    assert sorted(BAD_INPUT) == sorted(_commands())
    for name in _commands():
        command = main.get_command(click.Context(main), name.split()[0])
        if " " in name:
            command = command.commands[name.split()[1]]
        assert getattr(command.callback, "clean_errors", False), f"{name} does not go through clean_errors"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("history") / "kw.db"
    _store(f"sqlite:///{path}")
    return path


@pytest.mark.parametrize("command", BAD_INPUT)
def test_bad_input_is_one_line_with_the_commands_name_and_exit_2(command: str, history: Path, tmp_path: Path) -> None:
    args, says = BAD_INPUT[command]
    args = [a.replace("{db}", str(history)).replace("{tmp}", str(tmp_path)) for a in args]
    proc = subprocess.run([sys.executable, "-m", "kernelwatch", *args], env=_env(), capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"kernelwatch {command}: error: "), lines[0]
    assert says in lines[0], lines[0]
    assert not (tmp_path / "s.db").exists(), "a refused command created nothing"


def test_an_unknown_command_is_the_same_form(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "kernelwatch", "sohw"], env=_env(), capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr) == (2, "kernelwatch: error: No such command 'sohw'. (see kernelwatch "
                                                 "--help)\n")


def test_outcomes_keep_their_exit_status(history: Path, tmp_path: Path) -> None:
    """The gate's verdict is not an error: a FAIL is 1 with its report on stdout (here: a run against a baseline
    of other cases' is PASS or FAIL, never 2)."""
    proc = subprocess.run([sys.executable, "-m", "kernelwatch", "gate", "--candidate", DOCS[-1]["run"]["id"],
                           "--baseline", DOCS[-2]["run"]["id"], "--db", str(history), "--report-dir",
                           str(tmp_path / "r")], env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("## KernelWatch gate: "), proc.stderr


# ---------------------------------------------------------------------------------------------
# A Python without KernelWatch's packages
# ---------------------------------------------------------------------------------------------
def _system_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists() and subprocess.run([candidate, "-c", "import click"],
                                                       capture_output=True).returncode != 0:
            return candidate
    pytest.skip("no python3 without click on this machine")


def test_the_system_python_from_a_checkout_is_one_line_naming_click() -> None:
    """`/usr/bin/python3 -m kernelwatch runs` from the repository root: a 30-line ModuleNotFoundError before."""
    python = _system_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    proc = subprocess.run([python, "-m", "kernelwatch", "runs"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"kernelwatch runs: error: the Python package 'click' is missing from {python}: install "
                           "KernelWatch with `make install` (or `pip install -e .` in a virtual environment), then "
                           "run .venv/bin/kernelwatch\n")


@pytest.mark.parametrize("command", ["runs", "ingest", "--help"])
def test_a_python_with_click_alone_names_the_next_missing_package(command: str, tmp_path: Path) -> None:
    """Only click (and the standard library) on sys.path: the first package a command imports past it is named."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "click").symlink_to(Path(click.__file__).parent)
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; sys.argv = ['kernelwatch', *sys.argv[3:]]; "
              "import runpy; runpy.run_module('kernelwatch', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", script, str(site), str(ROOT), command], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    if command == "--help":  # listing commands imports nothing past click
        assert proc.returncode == 0 and "Commands:" in proc.stdout, proc.stderr
        return
    lines = proc.stderr.splitlines()
    assert (proc.returncode, len(lines)) == (2, 1), proc.stderr
    assert lines[0].startswith(f"kernelwatch {command}: error: the Python package '"), lines[0]
    assert f"is missing from {sys.executable}: install KernelWatch with `make install`" in lines[0], lines[0]


def test_a_missing_module_of_kernelwatch_itself_stays_a_traceback() -> None:
    """A bug (an import of ours that fails) is not disguised as an environment without a dependency."""
    from kernelwatch.dependencies import missing_message, missing_package

    assert missing_package(ModuleNotFoundError("No module named 'db.nothing'", name="db.nothing")) is None
    assert missing_package(ModuleNotFoundError("No module named 'sqlalchemy'", name="sqlalchemy.orm")) == "sqlalchemy"
    assert "pip install -e '.[postgres]'" in missing_message("psycopg")
