"""The informer's loop against scripted list and watch responses."""

from __future__ import annotations

import threading
import time
from typing import Any

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
