"""Every command says what stopped it in one form: ``kernelwatch CMD: error: WHAT``, one line on
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
    "show": (
        ["show", DOCS[-1]["run"]["id"][:8], "--kernel", "mse_los", "--db", "{db}"],
        "has no kernel 'mse_los' (closest: mse_loss)",
    ),
    "gate": (
        ["gate", "--baseline", "synthetic/main", "--db", "{db}"],
        "cannot decide: give exactly one of --candidate RUN_ID or --artifact FILE",
    ),
    "confirm": (["confirm", "--case", CASE], "--case needs --baseline-commit SHA"),
    "bisect": (["bisect", MISSING_KEY, "--hardware", "H200", "--db", "{db}"], f"unknown case {MISSING_KEY!r}"),
    "ack": (
        ["ack", MISSING_KEY, "--hardware", "H200", "--commit", "abcdef12", "--reason", "x", "--db", "{db}"],
        f"unknown case {MISSING_KEY!r}: closest known: {CASE}",
    ),
    "synth": (["synth", "--step", "x", "--db", "{tmp}/s.db"], "'x': expected AT:FACTOR[:MATCH]"),
    "dashboard": (["dashboard", "--db", "{tmp}/absent.db"], "no database at"),
    "schema": (["schema", "--pretty"], "No such option '--pretty'"),
    "db upgrade": (
        ["db", "upgrade", "--db", "sqlite:///file:{tmp}/x.db?uri=true"],
        "SQLite URI filenames are not supported",
    ),
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
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"kernelwatch {command}: error: "), lines[0]
    assert says in lines[0], lines[0]
    assert not (tmp_path / "s.db").exists(), "a refused command created nothing"


def test_an_unknown_command_is_the_same_form(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch", "sohw"], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "kernelwatch: error: No such command 'sohw'. (see kernelwatch --help)\n",
    )


def test_outcomes_keep_their_exit_status(history: Path, tmp_path: Path) -> None:
    """The gate's verdict is not an error: a FAIL is 1 with its report on stdout (here: a run against a baseline
    of other cases' is PASS or FAIL, never 2)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelwatch",
            "gate",
            "--candidate",
            DOCS[-1]["run"]["id"],
            "--baseline",
            DOCS[-2]["run"]["id"],
            "--db",
            str(history),
            "--report-dir",
            str(tmp_path / "r"),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1) and proc.stdout.startswith("KernelWatch gate: "), proc.stderr


# ---------------------------------------------------------------------------------------------
# A Python without KernelWatch's packages
# ---------------------------------------------------------------------------------------------
def _system_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if (
            Path(candidate).exists()
            and subprocess.run([candidate, "-c", "import click"], capture_output=True).returncode != 0
        ):
            return candidate
    pytest.skip("no python3 without click on this machine")


