"""Who pays for a TrainingJob: a ValidatingAdmissionPolicy, so nobody spends another's quota.

The scheduler charges a job to the user named in its `ai.operator/user`
label. The API server enforces that the label names the job's creator —
`request.userInfo.username` — with a CEL admission policy, no webhook
server: a refused TrainingJob never reaches etcd, even while gangops is
down. On UPDATE the label may not change (nor be added or removed), so a job
cannot be handed to someone else after creation. The status subresource is
not matched: the controller's status writes pass untouched.

A job's `spec` (image, size, priority, elastic range) decides what its owner
is charged for, so on UPDATE only the owner (the user its label names) or a
member of `ADMIN_GROUP` may change it; anyone else with edit rights on
TrainingJobs may still change labels and annotations, never what the job
runs or spends. Two annotations are gangops' own requests, the alert actions'
(`gangops.ai/restart-requested`, `gangops.ai/checkpoint-requested`): only the
owner, a member of `ADMIN_GROUP` or a holder of the verb `RESTART_VERB` on
`trainingjobs` (the controller) may change them, or another tenant could restart
a job at will (a request dated in the year 9999 restarted it at every admission).

The workers' pod spec is the submitter's, but the controller creates the
pods, so the submitter must not get through it what they could not create
directly: the CRD (schemas/trainingjob.schema.json) refuses what no
training job needs (host namespaces, hostPath, host ports, privileged
containers, extra capabilities), the project namespaces carry Pod Security
Admission labels, and this policy lets a job name a service account other
than `default` only if its submitter may create pods in the namespace.

A username that is not a valid label value (a service account's
`system:serviceaccount:ns:name`, an email address) cannot own a
TrainingJob; the refusal message says so.

Where the cluster serves MutatingAdmissionPolicy (beta in Kubernetes 1.34
and 1.35, behind the `MutatingAdmissionPolicy` feature gate and
`--runtime-config=admissionregistration.k8s.io/v1beta1=true`),
`mutating_objects` fills the label in on CREATE when it is missing, so users
need not write their own name; mutation runs before validation, so the
validating policy still refuses a label naming someone else. Pure: the
objects, as dicts.
"""

from __future__ import annotations

from typing import Any

from controller.jobs.spec import LABEL_USER
from controller.nodehealth import CHECKPOINT_ANNOTATION, RESTART_ANNOTATION

__all__ = [
    "ADMIN_GROUP",
    "GRANT_FINALIZER",
    "POLICY_NAME",
    "PROPOSE_VERB",
    "QUOTA_POLICY_NAME",
    "RESTART_VERB",
    "admission_objects",
    "mutating_objects",
]

POLICY_NAME = "trainingjobs.ai.operator-user"
ADMIN_GROUP = "gangops:trainingjob-admins"
"""Members may change the spec of anyone's TrainingJob (docs/security.md)."""
QUOTA_POLICY_NAME = "quotarequests.ai.operator-requester"
GRANT_FINALIZER = "gangops.ai/revert-temporary-grant"
"""On a QuotaRequest with spec.expiresAt while its grant may still have to be taken
back (`controller.quota`): deleted, the request stays until its revert is applied.
Only a holder of `PROPOSE_VERB` (the controller) may remove it."""
PROPOSE_VERB = "propose"
"""The RBAC verb on `quotarequests` that lets its holder (the scheduler's service
account) create a QuotaRequest on another user's behalf: the automatic proposal
for a job blocked by quota names the job's owner."""

RESTART_VERB = "restart"
"""The RBAC verb on `trainingjobs` that lets its holder (the controller's service
account, for the alert actions) request another user's job to checkpoint or
restart (`RESTART_ANNOTATION`, `CHECKPOINT_ANNOTATION`)."""

_LABELS = "object.metadata.?labels.orValue({})"
_PART_OF = {"app.kubernetes.io/part-of": "gangops"}
_LABEL_VALUE = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
"""What a label value may be (the API server's own rule)."""
_OLD_LABELS = "oldObject.metadata.?labels.orValue({})"
_LABEL = f"'{LABEL_USER}'"
_POD = "object.spec.template.spec"
_POD_SA = f"{_POD}.?serviceAccountName.orValue({_POD}.?serviceAccount.orValue('default'))"


def _may_get_secret(name: str) -> str:
    """CEL: the user may get Secret `name` (an expression) in the job's namespace."""
    return (
        "authorizer.group('').resource('secrets').namespace(request.namespace)"
        f".name({name}).check('get').allowed()"
    )


def _container_secrets_ok(c: str) -> str:
    """CEL: every Secret container `c`'s environment reads, the user may get."""
    key = _may_get_secret("e.valueFrom.secretKeyRef.?name.orValue('')")
    every = _may_get_secret("f.secretRef.?name.orValue('')")
    return (
        f"{c}.?env.orValue([]).all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || "
        f"{key}) && {c}.?envFrom.orValue([]).all(f, !has(f.secretRef) || {every})"
    )


