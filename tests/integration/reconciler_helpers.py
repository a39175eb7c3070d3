"""Helpers for the reconciler's integration tests: policy repositories and a reconciler harness.

`PolicyRepo` is a real Git repository (on disk, served over file://) holding a
small valid policy set whose cluster-wide names carry the test's prefix, with
helpers to change and commit it. `ReconcileEnv` runs one `Reconciler` that
selects only the test's PolicySources (by a `gangops.ai/test` label), creates
sources, waits for conditions and cleans up everything the test made. The
fixtures that hand these out are in `reconciler_fixtures`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.kube.client import RESOURCES, Kube
from controller.reconciler.apply import LABEL_SOURCE
from controller.reconciler.controller import Reconciler, ReconcilerSettings

from .kube import wait_for

Obj = dict[str, Any]
TEST_LABEL = "gangops.ai/test"

CLUSTER_POLICY = """apiVersion: policy.ai.operator/v1
kind: ClusterPolicy
metadata: {name: default}
spec:
  capacity: {gpu: 1000}
  reserve: {gpu: 0}
"""


def tier(name: str, value: int, *, policy: str = "PreemptLowerPriority") -> str:
    return (
        f"apiVersion: policy.ai.operator/v1\nkind: PriorityTier\nmetadata: {{name: {name}}}\n"
        f"spec: {{value: {value}, preemptionPolicy: {policy}}}\n"
    )


def project(name: str, namespaces: list[str], *, gpu: int = 8) -> str:
    return (
        f"apiVersion: policy.ai.operator/v1\nkind: Project\nmetadata: {{name: {name}}}\n"
        f"spec:\n  namespaces: [{', '.join(namespaces)}]\n"
        f"  quota:\n    guaranteed: {{gpu: {gpu // 2}}}\n"
        f'    max: {{gpu: {gpu}, cpu: "64", memory: 256Gi}}\n'
    )


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout
    return out.strip()


@dataclass
class PolicyRepo:
    """A Git repository with a policy set under `policies/`; names carry `prefix`."""

    path: Path
    prefix: str

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def write(self, rel: str, text: str) -> None:
        f = self.path / "policies" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8")

    def remove(self, rel: str) -> None:
        (self.path / "policies" / rel).unlink()

    def commit(self, message: str = "change") -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def name(self, short: str) -> str:
        """A cluster-wide name owned by this test."""
        return f"{self.prefix}-{short}"

    def seed(self) -> str:
        """A valid set: two tiers, two projects with three namespaces; commit it."""
        n = self.name
        self.write("cluster.yaml", CLUSTER_POLICY)
        self.write("tiers.yaml", tier(n("high"), 5000) + "---\n" + tier(n("low"), 100))
        self.write("projects/a.yaml", project(n("a"), [n("a"), n("a-dev")]))
        self.write("projects/b.yaml", project(n("b"), [n("b")]))
        return self.commit("seed")


@dataclass
class ReconcileEnv:
    """One test's reconciler, its system namespace and its PolicySources."""

    kube: Kube
    prefix: str
    cache_dir: Path
    system_namespace: str
    reconciler: Reconciler | None = None
    sources: list[str] = field(default_factory=list)

    def start(self, **settings: Any) -> Reconciler:
        self.reconciler = Reconciler(
            self.kube,
            settings=ReconcilerSettings(
                cache_dir=self.cache_dir,
                system_namespace=self.system_namespace,
                source_selector=f"{TEST_LABEL}={self.prefix}",
                **settings,
            ),
        )
        self.reconciler.start()
        return self.reconciler

    def create_source(self, name: str, url: str, **spec: Any) -> str:
        full = f"{self.prefix}-{name}"
        self.kube.create(
            {
                "apiVersion": "policy.ai.operator/v1",
                "kind": "PolicySource",
                "metadata": {"name": full, "labels": {TEST_LABEL: self.prefix}},
                "spec": {"url": url, "path": "policies", "interval": "1h", **spec},
            },
            field_manager="test",
        )
        self.sources.append(full)
        return full

    def source(self, name: str) -> Obj:
        obj = self.kube.get(RESOURCES["PolicySource"], name)
        assert obj is not None, f"PolicySource {name} is gone"
        return obj

    def patch_source(self, name: str, patch: Obj) -> None:
        self.kube.merge_patch(RESOURCES["PolicySource"], name, patch, field_manager="test")

    def condition(self, name: str, type_: str) -> Obj | None:
        status = self.source(name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)

    def wait_condition(
        self,
        name: str,
        type_: str,
        status: str = "True",
        *,
        reason: str | None = None,
        revision_sha: str | None = None,
        timeout: float = 30.0,
    ) -> Obj:
        """Wait for a condition (and optionally an applied/attempted revision); return the
        PolicySource."""

        def probe() -> Obj | None:
            obj = self.source(name)
            st = obj.get("status") or {}
            cond = next((c for c in st.get("conditions") or [] if c["type"] == type_), None)
            if cond is None or cond["status"] != status:
                return None
            if reason is not None and cond["reason"] != reason:
                return None
            if st.get("observedGeneration") != obj["metadata"]["generation"]:
                return None
            if revision_sha is not None:
                key = (
                    "lastAppliedRevision"
                    if status == "True" and type_ == "Ready"
                    else ("lastAttemptedRevision")
                )
                if not str(st.get(key, "")).endswith(revision_sha):
                    return None
            return obj

        return wait_for(
            f"{name} {type_}={status} {reason or ''} {revision_sha or ''}", probe, timeout=timeout
        )

    def events(self, name: str) -> list[Obj]:
        items, _ = self.kube.list(RESOURCES["Event"], namespace="default")
        return [e for e in items if e["involvedObject"].get("name") == name]

    def cleanup(self) -> None:
        for name in self.sources:
            self.kube.delete(RESOURCES["PolicySource"], name)
        if self.reconciler is not None:
            self.reconciler.stop()
        for kind in ("ResourceQuota", "ConfigMap", "PriorityClass", "Namespace"):
            items, _ = self.kube.list(RESOURCES[kind], label_selector=LABEL_SOURCE)
            for o in items:
                meta = o["metadata"]
                names = (meta["labels"][LABEL_SOURCE], meta["name"], meta.get("namespace", ""))
                if any(n.startswith(self.prefix) for n in names):
                    self.kube.delete(RESOURCES[kind], meta["name"], namespace=meta.get("namespace"))
        self.kube.delete(RESOURCES["Namespace"], self.system_namespace)


def managed(kube: Kube, kind: str, name: str, namespace: str | None = None) -> Obj | None:
    return kube.get(RESOURCES[kind], name, namespace)
