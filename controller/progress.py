"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines otherwise.

`gangops simulate` (jobs simulated, per scheduler), `gangops dev-cluster up`
(its phases, then fake nodes Ready) and the control-plane build take from
seconds to many minutes, so they say how far they are. On a terminal that is
a tqdm bar redrawn in place. In a CI log or a pipe a redrawn bar leaves a
trail of carriage returns, so the same progress is written as plain lines
instead, and sparingly: a count writes a line when it passes another tenth
of its total, at most one per `LINE_INTERVAL_S`, and always the count it
ends at; steps write one line each. Disabled (`--no-progress`), both write nothing.

`progress(total, desc)` counts toward a known total; `steps(desc)` names the
phases of work whose length is not known in advance. Both are context
managers that close the bar on the way out; while a bar is drawn, log
records bound for the console are written above it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import NoReturn, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ["LINE_INTERVAL_S", "BuildProgress", "Progress", "Steps", "progress", "steps"]

LINE_INTERVAL_S = 5.0
"""Plain lines (stderr not a terminal): at most one per this many seconds for a count."""


class Progress:
    """A count toward a total; `set` it to the amount done so far."""

    def __init__(
        self,
        *,
        total: int,
        desc: str,
        unit: str,
        stream: TextIO | None,
        clock: Callable[[], float],
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self._clock = clock
        self._bar: tqdm[NoReturn] | None = None
        self._lines: TextIO | None = None
        if stream is not None and stream.isatty():
            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", file=stream, leave=True)
        else:
            self._lines = stream
        self._shown_at = clock()
        self._shown_tenth = 0
        self._done = 0
        self._shown: int | None = None

    def set(self, done: int) -> None:
        """`done` of `total` are done now."""
        self._done = done
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            return
        if self._lines is None or self._shown == self.total:
            return
        now = self._clock()
        tenth = 10 * done // self.total if self.total > 0 else 10
        if done >= self.total or (
            tenth > self._shown_tenth and now - self._shown_at >= LINE_INTERVAL_S
        ):
            self._shown_at, self._shown_tenth = now, tenth
            self._line()

    def _line(self) -> None:
        assert self._lines is not None
        self._shown = self._done
        percent = 100 * self._done // self.total if self.total > 0 else 100
        unit = f" {self.unit}" if self.unit else ""
        self._lines.write(f"{self.desc}: {percent}% ({self._done}/{self.total}{unit})\n")
        self._lines.flush()

    def close(self) -> None:
        """Close the bar; in plain lines, write where the count stopped if not yet written."""
        if self._bar is not None:
            self._bar.close()
        elif self._lines is not None and self._shown != self._done:
            self._line()


class Steps:
    """Named phases of work whose length is not known in advance."""

    def __init__(self, *, desc: str, stream: TextIO | None) -> None:
        self.desc = desc
        self._bar: tqdm[NoReturn] | None = None
        self._lines: TextIO | None = None
        if stream is not None and stream.isatty():
            self._bar = tqdm(desc=desc, file=stream, leave=False, bar_format="{desc} [{elapsed}]")
        else:
            self._lines = stream

    def step(self, text: str) -> None:
        """The work is now at `text` (e.g. "waiting for kube-apiserver /readyz")."""
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_description_str(f"{self.desc}: {text}")
        elif self._lines is not None:
            self._lines.write(f"{self.desc}: {text}\n")
            self._lines.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def progress(
    total: int,
    desc: str,
    *,
    unit: str = "",
    enabled: bool = True,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Progress]:
    """A count toward `total` on `stream` (default stderr): a bar on a terminal,
    lines like "simulate gangops: 40% (1200/3000 jobs)" otherwise, nothing when
    not `enabled`."""
    out = (stream or sys.stderr) if enabled else None
    p = Progress(total=total, desc=desc, unit=unit, stream=out, clock=clock)
    try:
        with _logs_above(p._bar):
            yield p
    finally:
        p.close()


@contextmanager
def steps(desc: str, *, enabled: bool = True, stream: TextIO | None = None) -> Iterator[Steps]:
    """Named phases on `stream` (default stderr): the current one on a bar on a
    terminal, a line "desc: text" per step otherwise, nothing when not `enabled`."""
    s = Steps(desc=desc, stream=(stream or sys.stderr) if enabled else None)
    try:
        with _logs_above(s._bar):
            yield s
    finally:
        s.close()


def _logs_above(bar: tqdm[NoReturn] | None) -> AbstractContextManager[object]:
    """While a bar is drawn, log records to the console go above it instead of
    through it."""
    return nullcontext() if bar is None else logging_redirect_tqdm()


_BUILDING = re.compile(r"^build\.sh: building (\S+) \(.*?(\d+) packages")
_COMPILED = re.compile(r"^build\.sh: (\S+): (\d+)/\d+ packages compiled")
_BUILT = re.compile(r"^build\.sh: built (\S+) in")


class BuildProgress:
    """The control-plane build's lines (clusters/local/build.sh), fed one by one to
    `line`: on a terminal a bar of packages compiled per binary, the other lines
    above it; elsewhere the lines as they are (they already say how far it is)."""

    def __init__(self, *, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self.terminal = self._stream.isatty()
        self._open: AbstractContextManager[Progress] | None = None
        self._bar: Progress | None = None
        self._total = 0

    def line(self, text: str) -> None:
        """Show one line of the build's output."""
        if self.terminal:
            if m := _BUILDING.match(text):
                self.close()
                self._total = int(m[2])
                self._open = progress(self._total, f"build {m[1]}", unit="packages",
                                      stream=self._stream)  # fmt: skip
                self._bar = self._open.__enter__()
                return
            if self._bar is not None and (m := _COMPILED.match(text)):
                self._bar.set(min(int(m[2]), self._total))
                return
            if self._bar is not None and _BUILT.match(text):
                self._bar.set(self._total)
                self.close()
        if self._bar is not None:
            tqdm.write(text, file=self._stream)
        else:
            print(text, file=self._stream)

    def close(self) -> None:
        """Close the current bar, if one is drawn."""
        if self._open is not None:
            self._open.__exit__(None, None, None)
        self._open = self._bar = None