_VOLUME_SECRET = _may_get_secret("v.secret.?secretName.orValue('')")
_PROJECTED_SECRET = _may_get_secret("s.secret.?name.orValue('')")
_SECRETS_OK = (
    f"{_POD}.?volumes.orValue([]).all(v, (!has(v.secret) || {_VOLUME_SECRET}) && "
    "(!has(v.projected) || v.projected.?sources.orValue([]).all(s, !has(s.secret) || "
    f"{_PROJECTED_SECRET}))) && "
    f"{_POD}.?containers.orValue([]).all(c, {_container_secrets_ok('c')}) && "
    f"{_POD}.?initContainers.orValue([]).all(c, {_container_secrets_ok('c')})"
)
"""CEL: every Secret the job's workers would mount or read into their environment,
its submitter may get: the workers' logs would otherwise show what they may not."""


def _user_label_fixed(names: str) -> dict[str, Any]:
    """The rule that an UPDATE keeps label `LABEL_USER`, which names `names`."""
    return {
        "expression": (
            f"request.operation != 'UPDATE' || ({_LABELS}[?{_LABEL}] == {_OLD_LABELS}[?{_LABEL}])"
        ),
        "message": f"label {LABEL_USER} cannot be changed: it names {names}",
        "reason": "Forbidden",
    }


def _only_owner_changes_spec(owner: str, what: str) -> dict[str, Any]:
    """The rule that only the user in label `LABEL_USER` (the `owner`) or a member of
    `ADMIN_GROUP` may change the object's spec (`what`, in the message)."""
    return {
        "expression": (
            "request.operation != 'UPDATE' || "
            "object.?spec.orValue({}) == oldObject.?spec.orValue({}) || "
            f"{_OLD_LABELS}[?{_LABEL}] == optional.of(request.userInfo.username) || "
            f"'{ADMIN_GROUP}' in request.userInfo.groups"
        ),
        "messageExpression": (
            f"'only the {owner} (' + "
            f"{_OLD_LABELS}[?{_LABEL}].orValue('nobody') + "
            f"') or a member of group {ADMIN_GROUP} may change {what}; you are ' + "
            "request.userInfo.username"
        ),
        "reason": "Forbidden",
    }


_REQUESTS = f"['{RESTART_ANNOTATION}', '{CHECKPOINT_ANNOTATION}']"
_ANNOTATIONS = "object.metadata.?annotations.orValue({})"
_OLD_ANNOTATIONS = "oldObject.metadata.?annotations.orValue({})"


def _only_owner_requests() -> dict[str, Any]:
    """The rule that gangops' request annotations change only by the owner, a member
    of `ADMIN_GROUP`, or a holder of `RESTART_VERB` (the controller)."""
    restarter = (
        "authorizer.group('ai.operator').resource('trainingjobs')"
        f".namespace(request.namespace).check('{RESTART_VERB}').allowed()"
    )
    return {
        "expression": (
            "request.operation != 'UPDATE' || "
            f"{_REQUESTS}.all(k, {_ANNOTATIONS}[?k] == {_OLD_ANNOTATIONS}[?k]) || "
            f"{_OLD_LABELS}[?{_LABEL}] == optional.of(request.userInfo.username) || "
            f"'{ADMIN_GROUP}' in request.userInfo.groups || {restarter}"
        ),
        "messageExpression": (
            f"'annotations {RESTART_ANNOTATION} and {CHECKPOINT_ANNOTATION} are the "
            "requests of gangops alert actions: only the owner of the job (' + "
            f"{_OLD_LABELS}[?{_LABEL}].orValue('nobody') + "
            f"'), a member of group {ADMIN_GROUP} or a holder of the verb {RESTART_VERB} on "
            "trainingjobs may change them; you are ' + request.userInfo.username"
        ),
        "reason": "Forbidden",
    }


_VALIDATIONS: list[dict[str, Any]] = [
    {
        "expression": (
            f"request.operation != 'CREATE' || "
            f"({_LABEL} in {_LABELS} && {_LABELS}[{_LABEL}] == request.userInfo.username)"
        ),
        "messageExpression": (
            f"'label {LABEL_USER} must name the user creating the job: set it to \"' + "
            "request.userInfo.username + '\" (found \"' + "
            f"({_LABEL} in {_LABELS} ? {_LABELS}[{_LABEL}] : '') + '\")'"
        ),
        "reason": "Forbidden",
    },
    _user_label_fixed("the user the job is charged to"),
    _only_owner_changes_spec("owner of the job", "its spec"),
    _only_owner_requests(),
    {
        # The controller creates the workers, so a job could otherwise run pods under
        # a service account its submitter could never have used: only someone who
        # may create pods in the namespace may name one.
        "expression": (
            "(request.operation == 'UPDATE' && "
            "object.?spec.orValue({}) == oldObject.?spec.orValue({})) || "
            f"{_POD_SA} == 'default' || "
            "authorizer.group('').resource('pods').namespace(request.namespace)"
            ".check('create').allowed()"
        ),
        "messageExpression": (
            f"'the workers may run as service account \"' + {_POD_SA} + "
            "'\" only if you may create pods in namespace ' + request.namespace + "
            "' yourself; remove serviceAccountName (the workers then run as default)'"
        ),
        "reason": "Forbidden",
    },
    {
        # The workers could print a Secret into their logs, which the submitter may
        # read: a job may name only Secrets its submitter may get.
        "expression": (
            "(request.operation == 'UPDATE' && "
            f"object.?spec.orValue({{}}) == oldObject.?spec.orValue({{}})) || {_SECRETS_OK}"
        ),
        "message": (
            "the workers may mount or read a Secret (volumes, env, envFrom) only if you "
            "may get it yourself in this namespace"
        ),
        "reason": "Forbidden",
    },
]


