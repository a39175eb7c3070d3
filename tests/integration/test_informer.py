"""The informer's watch loop against a real API server, when the watch's connection
breaks (an API server restart, a load balancer's or a NAT's reset): it watches again
from the resourceVersion it kept, and lists again only when that is gone (410)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from controller.devcluster import DevCluster
from controller.devcluster.launcher import WATCH_CACHE_DISABLED
from controller.kube.client import RESOURCES, Kube, Resource, WatchEvent, connect
from controller.kube.informer import Informer

from .kube import wait_for

PODTEMPLATE = Resource("", "v1", "PodTemplate", WATCH_CACHE_DISABLED, True)
"""Watched straight from etcd, so an etcd compaction is what the watch sees."""


class _Watches:
    """The real client's list and watch (all the informer calls), noting where each
    watch began; `held` clear: the next watch waits until it is set (the network
    still cut)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.began: list[str] = []
        self.held = threading.Event()
        self.held.set()

    def list(self, res: Resource, **kw: Any) -> tuple[list[dict[str, Any]], str]:
        return self.kube.list(res, **kw)

    def watch(self, res: Resource, **kw: Any) -> Iterator[WatchEvent]:
        self.held.wait(30)
        self.began.append(kw["resource_version"])
        return self.kube.watch(res, **kw)


def _break_the_watch(inf: Informer) -> None:
    """Shut down the open watch's connection, as a reset does (the informer reads it
    as the stream broken; only `stop` shuts it down otherwise)."""
    wait_for("an open watch", lambda: inf._resp).shutdown()


def test_a_watch_whose_connection_breaks_is_watched_again_without_a_list(
    dev_cluster: DevCluster, namespace: str
) -> None:
    kube = connect(str(dev_cluster.kubeconfig))
    spy = _Watches(kube)
    inf = Informer(spy, RESOURCES["ConfigMap"], namespace=namespace).start()
    made: list[str] = []
    try:
        assert inf.wait_synced(10)
        for i in range(4):
            name = f"c{i}"
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
            }
            made.append(
                kube.create(cm, field_manager="gangops-test")["metadata"]["resourceVersion"]
            )
            wait_for(f"{name} in the cache", lambda name=name: inf.get(name, namespace))
            if i < 3:
                _break_the_watch(inf)
    finally:
        inf.stop()
    assert inf.relists == 1
    # each watch again began where the broken one had got to: its last event, or later
    assert len(spy.began) == 4, spy.began
    assert all(int(b) >= int(rv) for b, rv in zip(spy.began[1:], made[:3], strict=True)), (
        spy.began,
        made,
    )


def test_a_watch_broken_until_its_resource_version_is_compacted_lists_again(
    api: client.ApiClient, dev_cluster: DevCluster, namespace: str
) -> None:
    core = client.CoreV1Api(api)

    def template(name: str) -> dict[str, Any]:
        spec = {"containers": [{"name": "c", "image": "pause"}]}
        return {"metadata": {"name": name}, "template": {"spec": spec}}

    core.create_namespaced_pod_template(namespace, template("a"))
    spy = _Watches(connect(str(dev_cluster.kubeconfig)))
    events: list[tuple[str, str]] = []
    inf = Informer(
        spy,
        PODTEMPLATE,
        namespace=namespace,
        handler=lambda t, o: events.append((t, o["metadata"]["name"])),
    ).start()
    try:
        assert inf.wait_synced(10)
        kept = inf.resource_version
        spy.held.clear()  # the network stays cut while the objects change
        _break_the_watch(inf)
        core.delete_namespaced_pod_template("a", namespace)
        latest = core.create_namespaced_pod_template(namespace, template("b"))
        request = urllib.request.Request(
            f"{dev_cluster.etcd_url}/v3/kv/compaction",
            data=json.dumps(
                {"revision": latest.metadata.resource_version, "physical": True}
            ).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
        spy.held.set()
        wait_for("the relist after 410 Gone", lambda: inf.relists == 2)
        wait_for("b in the cache", lambda: inf.get("b", namespace))
    finally:
        inf.stop()
    assert spy.began[:2] == [kept, kept]  # watched again from what it kept, then listed
    assert inf.get("a", namespace) is None
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
