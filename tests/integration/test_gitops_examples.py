"""The GitOps examples users copy (clusters/argocd/applications.yaml, clusters/flux/):
server-side dry-run against the real Argo CD and Flux CRDs, taken from their Go modules
(clusters/gitops-crds.txt), and the chart values they carry accepted by the chart."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from controller.devcluster import Build, DevCluster
from tests.unit.chart.helm import render

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "clusters"
EXAMPLES = [CLUSTERS / "argocd" / "applications.yaml", CLUSTERS / "flux" / "gangops.yaml"]

Obj = dict[str, Any]


def _kubectl(build: Build, cluster: DevCluster, *args: str, stdin: str = "") -> str:
    out = subprocess.run(
        [str(build.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"kubectl {' '.join(args)}:\n{out.stdout}{out.stderr}"
    return out.stdout


def _module_dir(module: str) -> Path:
    """The module's directory in Go's module cache, downloaded (and verified) if needed."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True, text=True, timeout=600, check=False, cwd=CLUSTERS,
    )  # fmt: skip
    info = json.loads(out.stdout or "{}")
    assert out.returncode == 0 and "Dir" in info, f"go mod download {module}: {out.stdout}"
    return Path(info["Dir"])


@pytest.fixture(scope="module")
def gitops_crds(control_plane: Build, dev_cluster: DevCluster) -> list[str]:
    """Argo CD's and Flux's CRDs, installed from their Go modules; their namespaces."""
    names = []
    for line in (CLUSTERS / "gitops-crds.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        module, *files = line.split()
        root = _module_dir(module)
        for f in files:
            text = (root / f).read_text()
            names += [d["metadata"]["name"] for d in YAML(typ="safe").load_all(text) if d]
            _kubectl(control_plane, dev_cluster, "apply", "--server-side",
                     "--field-manager=gitops-crds", "-f", str(root / f))  # fmt: skip
    for name in names:
        _kubectl(control_plane, dev_cluster, "wait", "--for=condition=Established",
                 f"crd/{name}", "--timeout=60s")  # fmt: skip
    for ns in ("argocd", "flux-system"):
        _kubectl(control_plane, dev_cluster, "apply", "--server-side",
                 "--field-manager=gitops-crds", "-f", "-",
                 stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns}}))  # fmt: skip
    return names


def _docs(path: Path) -> list[Obj]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_the_example_passes_server_side_dry_run(
    example: Path, gitops_crds: list[str], control_plane: Build, dev_cluster: DevCluster
) -> None:
    out = _kubectl(control_plane, dev_cluster, "apply", "--server-side", "--dry-run=server",
                   "--field-manager=gitops-examples", "-f", str(example))  # fmt: skip
    assert out.count("(server dry run)") == len(_docs(example)), out


def test_a_broken_example_is_refused_by_the_real_crds(
    gitops_crds: list[str], control_plane: Build, dev_cluster: DevCluster
) -> None:
    """The dry-run checks the CRDs' schemas: the HelmRelease without its chart's source
    is refused."""
    release = next(d for d in _docs(EXAMPLES[1]) if d["kind"] == "HelmRelease")
    del release["spec"]["chart"]["spec"]["sourceRef"]
    out = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(dev_cluster.kubeconfig),
         "apply", "--server-side", "--dry-run=server", "-f", "-"],
        input=json.dumps(release), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode != 0 and "sourceRef" in out.stderr, out.stdout + out.stderr


def test_the_values_in_the_examples_are_accepted_by_the_chart() -> None:
    argo = next(d for d in _docs(EXAMPLES[0]) if d["metadata"]["name"] == "gangops")
    flux = next(d for d in _docs(EXAMPLES[1]) if d["kind"] == "HelmRelease")
    for values in (argo["spec"]["source"]["helm"]["valuesObject"], flux["spec"]["values"]):
        objs = render(values=values)
        image = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["image"]
        assert image.startswith(values["image"]["repository"] + ":")
