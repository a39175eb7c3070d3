"""What parse_job checks before a job takes GPUs: every field it reads or the worker
pods copy has its shape checked (the CRD keeps most of the template as written), a
name that makes valid Service and pod names, required node affinity read as
Kubernetes reads it; and the workers carry the job's tolerations. Found by a
review: each malformed shape below raised AttributeError, KeyError, TypeError or
ValueError (every scheduling step crashed), or was accepted and then broke the
launch."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from controller.jobs.pods import LABEL_JOB, headless_service, worker_pods
from controller.jobs.spec import MAX_NAME, JobSpec, SpecError, parse_job
from controller.scheduler.types import Placement, PodPlacement, Taint

from .test_jobs import JOB

Obj = dict[str, Any]
PLACEMENT = Placement((PodPlacement("n1", (0, 1, 2, 3)), PodPlacement("n2", (0, 1, 2, 3))))
TERMS = "nodeSelectorTerms"


def _pod(**fields: Any) -> Callable[[Obj], None]:
    return lambda o: o["spec"]["template"]["spec"].update(fields)


def _container(**fields: Any) -> Callable[[Obj], None]:
    return lambda o: o["spec"]["template"]["spec"]["containers"][0].update(fields)


def _template(**fields: Any) -> Callable[[Obj], None]:
    return lambda o: o["spec"]["template"].update(fields)


def _spec(**fields: Any) -> Callable[[Obj], None]:
    return lambda o: o["spec"].update(fields)


def _required(*terms: Any) -> Callable[[Obj], None]:
    """Required node affinity with `terms`."""
    return _pod(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            TERMS: list(terms)}}}
    )  # fmt: skip


def _expr(**e: Any) -> dict[str, Any]:
    return {"matchExpressions": [e]}


def _with(mutate: Callable[[Obj], None]) -> Obj:
    obj = copy.deepcopy(JOB)
    mutate(obj)
    return obj


# (case, change, what the sentence says). Each of the template's shapes passes the
# CRD: template.spec keeps what it does not declare as written.
MALFORMED: list[tuple[str, Callable[[Obj], None], str]] = [
    ("nodeSelector a list", _pod(nodeSelector=["zone=a"]),
     "spec.template.spec.nodeSelector must be an object, found a list"),
    ("nodeSelector a number value", _pod(nodeSelector={"zone": 1}),
     "nodeSelector['zone'] must be a string, found a number"),
    ("affinity a string", _pod(affinity="x"), "affinity must be an object, found a string"),
    ("nodeAffinity a string", _pod(affinity={"nodeAffinity": "x"}),
     "affinity.nodeAffinity must be an object, found a string"),
    ("required a list", _pod(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": ["x"]}}),
     "requiredDuringSchedulingIgnoredDuringExecution must be an object, found a list"),
    ("no terms", _required(), f"{TERMS} must list at least one term"),
    ("a term a string", _required("x"), f"{TERMS}[0] must be an object, found a string"),
    ("an expression without a key", _required(_expr(operator="Exists")),
     "matchExpressions[0].key is missing"),
    ("an unknown operator", _required(_expr(key="zone", operator="Near", values=["a"])),
     "operator 'Near' is not one of"),
    ("In without values", _required(_expr(key="zone", operator="In")), "In needs values"),
    ("Exists with values", _required(_expr(key="zone", operator="Exists", values=["a"])),
     "Exists takes no values"),
    ("Gt not a number", _required(_expr(key="cores", operator="Gt", values=["many"])),
     "Gt needs one integer value"),
    ("values not strings", _required(_expr(key="zone", operator="In", values=[1])),
     "values must be a list of strings"),
    # Kubernetes: "A null or empty node selector term matches no objects"
    ("every term empty", _required({}, {"matchExpressions": []}),
     "every term is empty, and an empty term matches no node"),
    # the kubelet checks matchFields on a bound pod; gangops places by labels
    ("matchFields", _required({"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}),
     f"{TERMS}[0].matchFields is not supported"),
    ("template tolerations a number", _pod(tolerations=5),
     "spec.template.spec.tolerations must be a list, found a number"),
    ("a template toleration a taint key", _pod(tolerations=["nvidia.com/gpu"]),
     r"spec.template.spec.tolerations[0] must be a Toleration"),
    ("a template toleration's value a number", _pod(tolerations=[{"key": "k", "value": 5}]),
     "tolerations[0].value must be a string"),
    ("tolerationSeconds not a number", _spec(tolerations=[
        {"key": "k", "effect": "NoExecute", "tolerationSeconds": "60"}]),
     "spec.tolerations[0].tolerationSeconds must be an integer"),
    ("spec.tolerations a number", _spec(tolerations=5), "spec.tolerations must be a list"),
    ("env a list of strings", _container(env=["FOO=1"]),
     "containers[0].env[0] must be an object, found a string"),
    ("env a string", _container(env="FOO=1"), "containers[0].env must be a list"),
    ("an env entry without a name", _container(env=[{"value": "1"}]),
     "containers[0].env[0].name is missing"),
    ("a container a string", _pod(containers=["trainer"]),
     "containers[0] must be an object, found a string"),
    ("initContainers a string", _pod(initContainers="x"), "initContainers must be a list"),
    ("template metadata a string", _template(metadata="x"),
     "spec.template.metadata must be an object, found a string"),
    ("template labels a list", _template(metadata={"labels": ["team=a"]}),
     "spec.template.metadata.labels must be an object, found a list"),
    ("template labels a string", _template(metadata={"labels": "team=a"}),
     "spec.template.metadata.labels must be an object, found a string"),
    ("a template label a number", _template(metadata={"labels": {"team": 7}}),
     "labels['team'] must be a string, found a number"),
    ("template annotations a list", _template(metadata={"annotations": [1]}),
     "spec.template.metadata.annotations must be an object, found a list"),
    # a pod created bound (nodeName) may not have scheduling gates
    ("schedulingGates", _pod(schedulingGates=[{"name": "example.com/wait"}]),
     "schedulingGates: gangops creates its workers bound"),
    ("minGPU a string", _spec(resourceProfile={"minGPU": "4"}),
     "spec.resourceProfile.minGPU must be a whole number"),
    ("resourceProfile a list", _spec(resourceProfile=[4]),
     "spec.resourceProfile must be an object, found a list"),
    ("priority a number", _spec(priority=7), "spec.priority must be a string"),
    ("backoffLimit a string", _spec(backoffLimit="3"), "spec.backoffLimit must be a whole number"),
    ("the job's labels a list", lambda o: o["metadata"].update(labels=["a"]),
     "metadata.labels must be an object, found a list"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_a_malformed_job_gets_a_sentence_and_nothing_else(
    change: Callable[[Obj], None], message: str
) -> None:
    """Any other exception escaped the view's parse (it catches SpecError) and
    crashed every scheduling step, for every job of the cluster."""
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_job(_with(change))


# Shapes parse_job accepts: the worker pods are built from each of them.
ACCEPTED: list[tuple[str, Callable[[Obj], None]]] = [
    ("no template metadata", lambda o: o["spec"]["template"].pop("metadata")),
    ("null labels", _template(metadata={"labels": None, "annotations": {"a": "b"}})),
    ("no env", lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("env")),
    ("null env", _container(env=None)),
    ("empty tolerations", _pod(tolerations=[])),
    ("preferred affinity only", _pod(affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}})),
    ("an empty term beside a real one", _required({}, _expr(key="zone", operator="Exists"))),
    ("empty schedulingGates", _pod(schedulingGates=[])),
    ("an init container using the workers' GPUs", _pod(initContainers=[
        {"name": "check", "image": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}])),
]  # fmt: skip


@pytest.mark.parametrize("change", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_the_workers_are_built_from_whatever_parse_job_accepts(
    change: Callable[[Obj], None],
) -> None:
    obj = _with(change)
    pods = worker_pods(parse_job(obj), obj["spec"]["template"], PLACEMENT, tier="t", attempt=1)
    assert [p["metadata"]["labels"][LABEL_JOB] for p in pods] == ["bert", "bert"]


_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _named(name: str) -> Obj:
    obj = copy.deepcopy(JOB)
    obj["metadata"]["name"] = name
    return obj


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("b" * (MAX_NAME + 1), f"the name is {MAX_NAME + 1} characters; at most {MAX_NAME}"),
        ("bert.v2", "cannot name the job's Service"),
        ("1bert", "cannot name the job's Service"),
    ],
    ids=["long", "dotted", "leading-digit"],
)
def test_a_name_the_api_server_refuses_for_a_service_or_hostname_is_refused(
    name: str, message: str
) -> None:
    """All three are valid TrainingJob names (DNS-1123 subdomains), but a Service's
    name is a DNS-1035 label (no dots, a letter first) and a worker's hostname
    `<name>-<attempt>-<rank>` a DNS label of at most 63: the launch was refused,
    again and again, with the GPUs reserved each time."""
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_job(_named(name))


def test_the_longest_name_accepted_makes_valid_names_up_to_the_largest_attempt_and_rank() -> None:
    job = parse_job(_named("a" * MAX_NAME))
    service = headless_service(job)["metadata"]["name"]
    assert _DNS1035_LABEL.fullmatch(service) and len(service) <= 63
    one = Placement((PodPlacement("n1", (0, 1, 2, 3)),))
    (pod,) = worker_pods(job, JOB["spec"]["template"], one, tier="t", attempt=999_999)
    hostname = pod["spec"]["hostname"] + "9999"  # rank 99999 instead of 0
    assert _DNS1123_LABEL.fullmatch(hostname) and len(hostname) == 63


def _tolerations(spec_tolerations: list[Any], template: list[Any] | None = None) -> list[Any]:
    obj = copy.deepcopy(JOB)
    obj["spec"]["tolerations"] = spec_tolerations
    if template is not None:
        obj["spec"]["template"]["spec"]["tolerations"] = template
    job = parse_job(obj)
    pods = worker_pods(job, obj["spec"]["template"], PLACEMENT, tier="t", attempt=1)
    assert pods[0]["spec"].get("tolerations") == pods[1]["spec"].get("tolerations")
    return list(pods[0]["spec"].get("tolerations") or [])


NO_EXECUTE = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute",
              "tolerationSeconds": 300}  # fmt: skip


@pytest.mark.parametrize(
    ("spec_tolerations", "template", "want"),
    [
        # the short form, expanded as the scheduler reads it
        (["nvidia.com/gpu"], None, [{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        # a Toleration as written, tolerationSeconds included
        ([NO_EXECUTE], None, [NO_EXECUTE]),
        # added after the template's own
        (["a"], [{"key": "b", "operator": "Exists"}],
         [{"key": "b", "operator": "Exists"}, {"key": "a", "operator": "Exists"}]),
        # one the template already has (empty fields and the default operator aside)
        (["a", {"key": "c", "value": "v"}],
         [{"key": "a", "operator": "Exists", "effect": ""},
          {"key": "c", "operator": "Equal", "value": "v"}],
         [{"key": "a", "operator": "Exists", "effect": ""},
          {"key": "c", "operator": "Equal", "value": "v"}]),
        # none: the template's stay as they are
        ([], [{"key": "b", "operator": "Exists"}], [{"key": "b", "operator": "Exists"}]),
        ([], None, []),
    ],
    ids=["short-form", "full-form", "after-the-templates", "duplicates", "none", "neither"],
)  # fmt: skip
def test_the_jobs_tolerations_reach_its_workers(
    spec_tolerations: list[Any], template: list[Any] | None, want: list[Any]
) -> None:
    """spec.tolerations placed the workers (the scheduler reads them) but the pods did
    not carry them: on a node with a NoExecute taint the kubelet refused a bound
    worker, or the taint manager evicted it."""
    assert _tolerations(spec_tolerations, template) == want


def test_a_template_toleration_with_a_field_of_its_own_does_not_stop_the_launch() -> None:
    """Found by a review: the CRD keeps `template.spec` as written, so a toleration
    may carry an object-valued field the parser lets through; telling duplicates
    then failed (unhashable dict) at every launch, and the gang was admitted and
    timed out for ever."""
    noted = {"key": "dedicated", "operator": "Exists", "x-note": {"team": "nlp"}}
    assert _tolerations(["nvidia.com/gpu"], [noted]) == [
        noted, {"key": "nvidia.com/gpu", "operator": "Exists"}
    ]  # fmt: skip


def test_a_worker_tolerates_the_taints_the_scheduler_placed_it_by() -> None:
    obj = copy.deepcopy(JOB)
    obj["spec"]["tolerations"] = [NO_EXECUTE]
    job: JobSpec = parse_job(obj)
    taint = Taint("dedicated", "NoExecute", "ml")
    assert any(t.tolerates(taint) for t in job.pod.tolerations)
    assert NO_EXECUTE in _tolerations([NO_EXECUTE])


def _fits(labels: dict[str, str], *terms: Any) -> bool:
    """Whether gangops would place the job's workers on a node with `labels`."""
    job = parse_job(_with(_required(*terms)))
    return any(all(r.matches(labels) for r in term) for term in job.pod.affinity)


@pytest.mark.parametrize(
    ("terms", "labels", "fits"),
    [
        (({}, _expr(key="zone", operator="In", values=["a"])), {"zone": "a"}, True),
        (({}, _expr(key="zone", operator="In", values=["a"])), {"zone": "b"}, False),
        (({"matchExpressions": []}, _expr(key="gpu", operator="Exists")), {"zone": "a"}, False),
        ((_expr(key="cores", operator="Gt", values=["8"]),), {"cores": "16"}, True),
    ],
    ids=["empty-term-and-a-match", "empty-term-and-no-match", "empty-list-term", "Gt"],
)
def test_an_empty_affinity_term_matches_no_node(
    terms: tuple[Any, ...], labels: dict[str, str], fits: bool
) -> None:
    """Kubernetes: an empty node selector term matches nothing (the kubelet's
    admission refuses a worker bound where no term holds); gangops read it as any
    node."""
    assert _fits(labels, *terms) is fits
