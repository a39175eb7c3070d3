"""The informer's loop against scripted list and watch responses."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from controller.kube.client import RESOURCES, ApiError
from controller.kube.clock import FakeClock
from controller.kube.informer import Informer, key_of

from .fakes import FakeKube


def cm(name: str, rv: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
    }


def test_list_then_watch_bookmarks_and_relist_on_410() -> None:
    kube = FakeKube()
    events: list[tuple[str, str]] = []
    kube.lists = [([cm("a", "1"), cm("b", "2")], "10"), ([cm("a", "11"), cm("c", "12")], "20")]
    kube.watches = [
        [
            {"type": "MODIFIED", "object": cm("a", "11")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
        ],
        [{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}],
    ]
    inf = Informer(
        kube,
        RESOURCES["ConfigMap"],
        handler=lambda t, o: events.append((t, o["metadata"]["name"])),
        clock=FakeClock(),
    )
    inf._list()
    assert inf.synced and inf.resource_version == "10"
    assert inf._watch() is True  # the stream ended: watch again from rv 15
    assert inf.resource_version == "15"
    assert inf._watch() is False  # 410 Gone: relist
    inf._list()
    assert events == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        # the relist reports what changed while no watch was open
        ("ADDED", "c"),
        ("DELETED", "b"),
    ]
    assert {o["metadata"]["name"] for o in inf.items()} == {"a", "c"}
    assert inf.relists == 2


def test_a_transform_shapes_what_is_listed_watched_assumed_and_handed_on() -> None:
    kube = FakeKube()
    big = {**cm("a", "1"), "data": {"blob": "x" * 1000}}
    kube.lists = [([big], "10")]
    kube.watches = [[{"type": "MODIFIED", "object": {**cm("a", "11"), "data": {"k": "v"}}}]]
    seen: list[dict[str, Any]] = []

    def slim(o: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": o["metadata"], "keys": sorted(o.get("data") or {})}

    inf = Informer(
        kube, RESOURCES["ConfigMap"], transform=slim, handler=lambda t, o: seen.append(o)
    )
    inf.relist()
    assert inf.synced and inf.get("a", "ns") == {"metadata": big["metadata"], "keys": ["blob"]}
    inf._watch()
    assert inf.get("a", "ns") == {"metadata": cm("a", "11")["metadata"], "keys": ["k"]}
    inf.assume({**cm("a", "12"), "data": {"z": "1"}})
    assert inf.get("a", "ns") == {"metadata": cm("a", "12")["metadata"], "keys": ["z"]}
    assert [o["keys"] for o in seen] == [["blob"], ["k"]]


def test_assume_keeps_the_newer_object() -> None:
    inf = Informer(FakeKube(), RESOURCES["ConfigMap"])
    inf.assume(cm("a", "7"))
    inf.assume(cm("a", "5"))  # an older watch event arriving late
    assert inf.get("a", "ns")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    inf.forget("a", "ns")
    assert inf.get("a", "ns") is None


def test_a_watch_event_older_than_an_assumed_write_does_not_replace_it() -> None:
    """The binder writes a job's status twice in a row (rv 6, then 7) and assumes each;
    the watch, a little behind, then delivers rv 6: the cache keeps 7, or a step in
    between would read the job's record as it was before (and clean up the pods of
    the attempt it had just launched as another attempt's)."""
    kube = FakeKube()
    kube.lists = [([cm("a", "1"), cm("b", "2")], "10")]
    kube.watches = [
        [
            {"type": "MODIFIED", "object": cm("a", "6")},
            {"type": "DELETED", "object": cm("b", "8")},  # an older b, gone
        ],
        [
            {"type": "MODIFIED", "object": cm("a", "7")},
            {"type": "DELETED", "object": cm("b", "12")},
            {"type": "DELETED", "object": cm("c", "13")},  # never seen here
        ],
    ]
    events: list[tuple[str, str]] = []
    inf = Informer(
        kube,
        RESOURCES["ConfigMap"],
        handler=lambda t, o: events.append((t, o["metadata"]["resourceVersion"])),
    )
    inf._list()
    inf.assume(cm("a", "7"))
    inf.assume(cm("b", "9"))  # b created again by this process
    inf._watch()
    assert inf.get("a", "ns")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    assert inf.get("b", "ns")["metadata"]["resourceVersion"] == "9"  # type: ignore[index]
    inf._watch()  # the events of the writes themselves, then b deleted
    assert inf.get("a", "ns")["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    assert inf.get("b", "ns") is None
    assert events[2:] == [
        ("MODIFIED", "6"), ("DELETED", "8"), ("MODIFIED", "7"), ("DELETED", "12"), ("DELETED", "13")
    ]  # fmt: skip


def test_errors_back_off_and_retry_until_stopped() -> None:
    kube = FakeKube()
    clock = FakeClock()
    kube.down = True
    inf = Informer(kube, RESOURCES["ConfigMap"], clock=clock)
    waits: list[float] = []

    def wait(event: Any, seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) == 5:
            inf._stop.set()
        return False

    clock.wait = wait  # type: ignore[method-assign]
    inf.run()
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert not inf.synced


class _WriteDuringList(FakeKube):
    """The list's snapshot is taken at rv 20 while this process writes: `a` modified
    to rv 21 and `new` created at rv 22, both assumed, before the list's answer is
    read (a paginated list of many pods takes seconds)."""

    inf: Informer

    def list(self, res: Any, **kw: Any) -> tuple[list[dict[str, Any]], str]:
        self.inf.assume(cm("a", "21"))
        self.inf.assume(cm("new", "22"))
        return [cm("a", "11")], "20"


def test_a_relist_keeps_the_writes_assumed_while_it_was_served() -> None:
    """Found by a review: the list replaced the cache whole, so a step read its own
    write as undone, and an object it had just created was reported DELETED."""
    kube = _WriteDuringList()
    events: list[tuple[str, str, str]] = []
    inf = Informer(
        kube,
        RESOURCES["ConfigMap"],
        handler=lambda t, o: events.append((t, *key_of(o)[1:], o["metadata"]["resourceVersion"])),
        clock=FakeClock(),
    )
    kube.inf = inf
    inf._list()
    assert (inf.get("a", "ns") or {})["metadata"]["resourceVersion"] == "21"
    assert inf.get("new", "ns") is not None
    assert not [e for e in events if e[0] == "DELETED" or e[2] == "11"]


def test_a_write_assumed_after_its_delete_event_does_not_bring_the_object_back() -> None:
    """Found by a review: a write's answer (rv 50) assumed after the watch delivered
    the object's deletion (rv 51) put it back in the cache until the next relist."""
    kube = FakeKube()
    kube.lists = [([cm("a", "10"), cm("b", "11")], "12"), ([cm("b", "11")], "60")]
    kube.watches = [
        [
            {"type": "MODIFIED", "object": cm("a", "50")},
            {"type": "DELETED", "object": cm("a", "51")},
        ]
    ]
    inf = Informer(kube, RESOURCES["ConfigMap"], clock=FakeClock())
    inf._list()
    inf._watch()
    inf.assume(cm("a", "50"))
    assert inf.get("a", "ns") is None
    inf.assume(cm("a", "52"))  # made again, after the delete
    assert inf.get("a", "ns") is not None
    inf._list()  # gone by the list at 60: a late answer at 55 stays out too
    inf.assume(cm("a", "55"))
    assert inf.get("a", "ns") is None


def test_the_watch_event_of_a_create_does_not_undo_the_binding_assumed_at_its_version() -> None:
    """Found by a review: a binding's answer carries no object, so the binder assumes
    the bound pod at its create's resourceVersion; the create's own ADDED event (same
    version, no node) replaced it, and the pod index lost the pod's GPUs until the
    binding's event came."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "ns", "resourceVersion": "30"},
        "spec": {"containers": []},
    }
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "gpu-1"}}
    kube = FakeKube()
    kube.lists = [([], "10"), ([pod], "30")]
    kube.watches = [[{"type": "ADDED", "object": pod}]]
    index: list[Any] = []
    inf = Informer(kube, RESOURCES["Pod"], clock=FakeClock(),
                   on_store=lambda k, o: index.append(o and o["spec"].get("nodeName")))  # fmt: skip
    inf._list()
    inf.assume(pod)
    inf.assume(bound)
    inf._watch()
    inf._list()  # a list at the create's version neither
    assert (inf.get("w-0", "ns") or {})["spec"].get("nodeName") == "gpu-1"
    assert index == [None, "gpu-1"]


class _Waits(FakeClock):
    """Records each wait; stops the informer after `n`."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.waits = n, list[float]()
        self.informer: Informer | None = None

    def wait(self, event: Any, seconds: float) -> bool:
        self.waits.append(seconds)
        if len(self.waits) >= self.n and self.informer is not None:
            self.informer._stop.set()
        return super().wait(event, seconds)


class _WatchRefused(FakeKube):
    """LIST works; WATCH is refused (no `watch` right, API Priority and Fairness)."""

    def list(self, res: Any, **kw: Any) -> tuple[list[dict[str, Any]], str]:
        return [cm("a", "1")], "10"

    def watch(self, res: Any, **kw: Any) -> Any:
        raise ApiError(429, "TooManyRequests", "too many requests")


class _WatchThrottled(_WatchRefused):
    """WATCH refused by API Priority and Fairness, which says how long to wait."""

    def watch(self, res: Any, **kw: Any) -> Any:
        raise ApiError(429, "TooManyRequests", "too many requests", retry_after=7.0)


def test_a_refusal_that_says_how_long_to_wait_is_waited_for_at_least_that() -> None:
    """Found by a review: the backoff alone asked again after 0.5 s whatever the
    server said (`Retry-After`); the server's figure is a floor, the backoff goes on
    doubling under it."""
    clock = _Waits(7)
    inf = Informer(_WatchThrottled(), RESOURCES["ConfigMap"], clock=clock)
    clock.informer = inf
    inf.run()
    assert clock.waits == [7, 7, 7, 7, 8, 16, 30]


class _WatchEndsAtOnce(FakeKube):
    def list(self, res: Any, **kw: Any) -> tuple[list[dict[str, Any]], str]:
        return [cm("a", "1")], "10"

    def watch(self, res: Any, **kw: Any) -> Any:
        return iter(())


def test_a_refused_or_empty_watch_backs_off_though_the_list_works() -> None:
    """Found by a review: a list that worked reset the backoff, so a refused watch
    meant a full LIST every 0.5 s for ever, and a stream that ended at once, empty,
    was reopened without any wait (156,479 watches a second at the HTTP seam)."""
    for kube in (_WatchRefused(), _WatchEndsAtOnce()):
        clock = _Waits(7)
        inf = Informer(kube, RESOURCES["ConfigMap"], clock=clock)
        clock.informer = inf
        inf.run()
        assert clock.waits == [0.5, 1, 2, 4, 8, 16, 30], type(kube).__name__


class _BrokenThenBlocking(FakeKube):
    """Scripted watches, then one that stays open until the informer stops."""

    stop: threading.Event

    def watch(self, res: Any, **kw: Any) -> Any:
        if self.watches:
            yield from self.watches.pop(0)
            return
        self.stop.wait(10)


def test_a_defect_in_on_store_does_not_end_the_loop() -> None:
    """Found by a review: only ApiError was caught, so anything `on_store` or
    `transform` raised ended the thread while `synced` stayed true: a frozen cache
    behind a green readiness probe. It relists after a wait instead."""
    kube = _BrokenThenBlocking()
    kube.lists = [([cm("a", "1")], "10"), ([cm("a", "3")], "12")]
    kube.watches = [[{"type": "MODIFIED", "object": cm("a", "2")}]]

    def on_store(key: Any, obj: Any) -> None:
        if obj is not None and obj["metadata"]["resourceVersion"] == "2":
            raise KeyError("spec")

    inf = Informer(kube, RESOURCES["ConfigMap"], clock=FakeClock(), on_store=on_store)
    kube.stop = inf._stop
    inf.start()
    deadline = time.monotonic() + 10
    while inf.relists < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    inf.stop()
    assert inf.relists == 2
    assert (inf.get("a", "ns") or {})["metadata"]["resourceVersion"] == "3"


class _UntilScriptsEnd(FakeKube):
    """Stops the informer at the first watch past the scripted ones."""

    inf: Informer

    def watch(self, res: Any, **kw: Any) -> Any:
        if not self.watches:
            self.inf._stop.set()
        return super().watch(res, **kw)


def _run(kube: _UntilScriptsEnd, **kw: Any) -> tuple[Informer, list[float]]:
    """Run the loop to the end of the scripts; the informer and the waits it made."""
    clock = _Waits(99)  # 99: a loop that never reaches the scripts' end stops anyway
    inf = Informer(kube, RESOURCES["ConfigMap"], clock=clock, **kw)
    kube.inf = clock.informer = inf
    inf.run()
    return inf, clock.waits


def _event(kind: str, name: str, rv: str) -> Any:
    return {"type": kind, "object": cm(name, rv)}


def _error(code: int, reason: str) -> Any:
    """A watch's ERROR event: a Status."""
    return {"type": "ERROR", "object": {"kind": "Status", "code": code, "reason": reason}}


_BROKEN = ApiError(0, "WatchBroken", "watch configmaps: connection reset by peer")


def test_a_broken_stream_is_watched_again_from_the_last_resource_version_without_a_list() -> None:
    """Found by a review: a watch stream that broke (an API server restart, a load
    balancer's reset) was followed by a LIST of every object, after a backoff; the
    watch is opened again from the resourceVersion kept (here a bookmark's)."""
    kube = _UntilScriptsEnd()
    kube.lists = [([cm("a", "1"), cm("b", "2")], "10")]
    kube.watches = [
        [
            _event("MODIFIED", "a", "11"),
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            _BROKEN,
        ],
        [_event("DELETED", "b", "16")],
    ]
    events: list[tuple[str, str]] = []
    inf, waits = _run(kube, handler=lambda t, o: events.append((t, o["metadata"]["name"])))
    assert kube.watched_from == ["10", "15", "16"]
    assert inf.relists == 1
    assert waits == [0.5]
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert [o["metadata"]["resourceVersion"] for o in inf.items()] == ["11"]


def test_a_410_on_the_watch_opened_again_lists_again() -> None:
    """The resourceVersion kept across a broken stream may be compacted away by the
    time the watch opens again: 410 Gone, as an ERROR event or an HTTP status,
    lists again at once."""
    for gone in ([_error(410, "Expired")], ApiError(410, "Gone", "too old resource version")):
        kube = _UntilScriptsEnd()
        kube.lists = [([cm("a", "1")], "10"), ([cm("a", "30")], "30")]
        kube.watches = [[_event("MODIFIED", "a", "11"), _BROKEN], gone]
        inf, waits = _run(kube)
        assert kube.watched_from == ["10", "11", "30"], gone
        assert inf.relists == 2
        assert waits == [0.5]  # the break's; none for the 410
        assert (inf.get("a", "ns") or {})["metadata"]["resourceVersion"] == "30"


_A11, _A12 = _event("MODIFIED", "a", "11"), _event("MODIFIED", "a", "12")


@pytest.mark.parametrize(
    ("watches", "waits", "relists", "watched_from"),
    [
        # transient: watched again from the last resourceVersion, after the backoff
        ([[_A11, _BROKEN], [_A12]], [0.5], 1, ["10", "11", "12"]),
        ([[_A11, _error(500, "InternalError")], [_A12]], [0.5], 1, ["10", "11", "12"]),
        ([[_A11, _error(429, "TooManyRequests")], [_A12]], [0.5], 1, ["10", "11", "12"]),
        ([[_A11], ApiError(409, "Conflict", "x"), [_A12]], [0.5], 1, ["10", "11", "11", "12"]),
        (
            [[_A11], ApiError(503, "ServiceUnavailable", "x", retry_after=3), [_A12]],
            [3],
            1,
            ["10", "11", "11", "12"],
        ),
        # anything else: listed again, after the backoff
        ([[_A11], ApiError(403, "Forbidden", "x"), [_A12]], [0.5], 2, ["10", "11", "20", "12"]),
        ([[_A11, _event("MODIFIED", "a", "13")], [_A12]], [0.5], 2, ["10", "20", "12"]),
        ([[_A11], [], [_A12]], [0.5], 2, ["10", "11", "20", "12"]),
        # gone: listed again at once
        ([[_A11, _error(410, "Expired")], [_A12]], [], 2, ["10", "20", "12"]),
        ([[_A11], ApiError(410, "Gone", "x"), [_A12]], [], 2, ["10", "11", "20", "12"]),
    ],
    ids=[
        "stream-broke",
        "error-event-500",
        "error-event-429",
        "http-409",
        "http-503-retry-after",
        "http-403",
        "defect-in-transform",
        "stream-ended-at-once-empty",
        "error-event-410",
        "http-410",
    ],
)
def test_after_a_failed_watch_the_loop_watches_again_or_lists_again(
    watches: list[Any], waits: list[float], relists: int, watched_from: list[str]
) -> None:
    """A transient failure of the watch keeps the resourceVersion; a refusal, a
    defect in `transform` (rv 13 here: its event is lost though the resourceVersion
    passed it) and an empty stream list again after the backoff; 410 at once."""

    def transform(o: dict[str, Any]) -> dict[str, Any]:
        if o["metadata"]["resourceVersion"] == "13":
            raise KeyError("spec")
        return o

    kube = _UntilScriptsEnd()
    kube.lists = [([cm("a", "1")], "10"), ([cm("a", "11")], "20")]
    kube.watches = watches
    inf, made = _run(kube, transform=transform)
    assert (made, inf.relists, kube.watched_from) == (waits, relists, watched_from)
    assert (inf.get("a", "ns") or {})["metadata"]["resourceVersion"] == "12"


class _Breaks(FakeKube):
    """Each watch stays open so many seconds on the clock, delivers nothing, then its
    stream breaks; the informer stops once all have."""

    def __init__(self, clock: FakeClock, lasts: list[float]) -> None:
        super().__init__()
        self.clock, self.lasts = clock, lasts
        self.inf: Informer | None = None

    def watch(self, res: Any, **kw: Any) -> Any:
        if not self.lasts:
            assert self.inf is not None
            self.inf._stop.set()
            return iter(())
        self.clock.advance(self.lasts.pop(0))
        raise _BROKEN


def test_the_backoff_starts_again_after_a_watch_that_lasted_though_it_broke() -> None:
    """Found by a review: three resets of watches that had each lasted over a second
    waited 0.5, 1 and 2 s (and listed every object each time): only a watch that had
    delivered an event reset the backoff. One that lasted `_SHORT_WATCH_S` worked
    too; one that breaks at once did not."""
    clock = _Waits(99)
    kube = _Breaks(clock, [0, 0, 2, 0, 5, 5])
    inf = Informer(kube, RESOURCES["ConfigMap"], clock=clock)
    kube.inf = clock.informer = inf
    inf.run()
    assert clock.waits == [0.5, 1, 0.5, 1, 0.5, 0.5]
    assert inf.relists == 1
