"""Options mean what they say: a minimum effect is a fraction or a percentage, never a bare 5 read as
500%; NaN and infinities are refused by every float option before any work; a report file that cannot be written
is refused before measuring.

Before (d3bce35): `gate --min-effect 5` PASSed a candidate 15% slower on its MSELoss cases (exit 0; `5%` was
refused); `--case-min-effect mse_loss=5` likewise; `bisect --min-effect 5` looked for 500% steps (exit 0);
`confirm --min-effect nan` and `--round-ms nan` went on to work (a dry run exited 0; a real one measured eight rounds,
then a pydantic traceback or `KeyError: 'median_ms'`); `confirm --report-file FIFO` was refused only after the
measurement; `collect --case-timeout nan` was accepted.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from kernelwatch.cli import main
from kernelwatch.options import Effect, Finite
from kernelwatch.store.artifact import dumps
from kernelwatch.store.synthetic import Step
from tests.test_gate import RUNS, _gate, _history


@pytest.mark.parametrize(
    ("text", "value"), [("5%", 0.05), ("0.05", 0.05), (" 12.5% ", 0.125), ("1", 1.0), ("150%", 1.5), (0.05, 0.05)]
)
def test_an_effect_is_a_fraction_or_a_percentage(text, value) -> None:
    assert Effect(0, 10, min_open=True, max_open=True).convert(text, None, None) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("5", "5 reads as 500% (a bare number is a fraction: 0.05 = 5%); write 5% for 5 percent"),
        ("1.5", "write 1.5% for 1.5 percent"),
        ("nan", "'nan' is not a finite number"),
        ("nan%", "'nan' is not a finite number"),
        ("-inf", "'-inf' is not a finite number"),
        ("0%", "not in the range"),
        ("1000%", "not in the range"),
        ("five", "is not a valid float"),
    ],
)
def test_a_bare_number_over_one_and_nan_are_refused(text: str, why: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        Effect(0, 10, min_open=True, max_open=True).convert(text, None, None)
    assert why in caught.value.message


def test_click_ranges_let_nan_through_and_finite_does_not() -> None:
    """The defect behind `--round-ms nan`: every comparison with NaN is false, so no bound refuses it."""
    assert click.FloatRange(1, 10_000).convert("nan", None, None) != click.FloatRange(1, 10_000).convert(
        "1", None, None
    )
    with pytest.raises(click.BadParameter, match="not a finite number"):
        Finite(1, 10_000).convert("nan", None, None)
    with pytest.raises(click.BadParameter, match="not in the range"):
        Finite(1, 10_000).convert("0.5", None, None)


def test_min_effect_5_is_refused_not_read_as_500_percent(db_url: str, tmp_path: Path, cli) -> None:
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])  # its MSELoss cases 15% slower
    for given, code in (("0.05", 1), ("5%", 1), ("30%", 0)):
        result = _gate(cli, db_url, candidate, tmp_path, "--min-effect", given)
        assert result.exit_code == code, (given, result.output)
    for option, given in (("--min-effect", "5"), ("--case-min-effect", "mse_loss=5")):
        result = _gate(cli, db_url, candidate, tmp_path, option, given)
        lines = result.output.strip().splitlines()
        assert (result.exit_code, len(lines)) == (2, 1), (given, result.output)
        assert "5 reads as 500%" in lines[0] and "write 5% for 5 percent" in lines[0], lines[0]
    assert _gate(cli, db_url, candidate, tmp_path, "--case-min-effect", "mse_loss=30%").exit_code == 0
    case = candidate["perf"][0]["case"]
    bisect = cli.invoke(main, ["bisect", case, "--hardware", "H200", "--min-effect", "5", "--db", db_url])
    assert bisect.exit_code == 2 and "write 5% for 5 percent" in bisect.output, bisect.output


@pytest.fixture
def flagged(tmp_path: Path) -> list[str]:
    """confirm's arguments for a candidate the gate flags (its MSELoss cases 15% slower), as a dry run: the old
    code listed the cases and exited 0 without looking at the options that the measurement uses."""
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate = _history(url, steps=[Step(RUNS, 1.15, "mse_loss")])
    path = tmp_path / "candidate.json"
    path.write_text(dumps(candidate))
    return ["confirm", "--artifact", str(path), "--baseline", "synthetic/main", "--db", url, "--dry-run"]


def test_confirm_refuses_nan_and_an_unwritable_report_before_any_work(flagged: list[str], tmp_path: Path, cli) -> None:
    listed = cli.invoke(main, flagged)
    assert listed.exit_code == 0 and "mse_loss" in listed.stdout, listed.output  # the control: the options are fine
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "a-file").write_text("")
    for option, value, why in (
        ("--min-effect", "nan", "'nan' is not a finite number"),
        ("--min-effect", "5", "write 5% for 5 percent"),
        ("--round-ms", "nan", "'nan' is not a finite number"),
        ("--round-ms", "inf", "'inf' is not a finite number"),
        ("--case-seconds", "nan", "'nan' is not a finite number"),  # it measured for nan seconds a case
        ("--case-seconds", "0", "0 is not in the range 0.1<=x<=3600"),
        ("--report-file", str(tmp_path / "fifo"), "is a FIFO, not a regular file"),
        ("--report-file", str(tmp_path / "a-file" / "report.md"), "Not a directory"),
        ("--report-file", str(tmp_path / "missing" / "report.md"), "does not exist"),
        ("--report-file", "/proc/kernelwatch-report.md", "cannot be written"),  # a read-only place, even for root
    ):
        result = cli.invoke(main, [*flagged, option, value])
        lines = result.output.strip().splitlines()
        assert (result.exit_code, len(lines)) == (2, 1), (option, value, result.output)
        assert lines[0].startswith(f"kernelwatch confirm: error: Invalid value for '{option}': "), lines[0]
        assert why in lines[0], lines[0]
    assert (tmp_path / "fifo").is_fifo() and not (tmp_path / "missing").exists()


def test_collect_refuses_a_nan_timeout_before_any_work(tmp_path: Path, cli) -> None:
    out = tmp_path / "run.json"
    args = ["collect", "--device", "cpu", "--suite", "accuracy", "-k", "mse_loss", "--match", "none-such"]
    result = cli.invoke(main, [*args, "--case-timeout", "nan", "--out", str(out)])
    assert result.exit_code == 2 and "'--case-timeout': 'nan' is not a finite number" in result.output, result.output
    assert not out.exists()
