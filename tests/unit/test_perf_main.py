"""`make bench` (tests/perf/__main__.py): a benchmark that crashes is reported and
fails the run, and the benchmarks after it still run and print their figures (the
reconciler benchmark once stopped a whole run, an hour of figures, with a 403)."""

from __future__ import annotations

import pytest

import tests.perf.__main__ as bench
from tests.perf.harness import Result


def test_a_crash_fails_the_run_and_the_others_still_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def broken() -> list[Result]:
        ran.append("broken")
        raise RuntimeError("HTTP Error 403: Forbidden")

    def fine() -> list[Result]:
        ran.append("fine")
        return [Result("fine.figure", 1.0, "s", 2.0)]

    monkeypatch.setattr(bench, "BENCHMARKS", {"broken": broken, "fine": fine})
    assert bench.main([]) == 1
    out = capsys.readouterr()
    assert ran == ["broken", "fine"]
    assert "fine.figure" in out.out and "PASS" in out.out
    assert "1 benchmark(s) crashed: broken" in out.out
    assert "HTTP Error 403: Forbidden" in out.err  # the traceback
    assert bench.main(["broken"]) == 1  # no figures at all: still a report, no table
    assert "1 benchmark(s) crashed: broken" in capsys.readouterr().out


def test_passing_benchmarks_pass_and_a_missed_threshold_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "BENCHMARKS", {"a": lambda: [Result("a.x", 1.0, "s", 2.0)]})
    assert bench.main([]) == 0
    monkeypatch.setattr(bench, "BENCHMARKS", {"a": lambda: [Result("a.x", 3.0, "s", 2.0)]})
    assert bench.main([]) == 1
    assert "1 benchmark(s) missed their threshold" in capsys.readouterr().out
