"""Semantic rules: what JSON Schema cannot say about a policy set.

Each rule looks at the whole set (names across files, sums across projects)
and reports diagnostics with stable codes at the field that is wrong. Rules
are pure: they take model values and return diagnostics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction

from controller.jobs.spec import LABEL_USER
from controller.policy.diagnostics import Diagnostic, Severity, did_you_mean
from controller.policy.loader import Document
from controller.policy.model import (
    RESOURCE_NAMES,
    ClusterPolicy,
    PriorityTier,
    Project,
    QuotaPair,
    format_amount,
)
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE

__all__ = ["check"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
"""A Kubernetes label value (not empty: a TrainingJob's owner label must name someone)."""
_RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
TIER_MIN, TIER_MAX = -2147483648, 1_000_000_000


def _at(doc: Document, code: str, message: str, *path: str | int) -> Diagnostic:
    line, col = doc.pos(path)
    return Diagnostic(code, message, doc.file, line, col)


def check(
    *,
    documents: Sequence[Document],
    clusters: Sequence[ClusterPolicy],
    tiers: Sequence[PriorityTier],
    projects: Sequence[Project],
    root: str,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
) -> list[Diagnostic]:
    """Every semantic problem of the set. `documents` are all policy documents
    (also those that failed the schema), for name checks; the model lists hold
    only schema-valid ones. `root` labels set-wide problems with no file.
    """
    out: list[Diagnostic] = []
    out += _names(documents)
    out += _cluster_count(documents, root)
    out += _tiers(tiers)
    out += _namespaces(projects, system_namespace)
    # Tiers that failed the schema still exist: naming one is no second error.
    tier_names = {d.name for d in documents if d.kind == "PriorityTier" and d.name}
    for p in projects:
        out += _project(p, tier_names)
    for c in clusters:
        out += _cluster(c, tier_names)
    if len(clusters) == 1:
        out += _capacity(clusters[0], projects)
    return out


def _names(documents: Sequence[Document]) -> Iterator[Diagnostic]:
    first: dict[tuple[str, str], Document] = {}
    for doc in documents:
        if not doc.name:
            continue
        key = (doc.kind, doc.name)
        pattern, what = (
            (_DNS_LABEL, "DNS-1123 label")
            if doc.kind == "Project"
            else (_DNS_SUBDOMAIN, "DNS-1123 subdomain")
        )
        limit = 63 if doc.kind == "Project" else 253
        if not pattern.match(doc.name) or len(doc.name) > limit:
            yield _at(
                doc,
                "GP311",
                f"{doc.kind} name {doc.name!r} is not a valid {what} "
                f"(lower-case letters, digits and '-', at most {limit} characters)",
                "metadata",
                "name",
            )
        if key in first:
            prev = first[key]
            yield _at(
                doc,
                "GP301",
                f"{doc.kind} {doc.name!r} is already defined at {prev.file}:{prev.line}",
                "metadata",
                "name",
            )
        else:
            first[key] = doc


def _cluster_count(documents: Sequence[Document], root: str) -> Iterator[Diagnostic]:
    """Counted over every ClusterPolicy document, those that failed the schema too:
    one with a typo has its own errors, and is no "none found" besides."""
    clusters = [d for d in documents if d.kind == "ClusterPolicy"]
    if not clusters:
        yield Diagnostic("GP313", "no ClusterPolicy found; a policy set needs exactly one", root)
    for extra in clusters[1:]:
        first = clusters[0]
        yield _at(
            extra,
            "GP313",
            f"a second ClusterPolicy ({extra.name!r}); the first is at {first.file}:{first.line}",
            "metadata",
            "name",
        )


def _tiers(tiers: Sequence[PriorityTier]) -> Iterator[Diagnostic]:
    defaults: list[PriorityTier] = []
    for t in tiers:
        if t.name.startswith("system-"):
            yield _at(
                t.doc,
                "GP309",
                f"tier {t.name!r}: the 'system-' prefix is reserved for Kubernetes' own classes",
                "metadata",
                "name",
            )
        if t.global_default:
            defaults.append(t)
    for t in defaults[1:]:
        yield _at(
            t.doc,
            "GP310",
            f"tier {t.name!r} sets globalDefault, as does {defaults[0].name!r} "
            f"({defaults[0].doc.file}:{defaults[0].doc.line}); at most one tier may",
            "spec",
            "globalDefault",
        )


def _namespaces(projects: Sequence[Project], system_namespace: str) -> Iterator[Diagnostic]:
    owner: dict[str, Project] = {}
    for p in projects:
        for i, ns in enumerate(p.namespaces):
            if not _DNS_LABEL.match(ns) or len(ns) > 63:
                yield _at(
                    p.doc,
                    "GP311",
                    f"namespace {ns!r} is not a valid DNS-1123 label "
                    "(lower-case letters, digits and '-', at most 63 characters)",
                    "spec",
                    "namespaces",
                    i,
                )
            if ns in _RESERVED_NAMESPACES or ns.startswith("kube-"):
                yield _at(
                    p.doc,
                    "GP309",
                    f"namespace {ns!r} is reserved by Kubernetes and cannot belong to a project",
                    "spec",
                    "namespaces",
                    i,
                )
            elif ns == system_namespace:
                yield _at(
                    p.doc,
                    "GP309",
                    f"namespace {ns!r} is gangops' own (its controller, agents, Lease and "
                    "policy) and cannot belong to a project",
                    "spec",
                    "namespaces",
                    i,
                )
            if ns in owner and owner[ns] is not p:
                yield _at(
                    p.doc,
                    "GP302",
                    f"namespace {ns!r} already belongs to project {owner[ns].name!r} "
                    f"({owner[ns].doc.file}:{owner[ns].doc.line})",
                    "spec",
                    "namespaces",
                    i,
                )
            owner.setdefault(ns, p)


def _pair_problems(
    pair: QuotaPair, doc: Document, what: str, path: tuple[str | int, ...]
) -> Iterator[Diagnostic]:
    for r in RESOURCE_NAMES:
        g, m = pair.guaranteed.get(r), pair.max.get(r)
        if g is not None and m is not None and g > m:
            yield _at(
                doc,
                "GP303",
                f"{what}: guaranteed {r} {format_amount(r, g)} is more than "
                f"max {format_amount(r, m)}",
                *path,
                "guaranteed",
                r,
            )


def _project(p: Project, tier_names: set[str]) -> Iterator[Diagnostic]:
    doc = p.doc
    yield from _pair_problems(p.quota, doc, f"project {p.name!r}", ("spec", "quota"))
    yield from _pair_problems(
        p.user_default, doc, f"project {p.name!r} default user", ("spec", "users", "default")
    )
    # Every user not listed gets the default: a default max the project never
    # allows is a mistake, not a choice about one person.
    yield from _user_max(
        p, p.user_default, "default user", ("spec", "users", "default"), Severity.ERROR
    )
    for u in p.members:
        path: tuple[str | int, ...] = ("spec", "users", "members", u.index)
        yield from _pair_problems(u.quota, doc, f"user {u.name!r}", path)
        yield from _user_max(p, u.quota, f"user {u.name!r}", path, None)
        if not _LABEL_VALUE.match(u.name) or len(u.name) > 63:
            yield _at(
                doc,
                "GP319",
                f"user {u.name!r} can never own a TrainingJob: the owner is the job's "
                f"{LABEL_USER} label, and a label value is at most 63 ASCII letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit",
                *path,
                "name",
            )
    seen_users: dict[str, int] = {}
    for u in p.members:
        if u.name in seen_users:
            yield _at(
                doc,
                "GP301",
                f"user {u.name!r} is listed twice in project {p.name!r}",
                "spec",
                "users",
                "members",
                u.index,
                "name",
            )
        seen_users.setdefault(u.name, u.index)
    for r in RESOURCE_NAMES:
        total = sum((u.quota.guaranteed.get(r) or Fraction(0) for u in p.members), Fraction(0))
        project_g = p.quota.guaranteed.get(r) or Fraction(0)
        default_g = p.user_default.guaranteed.get(r)
        if default_g is not None and default_g > project_g:
            # every user not listed is guaranteed this: more than the project has
            yield _at(
                doc,
                "GP304",
                f"project {p.name!r}: the default user's guaranteed {r} "
                f"{format_amount(r, default_g)} is more than the project's guaranteed "
                f"{format_amount(r, project_g)}; every user not listed would be guaranteed it",
                "spec",
                "users",
                "default",
                "guaranteed",
                r,
            )
        if total > project_g:
            yield _at(
                doc,
                "GP304",
                f"project {p.name!r}: users' guaranteed {r} adds up to {format_amount(r, total)}, "
                f"more than the project's guaranteed {format_amount(r, project_g)}",
                "spec",
                "users",
                "members",
            )
    max_gpu = p.quota.max.gpu
    if p.job_max_gpu is not None and max_gpu is not None and p.job_max_gpu > max_gpu:
        yield _at(
            doc,
            "GP314",
            f"project {p.name!r}: jobs.maxGPU {p.job_max_gpu} is more than the project's "
            f"max of {max_gpu} GPUs",
            "spec",
            "jobs",
            "maxGPU",
        )
    yield from _namespace_shares(p)
    if p.tiers is not None:
        if not p.tiers:
            yield _at(
                doc,
                "GP318",
                f"project {p.name!r} allows no tiers; none of its jobs can be admitted",
                "spec",
                "jobs",
                "tiers",
            )
        yield from _unknown_tiers(doc, p.tiers, tier_names, ("spec", "jobs", "tiers"))
    if p.default_tier is not None:
        allowed = tier_names if p.tiers is None else set(p.tiers) & tier_names
        if p.default_tier not in allowed:
            where = "no such tier" if p.default_tier not in tier_names else "not in jobs.tiers"
            yield _at(
                doc,
                "GP307",
                f"project {p.name!r}: defaultTier {p.default_tier!r}: {where}",
                "spec",
                "jobs",
                "defaultTier",
            )


def _namespace_shares(p: Project) -> Iterator[Diagnostic]:
    """The compiler splits the project's max evenly over its namespaces into
    ResourceQuotas (whole GPUs, millicores, bytes; the namespaces listed first take
    the remainders), and the API server and the scheduler hold each namespace to
    its share: a job larger than the largest share, or any work in a namespace
    whose share is 0, can never start (GP323, GP324). `jobs.maxCount` is split the
    same way (whole TrainingJobs) into an object count: a namespace whose share is
    0 can never hold a TrainingJob at all (GP325)."""
    doc, n = p.doc, len(p.namespaces)
    if n < 2:
        return
    for r in RESOURCE_NAMES:
        amount = p.quota.max.get(r)
        if not amount:  # unset, or 0 on purpose: no namespace gets any
            continue
        unit = Fraction(1, 1000) if r == "cpu" else Fraction(1)
        units = -(-amount // unit)
        if units < n:
            empty = p.namespaces[units:]
            names = ", ".join(repr(ns) for ns in empty)
            yield _at(
                doc,
                "GP324",
                f"project {p.name!r}: max {r} {format_amount(r, amount)}, split evenly over "
                f"{n} namespaces, leaves {names} a ResourceQuota of 0 {r}: no pod that asks "
                f"for {r} can start there; raise max.{r} to at least "
                f"{format_amount(r, unit * n)} or list fewer namespaces",
                "spec",
                "quota",
                "max",
                r,
            )
    count = p.job_max_count
    if count is not None and count < n:
        names = ", ".join(repr(ns) for ns in p.namespaces[count:])
        yield _at(
            doc,
            "GP325",
            f"project {p.name!r}: jobs.maxCount {count}, split evenly over {n} namespaces, "
            f"leaves {names} a ResourceQuota of 0 TrainingJobs: the API server refuses every "
            f"TrainingJob created there; raise jobs.maxCount to at least {n} or list fewer "
            "namespaces",
            "spec",
            "jobs",
            "maxCount",
        )
    max_gpu = p.quota.max.gpu
    if max_gpu is None:
        return
    largest = -(-max_gpu // n)
    split = (
        f"the project's max of {max_gpu} GPUs is split evenly over its {n} namespaces, "
        f"at most {largest} in each namespace's ResourceQuota, and a job runs in one namespace"
    )
    if p.job_max_gpu is not None and largest < p.job_max_gpu <= max_gpu:
        yield _at(
            doc,
            "GP323",
            f"project {p.name!r}: jobs.maxGPU {p.job_max_gpu} can never be reached: {split}; "
            f"lower jobs.maxGPU to {largest}, raise max.gpu to at least "
            f"{(p.job_max_gpu - 1) * n + 1}, or list fewer namespaces",
            "spec",
            "jobs",
            "maxGPU",
        )
    elif p.job_max_gpu is None and max_gpu > largest:
        line, col = doc.pos(("spec", "quota", "max", "gpu"))
        yield Diagnostic(
            "GP323",
            f"project {p.name!r}: jobs.maxGPU is not set, so it defaults to the project's max "
            f"of {max_gpu} GPUs, but no job above {largest} GPUs can start: {split}; set "
            f"jobs.maxGPU: {largest} to say so",
            doc.file,
            line,
            col,
            severity=Severity.WARNING,
        )


def _user_max(
    p: Project,
    quota: QuotaPair,
    who: str,
    path: tuple[str | int, ...],
    severity: Severity | None,
) -> Iterator[Diagnostic]:
    for r in RESOURCE_NAMES:
        um, pm = quota.max.get(r), p.quota.max.get(r)
        if um is not None and pm is not None and um > pm:
            line, col = p.doc.pos((*path, "max", r))
            yield Diagnostic(
                "GP315",
                f"project {p.name!r} {who}: max {r} {format_amount(r, um)} is more than the "
                f"project's max {format_amount(r, pm)}; the project's ceiling applies",
                p.doc.file,
                line,
                col,
                severity=severity,
            )


def _unknown_tiers(
    doc: Document, names: Iterable[str], known: set[str], path: tuple[str | int, ...]
) -> Iterator[Diagnostic]:
    for i, name in enumerate(names):
        if name not in known:
            yield _at(
                doc,
                "GP307",
                f"tier {name!r} does not exist{did_you_mean(name, known)}; "
                f"define a PriorityTier named {name!r} or remove it",
                *path,
                i,
            )


def _alert_actions(c: ClusterPolicy) -> Iterator[Diagnostic]:
    seen: dict[str, int] = {}
    path = ("spec", "alertActions", "rules")
    for r in c.alert_rules:
        if r.alert in seen:
            yield _at(
                c.doc,
                "GP321",
                f"alert {r.alert!r} has two rules (the first at rules[{seen[r.alert]}]);"
                " gangops would not know which to follow: merge them",
                *path,
                r.index,
                "alert",
            )
        seen.setdefault(r.alert, r.index)
        if r.action == "none" and r.mode == "enforce":
            yield _at(
                c.doc,
                "GP322",
                f"alert {r.alert!r}: mode enforce with action none does nothing but record"
                " Events; set an action (quarantine-gpus, cordon-node) or mode shadow",
                *path,
                r.index,
                "mode",
            )
        elif r.grace_given and not r.restart_job:
            yield _at(
                c.doc,
                "GP322",
                f"alert {r.alert!r}: gracePeriodSeconds is set but restartJob is false, so no"
                " job is restarted after it; remove it or set restartJob: true",
                *path,
                r.index,
                "gracePeriodSeconds",
            )
        elif r.restart_job and r.action == "none" and r.grace_given:
            yield _at(
                c.doc,
                "GP322",
                f"alert {r.alert!r}: action none restarts no job; gracePeriodSeconds has no effect",
                *path,
                r.index,
                "gracePeriodSeconds",
            )


def _cluster(c: ClusterPolicy, tier_names: set[str]) -> Iterator[Diagnostic]:
    yield from _alert_actions(c)
    yield from _unknown_tiers(c.doc, c.reserve_tiers, tier_names, ("spec", "reserve", "tiers"))
    cap = c.capacity.gpu
    if cap is not None and c.reserve_gpu > cap:
        yield _at(
            c.doc,
            "GP316",
            f"reserve of {c.reserve_gpu} GPUs is more than the capacity of {cap}",
            "spec",
            "reserve",
            "gpu",
        )


def _capacity(c: ClusterPolicy, projects: Sequence[Project]) -> Iterator[Diagnostic]:
    for r in RESOURCE_NAMES:
        cap = c.capacity.get(r)
        if cap is None:
            continue
        # A reserve above the capacity is GP316; then nothing is usable.
        usable = max(cap - (c.reserve_gpu if r == "gpu" else 0), Fraction(0))
        guaranteed = sum((p.quota.guaranteed.get(r) or Fraction(0) for p in projects), Fraction(0))
        if guaranteed > usable:
            reserve = (
                f" minus the reserve of {c.reserve_gpu}" if r == "gpu" and c.reserve_gpu else ""
            )
            yield _at(
                c.doc,
                "GP305",
                f"projects guarantee {format_amount(r, guaranteed)} in all, more than the "
                f"capacity of {format_amount(r, cap)}{reserve} ({format_amount(r, usable)}); "
                "lower the guarantees or raise the capacity",
                "spec",
                "capacity",
                r,
            )
        maxima = sum((_or(p.quota.max.get(r), cap) for p in projects), Fraction(0))
        if maxima > cap:
            yield Diagnostic(
                "GP306",
                f"projects' max {r} adds up to {format_amount(r, maxima)} over a capacity of "
                f"{format_amount(r, cap)} ({_times(maxima, cap)} over-commit): idle capacity "
                "is lent, and borrowed work is reclaimed when an owner needs its guarantee",
                c.doc.file,
                *c.doc.pos(("spec", "capacity", r)),
                severity=Severity.INFO,
            )


def _or(amount: Fraction | None, default: Fraction) -> Fraction:
    return default if amount is None else amount


def _times(a: Fraction, b: Fraction) -> str:
    """`a / b` as `2.14x`, exactly (no float: amounts may be huge)."""
    hundredths = a * 100 // b
    return f"{hundredths // 100}.{hundredths % 100:02d}x"
