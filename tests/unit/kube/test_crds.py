"""CRDs generated from schemas/: in sync with the chart, and structural."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from controller.jobs.admission import admission_objects, mutating_objects
from controller.kube.crds import crd_file_name, generate_crds, render_yaml, render_yaml_stream
from controller.policy.validate import schema_dir

ROOT = Path(__file__).resolve().parents[3]
CHART_FILES = ROOT / "charts" / "gangops" / "files"
REGENERATE = "run gangops install-crds --output-dir charts/gangops/files"


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_chart_crds_are_generated_from_the_schemas() -> None:
    crds = generate_crds(schema_dir())
    want = {crd_file_name(c): render_yaml(c) for c in crds}
    have = {p.name: p.read_text(encoding="utf-8") for p in (CHART_FILES / "crds").glob("*.yaml")}
    assert have == want, f"charts/gangops/files/crds is stale: {REGENERATE}"


def test_chart_admission_policies_are_generated_from_the_code() -> None:
    want = {
        "validating.yaml": render_yaml_stream(admission_objects()),
        "mutating.yaml": render_yaml_stream(mutating_objects()),
    }
    have = {p.name: p.read_text(encoding="utf-8") for p in (CHART_FILES / "admission").glob("*")}
    assert have == want, f"charts/gangops/files/admission is stale: {REGENERATE}"


def test_crds_use_the_structural_dialect() -> None:
    for crd in generate_crds(schema_dir()):
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        schema = version["schema"]["openAPIV3Schema"]
        for node in _walk(schema):
            assert not {"$ref", "$defs", "$schema", "const", "uniqueItems"} & set(node)
            assert node.get("additionalProperties") is not False
            if "anyOf" in node:
                raise AssertionError(f"anyOf left in {crd['metadata']['name']}: {node}")


def test_quantities_become_int_or_string_with_both_constraints() -> None:
    project = next(
        c for c in generate_crds(schema_dir()) if c["spec"]["names"]["kind"] == "Project"
    )
    spec = project["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    cpu = spec["properties"]["quota"]["properties"]["max"]["properties"]["cpu"]
    assert cpu["x-kubernetes-int-or-string"] is True
    assert cpu["minimum"] == 0 and cpu["pattern"].startswith("^")
    namespaces = spec["properties"]["namespaces"]
    assert namespaces["x-kubernetes-list-type"] == "set"


def test_policysource_schema_accepts_a_full_example_and_refuses_a_typo() -> None:
    schema = json.loads((schema_dir() / "policysource.schema.json").read_text())
    v = Draft202012Validator(schema)
    doc = {
        "apiVersion": "policy.ai.operator/v1",
        "kind": "PolicySource",
        "metadata": {"name": "main"},
        "spec": {
            "url": "ssh://git@github.com/acme/gpu-policies.git",
            "ref": {"branch": "main"},
            "path": "policies",
            "interval": "5m",
            "secretRef": {"name": "git-credentials"},
            "prune": True,
            "allowRecreate": False,
        },
    }
    assert not list(v.iter_errors(doc))
    doc["spec"]["intervall"] = "5m"
    assert [e.validator for e in v.iter_errors(doc)] == ["additionalProperties"]


def test_print_includes_the_mutating_policy_only_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from controller.cli import main

    assert main(["install-crds", "--print"]) == 0
    default = capsys.readouterr().out
    assert "kind: ValidatingAdmissionPolicy\n" in default
    assert "kind: Namespace\nmetadata:\n  name: gangops-system\n" in default
    assert "MutatingAdmissionPolicy" not in default  # auto: the cluster is unknown offline
    assert main(["install-crds", "--print", "--mutating-policy", "on"]) == 0
    on = capsys.readouterr().out
    assert "kind: MutatingAdmissionPolicy\n" in on
    assert "kind: MutatingAdmissionPolicyBinding\n" in on


def test_rules_on_the_whole_object_travel_into_the_crd() -> None:
    """A schema's root `x-kubernetes-validations` (rules on the object's name) reach
    the CRD's root; before, only the spec's did, and the names were not checked."""
    crds = {c["spec"]["names"]["kind"]: c for c in generate_crds(schema_dir())}
    for kind, words in (("PolicySource", "gangops-policy-crs"), ("TrainingJob", "DNS-1035")):
        root = crds[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        (rule,) = root["x-kubernetes-validations"]
        assert "self.metadata.name" in rule["rule"] and words in rule["rule"] + rule["message"]
