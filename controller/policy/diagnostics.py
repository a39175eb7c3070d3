"""Diagnostics: every problem a user can cause, with a stable code and a place.

The validator never raises on bad input; it returns diagnostics. Each code is
registered here once, with a title and the text the README documents, so the
code list in the README and the codes the program emits cannot drift apart
(a unit test compares them).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CODES", "Code", "Diagnostic", "Severity", "did_you_mean", "sort_key"]


class Severity(StrEnum):
    """How bad a diagnostic is. Only errors make a policy set invalid."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Code:
    """A registered diagnostic code."""

    id: str
    """Stable identifier, `GP` and three digits; never reused for another meaning."""
    name: str
    """Short kebab-case name, used as the SARIF rule name."""
    severity: Severity
    """Default severity."""
    doc: str
    """One sentence for the README: when it is reported and how to fix it."""


def _codes(*codes: Code) -> dict[str, Code]:
    return {c.id: c for c in codes}


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741

CODES: dict[str, Code] = _codes(
    # -- reading files (GP1xx)
    Code("GP101", "yaml-syntax", E, "The file is not valid YAML; the position of the parser error is given, and where the unclosed bracket, brace or quote it was reading opened."),
    Code("GP102", "duplicate-key", E, "A mapping has the same key twice; YAML readers would silently keep one."),
    Code("GP103", "file-too-large", E, "The file exceeds the size limit (`--max-file-size`, default 1 MiB) and is not read."),
    Code("GP104", "not-utf8", E, "The file is not UTF-8 text; the first bad byte is located."),
    Code("GP105", "alias-expansion", E, "YAML anchors and aliases expand to too many nodes (an alias bomb); the document is not read."),
    Code("GP106", "empty-document", W, "A document between `---` separators is empty; it is ignored."),
    Code("GP107", "not-a-mapping", E, "A document is not a mapping (for example a bare list or string)."),
    Code("GP108", "missing-kind", E, "A document has no `apiVersion` or no `kind`."),
    Code("GP109", "unknown-kind", E, "A document of the `policy.ai.operator` group has a kind gangops does not know; the nearest known kind is suggested."),
    Code("GP110", "unsupported-api-version", E, "A document of the `policy.ai.operator` group uses a version other than `v1`, or its apiVersion is a near miss of it (no version, a version run into the group without a `/` such as `policy.ai.operator.v1`, a typo in the group on a policy kind)."),
    Code("GP111", "foreign-document", I, "A document of another API group (a Kustomization, a cluster description) is not a policy and is skipped."),
    Code("GP112", "unreadable-file", E, "The file could not be read (permissions), or is not a regular file. Symbolic links are refused, not followed, from the working tree as from Git (which stores a link as the text of its target), so `validate` and the reconciler agree (but a PATH, or a PolicySource's `spec.path`, that links to a directory is that directory); FIFOs and devices are refused too."),
    Code("GP113", "no-policies", E, "No policy documents were found under the given paths."),
    Code("GP114", "too-deep", E, "Lists and mappings nest more than 100 levels deep (policies need fewer than ten); the file or document is not read."),
    Code("GP115", "read-otherwise-by-yaml11", E, "A plain scalar that kubectl and Argo CD read otherwise than gangops, which reads policies as YAML 1.2: their sigs.k8s.io/yaml (go-yaml v2) keeps YAML 1.1's booleans and octal numbers, so `no`, `off`, `y` or `on` are strings here and booleans there, and `010` is 10 here and 8 there. They apply the same files as custom resources; quote the string, or write the number without its leading 0, so the file means one thing to both."),
    # -- schema (GP2xx)
    Code("GP201", "unknown-field", E, "A field is not part of the kind's schema; the nearest known field is suggested."),
    Code("GP202", "wrong-type", E, "A field has the wrong type (for example a string where a number belongs)."),
    Code("GP203", "missing-field", E, "A required field is missing."),
    Code("GP204", "invalid-value", E, "A value breaks the schema's constraints (range, pattern, allowed values, length)."),
    # -- semantic rules (GP3xx)
    Code("GP301", "duplicate-name", E, "Two documents of the same kind have the same `metadata.name`."),
    Code("GP302", "namespace-conflict", E, "A namespace is claimed by more than one project; each namespace belongs to at most one."),
    Code("GP303", "guaranteed-above-max", E, "A `guaranteed` amount exceeds the `max` beside it (project or user level)."),
    Code("GP304", "users-exceed-project", E, "The named users' guarantees add up to more than their project's guarantee, or the default user's guarantee alone is more than it."),
    Code("GP305", "guarantees-exceed-capacity", E, "The projects' guarantees add up to more than the capacity minus the reserve; they could not all be honoured at once."),
    Code("GP306", "max-overcommit", I, "The projects' maxima add up to more than the capacity. This is allowed (idle GPUs are lent), and reported so it is a choice."),
    Code("GP307", "unknown-tier", E, "A tier is referenced (by a project or the reserve) but no PriorityTier of that name exists."),
    Code("GP308", "tier-value-out-of-range", E, "A tier's value is outside -2147483648..1000000000 (higher values are reserved for system classes)."),
    Code("GP309", "reserved-name", E, "A name uses a prefix or a namespace reserved by Kubernetes or gangops (`system-` tiers; `kube-*`, `default` or gangops' own system namespace)."),
    Code("GP310", "multiple-global-defaults", E, "More than one tier sets `globalDefault: true`."),
    Code("GP311", "invalid-name", E, "A name is not a valid DNS-1123 name (lower-case alphanumerics and '-', at most 63 characters for namespaces)."),
    Code("GP312", "invalid-quantity", E, "An amount is not a Kubernetes quantity (examples: 8, 500m, 64Gi, 2Ti), is negative, or is more than Kubernetes can hold (2^63-1 millicores of CPU, 2^63-1 bytes of memory)."),
    Code("GP313", "cluster-policy-count", E, "A policy set needs exactly one ClusterPolicy."),
    Code("GP314", "job-max-above-project", E, "`jobs.maxGPU` is larger than the project's GPU `max`, so such a job could never run."),
    Code("GP315", "user-max-above-project", W, "A named user's `max` is larger than the project's `max`; the project's ceiling applies first. For `users.default` it is an error: every user not listed would get a ceiling the project never allows."),
    Code("GP316", "reserve-above-capacity", E, "The reserve is larger than the capacity."),
    Code("GP317", "capacity-source", E, "`capacityFrom` names a cluster description that cannot be read or parsed, or neither `capacity.gpu` nor `capacityFrom` is given."),
    Code("GP318", "no-tiers", W, "A project allows no tiers, so none of its jobs can be admitted."),
    Code("GP319", "user-never-matches", E, "A user name is not a Kubernetes label value (at most 63 ASCII letters, digits, '-', '_', '.'), so no TrainingJob's `ai.operator/user` label can name it (a look-alike letter, a space, a service account)."),
    Code("GP320", "scheduling-policy-too-large", E, "The compiled scheduling policy is over the 1 MiB the API server allows in a ConfigMap; the size is given."),
    Code("GP321", "duplicate-alert-rule", E, "Two rules of `alertActions` name the same alert; gangops would not know which to follow."),
    Code("GP322", "alert-rule-without-effect", W, "A part of an alert rule has no effect: mode `enforce` with action `none`, or `gracePeriodSeconds` where no job is restarted (`restartJob: false`, or action `none`)."),
    Code("GP323", "job-max-above-namespace-quota", E, "`jobs.maxGPU` is larger than the largest namespace's share of the project's GPU `max` (the max is split evenly over the namespaces' ResourceQuotas, and a job runs in one namespace), so such a job could never run; lower `jobs.maxGPU`, raise the max or list fewer namespaces. Without `jobs.maxGPU` (it defaults to the project's max) it is a warning."),
    Code("GP324", "empty-namespace-quota", E, "The project's `max` of a resource, split evenly over its namespaces (whole GPUs, millicores, bytes), leaves a namespace a share of 0, so no pod that asks for it can start there; raise the max or list fewer namespaces."),
    Code("GP325", "empty-namespace-job-count", E, "`jobs.maxCount`, split evenly over the project's namespaces, leaves a namespace a share of 0 TrainingJobs, so the API server refuses every TrainingJob created there; raise `jobs.maxCount` to at least the number of namespaces or list fewer namespaces."),
)  # fmt: skip


@dataclass(frozen=True)
class Diagnostic:
    """One problem, located in a file.

    `line` and `column` are 1-based; 0 means "the whole file".
    """

    code: str
    message: str
    file: str
    line: int = 0
    column: int = 0
    severity: Severity | None = None
    """Overrides the code's default severity when set."""

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unregistered diagnostic code {self.code}")

    @property
    def level(self) -> Severity:
        """The effective severity."""
        return self.severity or CODES[self.code].severity

    @property
    def is_error(self) -> bool:
        """True when this diagnostic makes the policy set invalid."""
        return self.level is Severity.ERROR


def sort_key(d: Diagnostic) -> tuple[str, int, int, str, str]:
    """Order diagnostics by place, then code, so output is stable."""
    return (d.file, d.line, d.column, d.code, d.message)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A " (did you mean 'x'?)" suffix naming the closest choice, or ""."""
    options = list(choices)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in options}
        close = [lowered[word.lower()]] if word.lower() in lowered else []
    return f" (did you mean {close[0]!r}?)" if close else ""