_PROPOSER = (
    "authorizer.group('ai.operator').resource('quotarequests')"
    f".namespace(request.namespace).check('{PROPOSE_VERB}').allowed()"
)

_QUOTA_VALIDATIONS: list[dict[str, Any]] = [
    {
        "expression": (
            f"request.operation != 'CREATE' || {_PROPOSER} || "
            f"({_LABEL} in {_LABELS} && {_LABELS}[{_LABEL}] == request.userInfo.username)"
        ),
        "messageExpression": (
            f"'label {LABEL_USER} must name the user creating the request (the requester): "
            "set it to \"' + request.userInfo.username + '\" (found \"' + "
            f"({_LABEL} in {_LABELS} ? {_LABELS}[{_LABEL}] : '') + '\")'"
        ),
        "reason": "Forbidden",
    },
    _user_label_fixed("who asked for the quota"),
    {
        "expression": (
            "request.operation != 'CREATE' || !has(object.spec.user) || "
            f"object.spec.user == request.userInfo.username || {_PROPOSER}"
        ),
        "messageExpression": (
            "'you may request more quota for yourself only: set spec.user to \"' + "
            "request.userInfo.username + '\" or leave it out (found \"' + "
            "object.spec.user + '\")'"
        ),
        "reason": "Forbidden",
    },
    {
        # Removed by its requester, the finalizer would let them delete a temporary
        # grant before its revert is opened, and keep the quota for good.
        "expression": (
            f"request.operation != 'UPDATE' || {_PROPOSER} || "
            f"!('{GRANT_FINALIZER}' in oldObject.metadata.?finalizers.orValue([])) || "
            f"'{GRANT_FINALIZER}' in object.metadata.?finalizers.orValue([])"
        ),
        "message": (
            f"finalizer {GRANT_FINALIZER} is gangops': it is removed once the temporary "
            "grant is taken back (or was never granted)"
        ),
        "reason": "Forbidden",
    },
    {
        # Its grant, and the revert of a temporary one, follow what was asked: a spec
        # changed afterwards (another user, a smaller amount) would revert something
        # else than was granted.
        "expression": (
            "request.operation != 'UPDATE' || "
            "object.?spec.orValue({}) == oldObject.?spec.orValue({})"
        ),
        "message": (
            "a QuotaRequest's spec cannot change once it is created (what is granted, "
            "and reverted when a temporary grant ends, is what was asked): create a new one"
        ),
        "reason": "Forbidden",
    },
]


def _matching(resource: str, *operations: str) -> dict[str, Any]:
    """An admission policy's match: `resource` of ai.operator (not its status), on
    `operations`."""
    rule = {
        "apiGroups": ["ai.operator"],
        "apiVersions": ["v1"],
        "operations": list(operations),
        "resources": [resource],
    }
    return {"resourceRules": [rule]}


def _trainingjobs(*operations: str) -> dict[str, Any]:
    """An admission policy's match: TrainingJobs (not their status), on `operations`."""
    return _matching("trainingjobs", *operations)


def _validating(
    name: str, match: dict[str, Any], validations: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": _PART_OF},
        "spec": {"failurePolicy": "Fail", "matchConstraints": match, "validations": validations},
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": _PART_OF},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def admission_objects() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicies (TrainingJobs: who pays; QuotaRequests: who
    asks) and their bindings (deny), in apply order."""
    return [
        *_validating(POLICY_NAME, _trainingjobs("CREATE", "UPDATE"), _VALIDATIONS),
        *_validating(
            QUOTA_POLICY_NAME, _matching("quotarequests", "CREATE", "UPDATE"), _QUOTA_VALIDATIONS
        ),
    ]


def mutating_objects() -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy that sets `ai.operator/user` to the creator when
    the label is missing (and the creator's name can be a label value), and its
    binding, in apply order."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": _PART_OF},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": _trainingjobs("CREATE"),
            "matchConditions": [
                {"name": "label-missing", "expression": f"!({_LABEL} in {_LABELS})"},
                {
                    "name": "username-is-a-label-value",
                    "expression": f"request.userInfo.username.matches('{_LABEL_VALUE}')",
                },
            ],
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": (
                            "Object{metadata: Object.metadata{labels: "
                            f"{{{_LABEL}: request.userInfo.username}}}}}}"
                        )
                    },
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": _PART_OF},
        "spec": {"policyName": POLICY_NAME},
    }
    return [policy, binding]
