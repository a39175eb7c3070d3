"""`gangops run` from the command line: verbosity, help, and a clear error without
credentials (the parts that need no cluster; the rest is in tests/integration)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.cli import main


@pytest.fixture
def root_level() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.mark.parametrize(("flags", "level"), [(["-v"], logging.DEBUG), ([], logging.INFO)])
def test_verbose_turns_on_debug_logging(
    flags: list[str], level: int, tmp_path: Path, root_level: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    missing = tmp_path / "no-such.kubeconfig"
    assert main(["run", *flags, "--kubeconfig", str(missing)]) == 2
    assert logging.getLogger().getEffectiveLevel() == level
    assert (
        f"gangops run: 0 BadConfig: no usable credentials in {missing}" in capsys.readouterr().err
    )


def test_help_says_what_run_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "gang scheduler" in out
    assert "gangops install-crds" in out
    assert "--no-scheduler" in out


def test_alerts_are_taken_only_by_the_leader_while_its_fence_is_up() -> None:
    """Found by a review: a replica whose fence had dropped answered 200 and queued
    alerts no term of it would act on."""
    from controller.run import accepts_alerts

    class Elector:
        leading = True

        def is_leader(self) -> bool:
            return self.leading

    actor, elector = object(), Elector()
    assert accepts_alerts(actor, elector)  # type: ignore[arg-type]
    elector.leading = False
    assert not accepts_alerts(actor, elector)  # type: ignore[arg-type]
    assert not accepts_alerts(None, None) and accepts_alerts(actor, None)  # type: ignore[arg-type]