def test_the_system_python_from_a_checkout_is_one_line_naming_click() -> None:
    """`/usr/bin/python3 -m kernelwatch runs` from the repository root: a 30-line ModuleNotFoundError before."""
    python = _system_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    proc = subprocess.run(
        [python, "-m", "kernelwatch", "runs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"kernelwatch runs: error: the Python package 'click' is missing from {python}: install "
        "KernelWatch with `make install` (or `pip install -e .` in a virtual environment), then "
        "run .venv/bin/kernelwatch\n"
    )


@pytest.mark.parametrize("command", ["runs", "ingest", "--help"])
def test_a_python_with_click_alone_names_the_next_missing_package(command: str, tmp_path: Path) -> None:
    """Only click (and the standard library) on sys.path: the first package a command imports past it is named."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "click").symlink_to(Path(click.__file__).parent)
    script = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; sys.argv = ['kernelwatch', *sys.argv[3:]]; "
        "import runpy; runpy.run_module('kernelwatch', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", script, str(site), str(ROOT), command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
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

    ours = "kernelwatch.store.nothing"
    assert missing_package(ModuleNotFoundError(f"No module named {ours!r}", name=ours)) is None
    # The old top-level names are someone else's packages now (a team's db/, Hugging Face's kernels).
    assert missing_package(ModuleNotFoundError("No module named 'db.nothing'", name="db.nothing")) == "db"
    assert missing_package(ModuleNotFoundError("No module named 'sqlalchemy'", name="sqlalchemy.orm")) == "sqlalchemy"
    assert "pip install -e '.[postgres]'" in missing_message("psycopg")


# ---------------------------------------------------------------------------------------------
# Commands that say what they know: runs in 100 columns, show's filters, bisect's range
# ---------------------------------------------------------------------------------------------
def test_runs_fits_100_columns_and_wide_keeps_everything(tmp_path: Path, cli) -> None:
    """The shipped history and the demo branch made `runs` 179 columns wide (the issue saw 194)."""
    from kernelwatch.store.artifact import dumps, parse_artifact
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import to_data
    from kernelwatch.store.synthetic import SyntheticHistory

    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=6, samples=5).documents()]
    docs[-1]["run"]["commit"]["branch"] = "feature/" + "a-branch-name-longer-than-any-column-should-be" * 2
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    ingest_documents(open_database(url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    table = cli.invoke(main, ["runs", "--db", url])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert max(map(len, lines)) <= 100, table.output
    assert lines[0].split() == ["id", "commit", "branch", "hardware", "status", "started", "perf", "acc", "prof"]
    newest = lines[2]
    assert newest.startswith(docs[-1]["run"]["id"][:8]) and "feature/a-bran" in newest and "…" in newest
    assert newest.split()[-3:] == ["6", "6", "-"]  # kernel timings, gating accuracy cases, no profiler rows
    wide = cli.invoke(main, ["runs", "--wide", "--db", url]).output
    assert docs[-1]["run"]["commit"]["branch"] in wide and "perf 6 + accuracy 6 · " in wide


def test_show_filters_by_kernel_and_case_text(history: Path, cli) -> None:
    run_id = DOCS[-1]["run"]["id"]
    import json

    every = json.loads(cli.invoke(main, ["show", run_id, "--format", "json", "--db", str(history)]).output)
    kernels = sorted({r["kernel"] for r in every})
    assert len(kernels) == 2
    one = json.loads(
        cli.invoke(main, ["show", run_id, "--kernel", kernels[0], "--format", "json", "--db", str(history)]).output
    )
    assert one and {r["kernel"] for r in one} == {kernels[0]} and len(one) < len(every)
    matched = json.loads(
        cli.invoke(main, ["show", run_id, "--match", "synthetic=1", "--format", "json", "--db", str(history)]).output
    )
    assert matched and all("synthetic=1" in r["case"] for r in matched) and len(matched) < len(every)
    table = cli.invoke(main, ["show", run_id, "--kernel", kernels[1], "--db", str(history)]).output
    assert kernels[1] in table.splitlines() and kernels[0] not in table.splitlines()
    none = cli.invoke(main, ["show", run_id, "--match", "no-such-text", "--db", str(history)])
    assert (none.exit_code, none.stderr) == (
        2,
        f"kernelwatch show: error: no case of run {run_id[:8]} contains "
        f"'no-such-text' ({len({r['case'] for r in every})} cases)\n",
    )


def _repo(path: Path, commits: int) -> list[str]:
    git = ["git", "-C", str(path), "-c", "user.email=kw@example.invalid", "-c", "user.name=kw"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for i in range(commits):
        (path / "f").write_text(str(i))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-qm", f"c{i}"], check=True)
    out = subprocess.run([*git, "rev-list", "--reverse", "HEAD"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_bisect_at_the_edge_prints_the_range_and_the_commands_to_narrow_it(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """9 runs, the last 30% slower: 'too few runs after it' named the first slow commit but not the range or
    what to run. Runs at commits 0-5 and 8 of a real repository: the two commits between are printed too."""
    from kernelwatch.store.artifact import dumps, parse_artifact
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import to_data
    from kernelwatch.store.synthetic import Step, SyntheticHistory

    shas = _repo(tmp_path / "repo", 9)
    history = SyntheticHistory(runs=7, cases=1, samples=10, noise=0.002, steps=[Step(6, 1.3)])
    docs = [to_data(d) for d in history.documents()]
    for doc, sha in zip(docs, [*shas[:6], shas[8]]):
        doc["run"]["commit"]["sha"] = sha
        doc["run"]["synthetic"] = False  # runs measured at these commits: a SYNTHETIC one's cannot be re-run
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    ingest_documents(open_database(url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    case = history.case_list()[0]["key"]
    monkeypatch.chdir(tmp_path / "repo")
    result = cli.invoke(main, ["bisect", case, "--hardware", "H200", "--db", url])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    good, bad = shas[5][:12], shas[8][:12]
    assert lines[0].startswith(f"a change of +30% in the last 1 run (from {bad} on): too few runs after it")
    assert lines[1] == f"  range: {good}..{bad} (the last run before the change, the first after it)"
    assert lines[2] == (
        f"  to tell a step from noise, measure {bad} again (3 runs after the change are needed, 1 so far):"
    )
    assert lines[3].strip().startswith(f"git switch --detach --end-of-options {bad} && kernelwatch collect")
    assert lines[4] == "  to find the commit within the range, re-run the 2 between them:"
    assert [line.split()[4] for line in lines[5:7]] == [shas[6][:12], shas[7][:12]]
    assert len(lines) == 7
