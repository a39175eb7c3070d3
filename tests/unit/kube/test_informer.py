"""The informer's loop against scripted list and watch responses."""

from __future__ import annotations

from typing import Any

from controller.kube.client import RESOURCES
from controller.kube.clock import FakeClock
from controller.kube.informer import Informer

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
