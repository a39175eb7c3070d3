"""controller.progress: plain lines when stderr is not a terminal (sparingly,
never a carriage return), a tqdm bar when it is, nothing when disabled."""

from __future__ import annotations

import io

from controller.progress import LINE_INTERVAL_S, BuildProgress, progress, steps


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_count_writes_a_line_past_each_tenth_at_most_every_interval_and_the_last() -> None:
    out, clock = io.StringIO(), _Clock()
    with progress(3000, "simulate gangops", unit="jobs", stream=out, clock=clock) as p:
        for done in range(0, 3001, 100):  # 1 s per 100 jobs, then ten times faster
            clock.now += 1.0 if done <= 1500 else 0.1
            p.set(done)
        p.set(3000)
    # 5 s after the start, then 5 s after each line, and only past a new tenth:
    assert out.getvalue() == (
        "simulate gangops: 13% (400/3000 jobs)\n"
        "simulate gangops: 30% (900/3000 jobs)\n"
        "simulate gangops: 46% (1400/3000 jobs)\n"
        "simulate gangops: 100% (3000/3000 jobs)\n"
    )
    assert LINE_INTERVAL_S == 5.0  # the lines above were worked out for it


def test_a_quick_count_writes_only_its_last_line() -> None:
    out, clock = io.StringIO(), _Clock()
    with progress(16, "fake nodes Ready", unit="nodes", stream=out, clock=clock) as p:
        for done in (0, 3, 9, 16):
            p.set(done)
    assert out.getvalue() == "fake nodes Ready: 100% (16/16 nodes)\n"


def test_steps_write_one_line_each() -> None:
    out = io.StringIO()
    with steps("dev-cluster up", stream=out) as s:
        s.step("waiting for kube-apiserver /readyz")
        s.step("waiting for kube-controller-manager /healthz")
    assert out.getvalue() == (
        "dev-cluster up: waiting for kube-apiserver /readyz\n"
        "dev-cluster up: waiting for kube-controller-manager /healthz\n"
    )


def test_disabled_writes_nothing() -> None:
    out = _Terminal()
    with progress(10, "simulate", enabled=False, stream=out) as p:
        p.set(10)
    with steps("dev-cluster up", enabled=False, stream=out) as s:
        s.step("waiting")
    assert out.getvalue() == ""


def test_a_terminal_gets_a_bar() -> None:
    out = _Terminal()
    with progress(10, "simulate gangops", unit="jobs", stream=out) as p:
        p.set(10)
    with steps("build", stream=out) as s:
        s.step("building etcd")
    text = out.getvalue()
    assert "\r" in text
    assert "simulate gangops: 100%|" in text and "10/10" in text
    assert "build: building etcd" in text


def test_a_count_that_stops_short_says_where() -> None:
    out, clock = io.StringIO(), _Clock()
    with progress(200, "simulate fifo-greedy", unit="jobs", stream=out, clock=clock) as p:
        p.set(150)
        p.set(170)
    assert out.getvalue() == "simulate fifo-greedy: 85% (170/200 jobs)\n"


_BUILD = [
    "build.sh: etcd is up to date in /cache/bin",
    "build.sh: building kube-apiserver (Kubernetes v1.35.4, 2000 packages, -p 2) ...",
    "build.sh: kube-apiserver: 600/2000 packages compiled (15s)",
    "build.sh: kube-apiserver: 1500/2000 packages compiled (30s)",
    "build.sh: built kube-apiserver in 41s",
    "build.sh: 1 binaries built in 41s; cache /cache/bin",
]


def test_the_build_on_a_terminal_is_a_bar_per_binary() -> None:
    out = _Terminal()
    bars = BuildProgress(stream=out)
    assert bars.terminal
    for line in _BUILD:
        bars.line(line)
    bars.close()
    text = out.getvalue()
    assert "build kube-apiserver" in text and "2000/2000" in text and "\r" in text
    assert "packages compiled" not in text  # the counts became the bar
    assert "built kube-apiserver in 41s" in text and "1 binaries built" in text


def test_the_build_elsewhere_is_its_own_lines() -> None:
    out = io.StringIO()
    bars = BuildProgress(stream=out)
    for line in _BUILD:
        bars.line(line)
    bars.close()
    assert out.getvalue() == "".join(line + "\n" for line in _BUILD)
