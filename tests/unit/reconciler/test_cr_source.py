"""The policy custom resources as a source (Argo CD, Flux or kubectl sync them):
reconciled as one policy set, retried after a failure midway."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from controller.kube.client import ApiError
from controller.kube.clock import FakeClock
from controller.reconciler.controller import CR_SOURCE, Reconciler, ReconcilerSettings
from tests.unit.kube.fakes import FakeKube
from tests.unit.policy.builders import TIERS, cluster, project


class FlakyApply(FakeKube):
    """While `flaky`, every real (non dry-run) apply gets a transient 503."""

    flaky = 0

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False, **kw: Any) -> dict[str, Any]:
        if self.flaky and not dry_run and kw.get("subresource") is None:
            self.flaky -= 1
            raise ApiError(503, "ServiceUnavailable", "etcdserver: leader changed")
        return super().apply(obj, dry_run=dry_run, **kw)


def test_policy_crs_transient_apply_failure_is_retried(tmp_path: Path) -> None:
    """Failure table: 'an apply or prune failed mid-way | ApplyFailed | backoff' (found
    by a review: the custom resources' source never retried; nothing else woke it)."""
    kube = FlakyApply()
    r = Reconciler(
        kube,
        settings=ReconcilerSettings(cache_dir=tmp_path),
        clock=FakeClock(),
        rng=random.Random(0),
    )
    v1 = "policy.ai.operator/v1"

    def put(d: dict[str, Any], gen: int) -> None:
        d = {**d, "apiVersion": v1, "metadata": {**d["metadata"], "generation": gen}}
        kube.objects.pop((d["kind"], "", d["metadata"]["name"]), None)
        r.policy_crs[d["kind"]].assume(kube.create(d, field_manager="test"))

    for d in [cluster(), *TIERS, project("nlp").max(gpu=8).build()]:
        put(d, 1)
    r._run(CR_SOURCE, True)
    assert (
        kube.objects[("ResourceQuota", "nlp", "gangops-quota")]["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "8"
    )
    put(project("nlp").max(gpu=16).build(), 2)  # a team edits its Project
    kube.flaky = 2  # the API server answers 503 to the next two writes (say 20 s)

    def crs_rv() -> list[str]:
        return [
            o["metadata"]["resourceVersion"]
            for k, o in kube.objects.items()
            if k[0] in ("ClusterPolicy", "PriorityTier", "Project")
        ]

    runs = 0
    r._queue.add(CR_SOURCE)  # the Project's MODIFIED event
    while CR_SOURCE in r._queue._due and runs < 10:  # the worker; informer echoes CR writes
        del r._queue._due[CR_SOURCE]
        r._clock.advance(60)  # past any backoff
        before = crs_rv()
        r._run(CR_SOURCE, False)
        runs += 1
        if crs_rv() != before:  # a CR status write comes back as a MODIFIED event
            r._on_policy_cr("MODIFIED", {})
    ready = [
        c
        for c in kube.objects[("Project", "", "nlp")]["status"]["conditions"]
        if c["type"] == "Ready"
    ]
    assert ready and ready[0]["status"] == "True", ready
    assert (
        kube.objects[("ResourceQuota", "nlp", "gangops-quota")]["spec"]["hard"][
            "requests.nvidia.com/gpu"
        ]
        == "16"
    ), "never retried after the 503s ended"
    r.stop()
