"""The quota-request loop: QuotaRequests in, pull requests and status out.

Each pass (`step`) lists the QuotaRequests (the TrainingJobs, for proposals, come
from a cache a watch keeps: `jobs`) and, in this order:

1. reads the pull request of each request that has one: merged -> wait for
   the reconciler to apply it (the PolicySource's lastAppliedRevision contains
   the merge), then Ready; closed unmerged -> Rejected;
2. groups the open and new requests by project, user and resource; each
   group is one branch (`request.branch_name`) and one pull request whose edit
   adds up the group's amounts over the base branch's tip; the branch is
   pushed, and the pull request opened or updated, only when the group
   changed (its fingerprint is kept in the status);
3. opens the revert pull request of each Ready temporary grant past its
   expiresAt, and ends it Expired once that revert is applied.

A temporary grant carries the finalizer `request.FINALIZER` from its first pass
(before its pull request is opened) for as long as something may be owed back,
so its deletion is an early expiry, not a way to keep the quota: deleted once
merged, its revert is opened at once (once the grant is applied) and the request
goes when the revert is applied, or when a reviewer closes the revert (the grant
stays: their decision). Deleted while its pull request is open, it is withdrawn:
the group's branch is pushed without it (there is no forge call to close a pull
request; alone, the branch then changes nothing and says so), and it goes. Rejected,
Expired, or never proposed, nothing is owed and it goes at once.

A forge or Git failure puts the group's requests in Retry with a backoff that
doubles (2 s to 5 min); nothing else is lost. Each request's state is mirrored
on the TrainingJob it names (`status.quotaRequest`), so a user waiting for
quota sees the pull request's URL on the job.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from controller.gitauth import GitError, auth_from_secret
from controller.jobs.spec import LABEL_USER
from controller.kube.client import (
    FIELD_MANAGER,
    RESOURCES,
    ApiError,
    KubeApi,
    NotLeaderError,
    retry_wait,
)
from controller.kube.clock import Clock, SystemClock
from controller.kube.informer import Informer
from controller.policy.sources import outside_repository
from controller.quota.approval import approval
from controller.quota.body import check_tree, pr_body, pr_title, withdrawn_pr
from controller.quota.branch import GitUnavailable, PolicyRepo
from controller.quota.edit import (
    EditError,
    Superseded,
    auto_propose,
    edit_max,
    project_namespaces,
    read_max,
)
from controller.quota.forge import (
    Forge,
    ForgeError,
    ForgeUnavailable,
    PullRequest,
    make_forge,
    urllib_transport,
)
from controller.quota.propose import proposal, shortfall
from controller.quota.request import (
    FINALIZER,
    QuotaRequestSpec,
    State,
    backoff_s,
    branch_name,
    parse_time,
    revert_branch,
    status_body,
)

__all__ = ["ForgeFactory", "QuotaController", "QuotaSettings", "SourceInfo"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_QR = RESOURCES["QuotaRequest"]
_JOB = RESOURCES["TrainingJob"]
_SOURCE = RESOURCES["PolicySource"]


@dataclass(frozen=True)
class QuotaSettings:
    cache_dir: Path
    """Where the writable clones of the policy repositories live."""
    system_namespace: str = "gangops-system"
    """Where the forge token Secrets are."""
    interval_s: float = 1.0
    """How often QuotaRequests are listed (a pass with nothing to do costs one list)."""
    forge_poll_s: float = 10.0
    """How often an open pull request's state is read from the forge."""
    propose: bool = True
    """Propose QuotaRequests for jobs blocked only by a max, in the projects that opted
    in (`spec.quotaRequests.autoPropose`)."""
    recheck_s: float = 60.0
    """How long a job of a project that did not opt in is left alone before asking again."""


@dataclass(frozen=True)
class SourceInfo:
    """A PolicySource that accepts quota requests."""

    name: str
    repo: PolicyRepo
    forge: Forge


ForgeFactory = Callable[[Obj, str], Forge]
"""(the PolicySource's spec.forge, the token) -> the forge client."""


def default_forge(spec: Obj, token: str) -> Forge:
    return make_forge(
        str(spec["type"]),
        api=str(spec["api"]),
        repo=str(spec["repository"]),
        token=token,
        transport=urllib_transport(),
    )


class _Retry(Exception):
    pass


def _job_summary(job: Obj) -> Obj:
    """What the proposals read of a TrainingJob (`propose.shortfall`,
    `propose.proposal`): its name, namespace and labels, and the waiting part of its
    status; the job cache keeps this, not the whole job."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "labels", "resourceVersion") if k in meta
        },
        "status": {
            k: status[k] for k in ("phase", "reason", "message", "quotaRequest") if k in status
        },
    }


@dataclass
class QuotaController:
    kube: KubeApi
    settings: QuotaSettings
    forge_factory: ForgeFactory = default_forge
    clock: Clock = field(default_factory=SystemClock)
    usage: Callable[[str, float | None], str | None] = lambda project, max_gpus: None
    """The project's recent usage (project, its max GPUs) as markdown, where available
    (`usage.PrometheusUsage.markdown`)."""
    what_if: Callable[[str, str, Fraction], str | None] = lambda project, resource, delta: None
    """A simulator what-if of the change (project, resource, delta), as markdown."""
    usage_fraction: Callable[[str, float | None], float | None] = lambda project, max_gpus: None
    """The project's use of its max GPUs over the last 14 days (0..1), for
    auto-approval (`usage.PrometheusUsage.fraction`)."""
    fence: Callable[[], bool] | None = None
    """The leader's write fence (`LeaseElector.is_leader`): Git pushes and forge
    writes are refused outside a term, like the API writes of the fenced client."""
    _sources: dict[str, tuple[str, SourceInfo]] = field(default_factory=dict)
    _polled: dict[tuple[str, int], tuple[float, PullRequest]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _declined: dict[str, float] = field(default_factory=dict)
    _approval_checked: dict[tuple[str, int], float] = field(default_factory=dict)
    _conflict_read: dict[tuple[str, int], float] = field(default_factory=dict)
    """(source, pull request) -> the read (`_polled` time) whose conflict `_behind` saw."""
    _not_applied: dict[tuple[str, str], str] = field(default_factory=dict)
    """(source, merge commit) -> the applied revision found not to contain it yet."""
    jobs: Informer = field(init=False)
    """The TrainingJobs as the proposals read them (name, owner, the waiting reason),
    kept by a watch once `start`ed (or filled by `jobs.relist()`): a pass reads them
    here, not from a list of every job each second."""

    def __post_init__(self) -> None:
        self.jobs = Informer(self.kube, _JOB, clock=self.clock, transform=_job_summary)

    def _leading(self, what: str) -> None:
        """Raise NotLeaderError unless this replica leads (a push, a pull request
        opened, updated or merged by a deposed replica would race the leader's)."""
        if self.fence is not None and not self.fence():
            raise NotLeaderError(f"refusing to {what}: this replica is not the leader")

    # --- the loop -------------------------------------------------------------

    def run(self) -> None:
        """Pass after pass until `stop`."""
        missing = False
        while not self._stop.is_set():
            wait = self.settings.interval_s
            try:
                self.step()
                missing = False
            except NotLeaderError as e:
                log.warning("quota-request pass stopped: %s", e)
            except ApiError as e:
                if e.status != 404:
                    log.warning("quota-request pass failed: %s", e)
                elif not missing:  # said once, not every second
                    log.warning("the QuotaRequest CRD is not installed: `gangops install-crds`")
                # longer where the API server asks for it
                missing, wait = e.status == 404, retry_wait(e, max(wait, 30.0))
            except Exception:  # one bad pass must not end the loop
                log.exception("quota-request pass failed")
            self.clock.wait(self._stop, wait)

    def start(self) -> threading.Thread:
        """`run` on a thread of its own (and the job cache's watch)."""
        self.jobs.start()
        t = threading.Thread(target=self.run, name="quota-requests", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self._stop.set()
        self.jobs.stop()

    def step(self) -> None:
        objs, _ = self.kube.list(_QR)
        if self.settings.propose:
            objs += self._propose_for_blocked_jobs(objs)
        now = self.clock.now()
        groups: dict[tuple[str, str, str], list[tuple[Obj, QuotaRequestSpec]]] = {}
        withdrawn: dict[tuple[str, str, str], list[tuple[Obj, QuotaRequestSpec]]] = {}
        for obj in objs:
            status = obj.get("status") or {}
            if status.get("state") in ("Rejected", "Expired"):
                self._release(obj, _why_released(obj))
                continue
            try:
                spec = QuotaRequestSpec.parse(obj)
            except ValueError as e:
                self._set(obj, None, "Rejected", f"the request is malformed: {e}")
                continue
            if _waiting(status, now):
                continue
            route = None
            with self._alone([(obj, spec)]):
                route = self._route(obj, spec, now)
            if route == "propose":
                groups.setdefault(spec.key, []).append((obj, spec))
            elif route == "withdraw":
                withdrawn.setdefault(spec.key, []).append((obj, spec))
        for key in [*groups, *(k for k in withdrawn if k not in groups)]:
            members, gone = groups.get(key, []), withdrawn.get(key, [])
            with self._alone(members + gone):
                self._propose(members, gone)

    def _route(
        self, obj: Obj, spec: QuotaRequestSpec, now: dt.datetime
    ) -> Literal["propose", "withdraw"] | None:
        """Hold or release the request's finalizer and move it on (`_settled`); where it
        goes next: its group's proposal, withdrawn from its group's pull request
        (deleted while in one), or nowhere this pass."""
        status = obj.get("status") or {}
        proposed = bool((status.get("pullRequest") or {}).get("number"))
        deleting = _deleting(obj)
        refused = self._hold(obj) if not deleting and _owed(obj, spec) else None
        settled = self._settled(obj, spec, now)
        if not _owed(obj, spec):
            self._release(obj, _why_released(obj))
        if refused and (settled or proposed):  # proposed before there was a finalizer
            log.warning("quota request %s/%s: %s", spec.namespace, spec.name, refused)
        if settled:
            return None
        if deleting:
            return "withdraw" if proposed else None
        if refused and not proposed:  # no pull request for a grant that could outlive it
            self._retry(obj, spec, refused)
            return None
        return "propose"

    def _settled(self, obj: Obj, spec: QuotaRequestSpec, now: dt.datetime) -> bool:
        """Move a request on as far as its pull request (or its revert) allows; False
        when it is open or new, and joins its group's proposal."""
        status = obj.get("status") or {}
        if status.get("state") == "Ready":
            self._expiry(obj, spec, now, deleted=_deleting(obj))
            return True
        pr = status.get("pullRequest") or {}
        if pr.get("merged"):
            self._applied(obj, spec)
            return True
        return bool(pr.get("number")) and not self._poll_settled(obj, spec, int(pr["number"]))

    @contextlib.contextmanager
    def _alone(self, members: list[tuple[Obj, QuotaRequestSpec]]) -> Iterator[None]:
        """An unforeseen error in one request (or group) puts it in Retry with the
        error as its reason, and the pass goes on to the others; the API server's
        and the leader's refusals end the pass, as they would for every request."""
        try:
            yield
        except (ApiError, NotLeaderError):
            raise
        except Exception as e:
            log.exception("quota request failed unexpectedly")
            for obj, spec in members:
                self._retry(obj, spec, f"unexpected error: {e!r}")

    def _propose_for_blocked_jobs(self, requests: list[Obj]) -> list[Obj]:
        """Create a QuotaRequest for each job blocked only by a max, in projects that
        opted in; returns those created. Nothing until the job cache has listed the
        jobs."""
        if not self.jobs.synced:
            return []
        jobs = self.jobs.items()
        have = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in requests}
        created = []
        t = self.clock.monotonic()
        # per project (or namespace): (project, opted in, its namespaces), so a pass
        # reads Git once per project however many of its jobs wait
        opted: dict[str, tuple[str, bool, int]] = {}
        for job in jobs:
            status = job.get("status") or {}
            short = shortfall(status)
            if short is None or status.get("quotaRequest"):
                continue
            meta = job["metadata"]
            key = f"{meta['namespace']}/{meta['name']}-quota"
            if (meta["namespace"], f"{meta['name']}-quota") in have:
                continue
            if t - self._declined.get(key, -1e18) < self.settings.recheck_s:
                continue
            where = short.project or f"namespace/{short.namespace}"
            try:
                if where not in opted:
                    project = short.project or self._project_of_namespace(short.namespace)
                    _, _, text = self._source_for(project)
                    namespaces = len(project_namespaces(text, project)) or 1
                    opted[where] = (project, auto_propose(text, project), namespaces)
                project, wanted, namespaces = opted[where]
                if not short.project:  # the namespace's ResourceQuota: its project's max
                    short = replace(short, project=project, gpus=short.gpus * namespaces)
            except (LookupError, EditError, _Retry) as e:
                log.debug("no proposal for job=%s: %s", key, e)
                opted[where] = ("", False, 1)
                wanted = False
            if not wanted:
                self._declined[key] = t
                continue
            obj = proposal(job, short)
            try:
                created.append(self.kube.create(obj, field_manager=FIELD_MANAGER))
            except ApiError as e:
                if e.status != 409:
                    log.warning("proposal for job=%s not created: %s", key, e)
                continue
            log.info("proposed quota request=%s gpus=%d project=%s", key, short.gpus, short.project)
        return created

    # --- sources ----------------------------------------------------------------

    def _source_for(self, project: str) -> tuple[SourceInfo, str, str]:
        """The PolicySource defining `project`, the file and its text; raises
        LookupError when none does, `_Retry` when Git cannot be read."""
        sources, _ = self.kube.list(_SOURCE)
        reasons = []
        for src in sources:
            forge_spec = (src.get("spec") or {}).get("forge")
            if not forge_spec:
                continue
            try:
                info = self._source(src)
                path, text = info.repo.project_file(project)
            except LookupError as e:
                reasons.append(str(e))
                continue
            except GitUnavailable as e:
                raise _Retry(str(e)) from None
            return info, path, text
        if not reasons:
            raise LookupError("no PolicySource has spec.forge: quota requests cannot be proposed")
        raise LookupError("; ".join(reasons))

    def _project_of_namespace(self, namespace: str) -> str:
        sources, _ = self.kube.list(_SOURCE)
        for src in sources:
            if not (src.get("spec") or {}).get("forge"):
                continue
            try:
                return self._source(src).repo.project_of_namespace(namespace)
            except LookupError:
                continue
            except GitUnavailable as e:
                raise _Retry(str(e)) from None
        raise LookupError(f"no PolicySource with spec.forge defines a project owning {namespace}")

    def _source(self, src: Obj) -> SourceInfo:
        name = src["metadata"]["name"]
        spec = src["spec"]
        if (why := outside_repository(str(spec.get("path") or "."))) is not None:
            raise LookupError(f"PolicySource {name}: {why}")
        token = self._token(spec["forge"]["secretRef"]["name"])
        env = self._git_env((spec.get("secretRef") or {}).get("name"))
        fingerprint = hashlib.sha256(repr((spec, token, sorted(env.items()))).encode()).hexdigest()
        cached = self._sources.get(name)
        if cached and cached[0] == fingerprint:
            return cached[1]
        repo = PolicyRepo(
            url=str(spec["url"]),
            base=str((spec.get("ref") or {}).get("branch") or "main"),
            path=str(spec.get("path") or "."),
            cache_dir=self.settings.cache_dir / "quota",
            env=env,
        )
        info = SourceInfo(
            name=name,
            repo=repo,
            forge=self.forge_factory(spec["forge"], token),
        )
        self._sources[name] = (fingerprint, info)
        return info

    def _git_env(self, secret: str | None) -> dict[str, str]:
        """The PolicySource's Git credentials as environment for `git`."""
        if not secret:
            return {}
        obj = self.kube.get(RESOURCES["Secret"], secret, self.settings.system_namespace)
        if obj is None:
            raise LookupError(f"Secret {self.settings.system_namespace}/{secret} not found")
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        try:
            auth = auth_from_secret(data, key_dir=self.settings.cache_dir / "quota-keys")
        except GitError as e:
            raise LookupError(f"Secret {secret}: {e.message}") from None
        return dict(auth.env)

    def _token(self, secret: str) -> str:
        obj = self.kube.get(RESOURCES["Secret"], secret, self.settings.system_namespace)
        data = (obj or {}).get("data") or {}
        if "token" not in data:
            raise LookupError(
                f"Secret {self.settings.system_namespace}/{secret} has no key 'token' "
                "(the forge's API token)"
            )
        return base64.b64decode(data["token"]).decode().strip()

    def _info_of(self, obj: Obj) -> SourceInfo | None:
        name = ((obj.get("status") or {}).get("pullRequest") or {}).get("source")
        cached = self._sources.get(str(name))
        if cached:
            return cached[1]
        src = self.kube.get(_SOURCE, str(name)) if name else None
        return self._source(src) if src else None

    # --- phases -----------------------------------------------------------------

    def _poll(self, info: SourceInfo, number: int, *, fresh: bool = False) -> PullRequest:
        key = (info.name, number)
        seen = self._polled.get(key)
        t = self.clock.monotonic()
        if seen and not fresh and t - seen[0] < self.settings.forge_poll_s:
            return seen[1]
        pr = info.forge.get(number)
        self._polled[key] = (t, pr)
        return pr

    def _poll_settled(
        self, obj: Obj, spec: QuotaRequestSpec, number: int, *, fresh: bool = False
    ) -> bool:
        """Read the request's pull request; False when that settled the request
        (merged or closed) or the forge could not say, True when it is still open
        (and joins its group)."""
        status = obj.get("status") or {}
        prs = dict(status.get("pullRequest") or {})
        try:
            info = self._info_of(obj)
            if info is None:
                return True
            pr = self._poll(info, number, fresh=fresh)
        except (ForgeError, LookupError) as e:  # a refusal too: an expired token, a 404
            self._retry(obj, spec, f"reading pull request {prs.get('url')}: {e}")
            return False
        if pr.state == "open":
            return True
        if pr.state == "closed":
            self._set(obj, spec, "Rejected", f"pull request {pr.url} was closed unmerged")
            return False
        prs.update({"merged": True, "mergeCommit": pr.merge_sha or pr.head_sha})
        self._set(
            obj,
            spec,
            "Pending",
            f"pull request {pr.url} merged; waiting for the reconciler to apply it",
            pullRequest=prs,
        )
        obj.setdefault("status", {})["pullRequest"] = prs
        self._applied(obj, spec)
        return False

    def _applied(self, obj: Obj, spec: QuotaRequestSpec) -> None:
        prs = (obj.get("status") or {}).get("pullRequest") or {}
        if self._is_applied(str(prs.get("source")), str(prs.get("mergeCommit"))):
            self._set(
                obj,
                spec,
                "Ready",
                f"pull request {prs.get('url')} merged and applied: the quota is raised",
                pullRequest=prs,
            )

    def _is_applied(self, source: str, commit: str) -> bool:
        src = self.kube.get(_SOURCE, source)
        revision = str(((src or {}).get("status") or {}).get("lastAppliedRevision") or "")
        applied = revision.rsplit("sha1:", 1)[-1] if "sha1:" in revision else ""
        if not applied or not commit:
            return False
        if applied == commit:
            return True
        if self._not_applied.get((source, commit)) == applied:
            return False  # asked Git about this applied revision already
        info = self._source(src) if src else None
        if info is None:
            return False
        try:
            done = info.repo.contains(descendant=applied, ancestor=commit)
        except GitUnavailable:
            return False
        if not done:
            self._not_applied[(source, commit)] = applied
        return done

    def _propose(
        self,
        members: list[tuple[Obj, QuotaRequestSpec]],
        withdrawn: Sequence[tuple[Obj, QuotaRequestSpec]] = (),
    ) -> None:
        """Push the group's branch and open or update its pull request; `withdrawn` are
        deleted requests still in it: pushed out, then let go (`_let_go`)."""
        first = (members or withdrawn)[0][1]
        specs = sorted((s for _, s in members), key=lambda s: (s.namespace, s.name))
        fingerprint = hashlib.sha256(
            repr([(s.namespace, s.name, s.amount) for s in specs]).encode()
        ).hexdigest()[:16]
        if (
            not withdrawn
            and all(
                ((o.get("status") or {}).get("pullRequest") or {}).get("fingerprint") == fingerprint
                and (o.get("status") or {}).get("state") == "Pending"
                for o, _ in members
            )
            and not self._behind(members[0][0])
        ):
            prs = (members[0][0].get("status") or {}).get("pullRequest") or {}
            if prs.get("valid"):
                total = sum((s.amount for _, s in members), Fraction(0))
                self._auto_approve(members[0][0], int(prs["number"]), first, total)
            return
        # The group changed. A member's pull request may have been merged or closed
        # since it was last read (a read is kept forge_poll_s): rebuilt over a base
        # that holds it already, its amount would be counted twice. Those settle
        # now, and the group is proposed again next pass without them.
        if not all(
            self._poll_settled(o, s, int(n), fresh=True)
            for o, s in [*members, *withdrawn]
            if (n := ((o.get("status") or {}).get("pullRequest") or {}).get("number"))
        ):
            return
        try:
            info, path, text = self._source_for(first.project)
            for obj, spec in members:
                if not _owns(text, spec):
                    self._set(
                        obj,
                        spec,
                        "Rejected",
                        f"namespace {spec.namespace} is not one of project {spec.project}'s",
                    )
            members = [(o, s) for o, s in members if _owns(text, s)]
            branch = branch_name(first.project, first.user, first.resource)
            if not members:
                if withdrawn and (commit := self._withdraw(info, path, text, branch, withdrawn)):
                    self._let_go(info, commit, withdrawn)
                return
            total = sum((s.amount for _, s in members), Fraction(0))
            edit = edit_max(
                text, project=first.project, user=first.user, resource=first.resource, delta=total
            )
            message = (
                pr_title(first, edit)
                + "\n\nRequested by "
                + ", ".join(f"{s.namespace}/{s.name} ({s.requester})" for s in specs)
            )
            self._leading(f"push {branch}")
            proposed = info.repo.propose(branch=branch, file=path, text=edit.text, message=message)
            workdir = info.repo.checkout(proposed.commit)
            checked = check_tree(
                workdir, info.repo.path, base_commit=proposed.base_commit, head_name=branch
            )
            body = pr_body(
                specs,
                edit=edit,
                file=path,
                checked=checked,
                usage=self.usage(first.project, _gpus(edit.old) if not first.user else None),
                what_if=self.what_if(first.project, first.resource, total),
            )
            title = pr_title(first, edit)
            pr = info.forge.find_open(head=branch)
            self._leading(f"open or update the pull request of {branch}")
            if pr is None:
                pr = info.forge.open(head=branch, base=info.repo.base, title=title, body=body)
                log.info("opened pull request url=%s branch=%s", pr.url, branch)
            else:
                pr = info.forge.update(pr.number, title=title, body=body)
                log.info("updated pull request url=%s branch=%s", pr.url, branch)
        except (EditError, LookupError) as e:
            for obj, spec in members:
                self._set(obj, spec, "Rejected", str(e))
            for obj, spec in withdrawn:  # still in a pull request: kept until out of it
                self._retry(obj, spec, f"withdrawing from pull request: {e}")
            return
        except (_Retry, GitUnavailable, ForgeUnavailable, ForgeError) as e:
            for obj, spec in [*members, *withdrawn]:
                self._retry(obj, spec, str(e))
            return
        prs = {
            "url": pr.url,
            "number": pr.number,
            "branch": branch,
            "source": info.name,
            "fingerprint": fingerprint,
            "valid": checked.valid,
        }
        self._polled.pop((info.name, pr.number), None)  # read before this push
        for obj, spec in members:
            self._set(
                obj,
                spec,
                "Pending",
                f"waiting for review of pull request {pr.url}",
                pullRequest=prs,
            )
        if withdrawn:
            self._let_go(info, proposed.commit, withdrawn)

    def _withdraw(
        self,
        info: SourceInfo,
        path: str,
        text: str,
        branch: str,
        withdrawn: Sequence[tuple[Obj, QuotaRequestSpec]],
    ) -> str | None:
        """Push `branch` back to the base (`text` unchanged) and say so in its pull
        request, whose every request was deleted; the commit pushed, or None when no
        pull request is open there (the next pass reads how it ended)."""
        pr = info.forge.find_open(head=branch)
        if pr is None:
            return None
        title, body = withdrawn_pr(sorted((s for _, s in withdrawn), key=lambda s: s.name))
        self._leading(f"push {branch}")
        proposed = info.repo.propose(branch=branch, file=path, text=text, message=title)
        self._leading(f"update the pull request of {branch}")
        info.forge.update(pr.number, title=title, body=body)
        log.info(
            "withdrew pull request url=%s branch=%s: its requests were deleted", pr.url, branch
        )
        return proposed.commit

    def _let_go(
        self, info: SourceInfo, commit: str, withdrawn: Sequence[tuple[Obj, QuotaRequestSpec]]
    ) -> None:
        """Release the deleted requests pushed out of their pull request by `commit`
        once it is read still open, or merged with `commit` in it: merged before
        `commit` was pushed, it granted their amount, and the next pass reverts it."""
        for obj, spec in withdrawn:
            number = int(obj["status"]["pullRequest"]["number"])
            try:
                pr = self._poll(info, number, fresh=True)
                out = pr.state == "open" or (
                    pr.state == "merged"
                    and info.repo.contains(descendant=pr.merge_sha or pr.head_sha, ancestor=commit)
                )
            except (ForgeError, GitUnavailable) as e:
                self._retry(obj, spec, f"reading pull request {number}: {e}")
                continue
            if out:
                self._release(obj, f"withdrawn from pull request {pr.url}")

    def _behind(self, obj: Obj) -> bool:
        """Whether the request's pull request conflicts with its base, which moved since
        its branch was built (another edit of the same line merged first: the gpu and
        cpu requests of one project share `max: {...}`): then the branch is built again
        over the new base, where the one-line edit is made anew. Asked when the forge
        says it conflicts, once per read of it (`_poll`), and checked here (`git
        merge-tree`): Gitea also says so while it is still working it out, and a
        rebuild that is not needed would run the repository's checks again."""
        prs = (obj.get("status") or {}).get("pullRequest") or {}
        info = self._info_of(obj)
        if info is None or not prs:
            return False
        key = (info.name, int(prs["number"]))
        seen = self._polled.get(key)
        if seen is None or not seen[1].conflicted or self._conflict_read.get(key) == seen[0]:
            return False
        self._conflict_read[key] = seen[0]
        try:
            return info.repo.conflicts(str(prs["branch"]))
        except GitUnavailable as e:
            log.warning("pull request url=%s: conflict not checked: %s", prs.get("url"), e)
            return False

    def _auto_approve(self, obj: Obj, number: int, spec: QuotaRequestSpec, delta: Fraction) -> None:
        """Merge pull request `number` when the repository's autoApprove rules allow the
        change and its checks are green (looked at once per forge_poll_s)."""
        info = self._info_of(obj)
        if info is None:
            return
        key, t = (info.name, number), self.clock.monotonic()
        if t - self._approval_checked.get(key, -1e18) < self.settings.forge_poll_s:
            return
        self._approval_checked[key] = t
        try:
            usage = None
            if delta > 0 and spec.resource == "gpu" and not spec.user:
                _, _, text = self._source_for(spec.project)
                have = read_max(text, project=spec.project, user=None, resource="gpu")
                usage = self.usage_fraction(spec.project, float(have) if have else None)
            why = approval(
                info.repo.approval_rules(), resource=spec.resource, delta=delta, usage=usage
            )
            if why is None:
                return
            pr = info.forge.get(number)
            if pr.state != "open" or not info.forge.checks_green(pr):
                log.info("auto-approval waits for green checks url=%s rule=%r", pr.url, why)
                return
            self._leading(f"merge pull request {number}")
            info.forge.merge(number)
            self._polled.pop(key, None)
            log.info("auto-approved pull request url=%s rule=%r", pr.url, why)
        except (GitUnavailable, ForgeError, LookupError, _Retry) as e:
            log.warning("auto-approval of pull request %d not done: %s", number, e)

    def _expiry(
        self, obj: Obj, spec: QuotaRequestSpec, now: dt.datetime, *, deleted: bool = False
    ) -> None:
        """Take a Ready temporary grant back once past its expiresAt or, `deleted`, at
        once: open its revert, follow it, and end the request Expired when the revert
        is applied (a revert closed unmerged leaves the grant)."""
        if spec.expires_at is None or (now < spec.expires_at and not deleted):
            return
        status = obj.get("status") or {}
        revert = dict(status.get("revert") or {})
        try:
            src_name = str((status.get("pullRequest") or {}).get("source"))
            src = self.kube.get(_SOURCE, src_name)
            if src is None:
                raise LookupError(f"PolicySource {src_name} is gone")
            info = self._source(src)
            if revert.get("merged"):
                if self._is_applied(info.name, str(revert.get("mergeCommit"))):
                    self._set(
                        obj,
                        spec,
                        "Expired",
                        f"the temporary grant ended ({revert['url']})",
                        revert=revert,
                    )
                return
            if revert.get("number"):
                if revert.get("valid"):  # as a raise: only a change that validates
                    self._auto_approve(obj, int(revert["number"]), spec, -spec.amount)
                pr = self._poll(info, int(revert["number"]))
                if pr.state == "merged":
                    revert.update({"merged": True, "mergeCommit": pr.merge_sha or pr.head_sha})
                    self._set(
                        obj,
                        spec,
                        "Ready",
                        f"revert {pr.url} merged; waiting to be applied",
                        revert=revert,
                    )
                elif pr.state == "closed":
                    self._set(
                        obj,
                        spec,
                        "Ready",
                        f"revert {pr.url} was closed: the grant stays",
                        revert={**revert, "closed": True},
                    )
                return
            if revert.get("closed"):
                return
            try:
                path, text = info.repo.project_file(spec.project)
            except LookupError as e:  # the Project is gone from the repository
                raise Superseded(str(e)) from None
            edit = edit_max(
                text,
                project=spec.project,
                user=spec.user,
                resource=spec.resource,
                delta=-spec.amount,
            )
            branch = revert_branch(spec.namespace, spec.name)
            title = pr_title(spec, edit, revert=True)
            self._leading(f"push {branch}")
            proposed = info.repo.propose(branch=branch, file=path, text=edit.text, message=title)
            workdir = info.repo.checkout(proposed.commit)
            checked = check_tree(
                workdir, info.repo.path, base_commit=proposed.base_commit, head_name=branch
            )
            body = pr_body(
                [spec],
                edit=edit,
                file=path,
                checked=checked,
                usage=None,
                what_if=None,
                revert_of=spec,
                deleted=deleted,
            )
            self._leading(f"open the pull request of {branch}")
            pr = info.forge.find_open(head=branch) or info.forge.open(
                head=branch, base=info.repo.base, title=title, body=body
            )
        except Superseded as e:
            # Changed by hand since the grant (the Project gone, its max removed or
            # lowered past it): nothing is left to take back as granted. Ended as a
            # revert closed by a reviewer is: the repository's word stands.
            self._set(
                obj,
                spec,
                "Ready",
                f"no revert: {e}; the grant is as the repository has it now",
                revert={"closed": True, "reason": str(e)},
            )
            return
        except (EditError, LookupError, GitUnavailable, ForgeUnavailable, ForgeError) as e:
            # The PolicySource or its Secret gone, the file unreadable: tried again,
            # with the backoff, and said in the status (not a log line each pass).
            self._retry(obj, spec, f"opening the revert: {e}", keep="Ready")
            return
        revert = {"url": pr.url, "number": pr.number, "branch": branch, "valid": checked.valid}
        why = "the request was deleted" if deleted else "the grant expired"
        self._set(obj, spec, "Ready", f"{why}; revert pull request {pr.url} opened", revert=revert)

    # --- the finalizer ----------------------------------------------------------

    def _hold(self, obj: Obj) -> str | None:
        """Add FINALIZER, beside any others; None once it is there, else why not."""
        have = list(obj["metadata"].get("finalizers") or [])
        if FINALIZER in have:
            return None
        try:
            self._finalizers(obj, [*have, FINALIZER])
        except ApiError as e:
            return f"finalizer {FINALIZER} not added: {e}"
        return None

    def _release(self, obj: Obj, why: str) -> None:
        """Remove FINALIZER, if the request holds it (deleted, it then goes)."""
        meta = obj["metadata"]
        have = list(meta.get("finalizers") or [])
        if FINALIZER not in have:
            return
        try:
            self._finalizers(obj, [f for f in have if f != FINALIZER])
        except ApiError as e:  # a conflict: the next pass, on a fresh read
            if e.status != 404:
                log.warning(
                    "quota request %s/%s keeps finalizer=%s: %s",
                    meta["namespace"], meta["name"], FINALIZER, e,
                )  # fmt: skip
            return
        log.info(
            "quota request %s/%s released finalizer=%s: %s",
            meta["namespace"], meta["name"], FINALIZER, why,
        )  # fmt: skip

    def _finalizers(self, obj: Obj, finalizers: list[str]) -> None:
        """Set the request's finalizers by a merge patch, which replaces the whole list:
        on the resourceVersion read, so another controller's finalizer added since
        cannot be dropped (409 Conflict instead)."""
        meta = obj["metadata"]
        out = self.kube.merge_patch(
            _QR,
            meta["name"],
            {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
            field_manager=FIELD_MANAGER,
            namespace=meta["namespace"],
        )
        obj["metadata"] = out.get("metadata") or {**meta, "finalizers": finalizers}

    # --- status -----------------------------------------------------------------

    def _retry(
        self, obj: Obj, spec: QuotaRequestSpec, why: str, *, keep: State | None = None
    ) -> None:
        status = obj.get("status") or {}
        attempts = int((status.get("retry") or {}).get("attempts", 0)) + 1
        wait = backoff_s(attempts)
        at = self.clock.now() + dt.timedelta(seconds=wait)
        retry = {"attempts": attempts, "nextAttemptAt": _format(at), "reason": why}
        state: State = keep or "Retry"
        self._set(obj, spec, state, f"{why} (attempt {attempts}; again in {wait:g}s)", retry=retry)

    def _set(
        self, obj: Obj, spec: QuotaRequestSpec | None, state: State, message: str, **fields: Any
    ) -> None:
        meta = obj["metadata"]
        previous = obj.get("status") or {}
        if state != "Retry" and "retry" not in fields and previous.get("retry"):
            fields["retry"] = None
        body = status_body(
            state=state,
            message=message,
            now=_format(self.clock.now()),
            generation=int(meta.get("generation", 0)),
            previous=previous,
            **fields,
        )
        if _same(previous, body):
            return
        try:
            out = self.kube.merge_patch(
                _QR,
                meta["name"],
                {"status": body},
                field_manager=FIELD_MANAGER,
                namespace=meta["namespace"],
                subresource="status",
            )
        except ApiError as e:
            log.warning("status of %s/%s not written: %s", meta["namespace"], meta["name"], e)
            return
        obj["status"] = out.get("status", body)
        obj["metadata"] = out.get("metadata") or meta  # its resourceVersion, for `_finalizers`
        log.info("quota request %s/%s state=%s %s", meta["namespace"], meta["name"], state, message)
        if spec is not None and spec.training_job:
            self._mirror(spec, state, message, body)

    def _mirror(self, spec: QuotaRequestSpec, state: State, message: str, body: Obj) -> None:
        """The request's state on the TrainingJob waiting for it, if that job is the
        requester's: a request naming someone else's job would otherwise put its
        state there, and stop the job's own proposal (it skips a job that has one)."""
        job = self.jobs.get(spec.training_job or "", spec.namespace)
        owner = ((job or {}).get("metadata", {}).get("labels") or {}).get(LABEL_USER)
        if job is None or owner != spec.requester:
            log.warning(
                "quota request %s/%s names TrainingJob %s, which is not its requester's; "
                "its state is not written there", spec.namespace, spec.name, spec.training_job,
            )  # fmt: skip
            return
        mirror = {
            "name": spec.name,
            "state": state,
            "message": message,
            "url": (body.get("pullRequest") or {}).get("url"),
        }
        try:
            self.kube.merge_patch(
                _JOB,
                spec.training_job or "",
                {"status": {"quotaRequest": mirror}},
                field_manager=FIELD_MANAGER,
                namespace=spec.namespace,
                subresource="status",
            )
        except ApiError as e:
            if e.status != 404:
                log.warning("TrainingJob %s/%s not told: %s", spec.namespace, spec.training_job, e)


def _owns(text: str, spec: QuotaRequestSpec) -> bool:
    """Whether the request's namespace is one of its project's (asked from elsewhere,
    anyone could spend another team's review time)."""
    return spec.namespace in project_namespaces(text, spec.project)


def _gpus(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _owed(obj: Obj, spec: QuotaRequestSpec) -> bool:
    """Whether a revert may still be owed for the request, so it holds FINALIZER: a
    temporary grant neither Rejected nor Expired, whose revert no reviewer closed,
    and, once deleted, whose pull request was opened (else nothing was granted)."""
    status = obj.get("status") or {}
    if spec.expires_at is None or status.get("state") in ("Rejected", "Expired"):
        return False
    if (status.get("revert") or {}).get("closed"):
        return False
    return not _deleting(obj) or bool((status.get("pullRequest") or {}).get("number"))


def _why_released(obj: Obj) -> str:
    status = obj.get("status") or {}
    revert = status.get("revert") or {}
    if revert.get("reason"):
        return f"no revert: {revert['reason']}"
    if revert.get("closed"):
        return f"its revert {revert.get('url')} was closed unmerged: the grant stays"
    if status.get("state") in ("Rejected", "Expired"):
        return f"it is {status['state']}: nothing is owed back"
    if _deleting(obj):
        return "deleted before its pull request was opened: nothing was granted"
    return "not a temporary grant"


def _waiting(status: Obj, now: dt.datetime) -> bool:
    at = (status.get("retry") or {}).get("nextAttemptAt")
    return bool(at) and now < parse_time(str(at))


def _same(previous: Obj, body: Obj) -> bool:
    keys = set(body) - {"conditions"}
    return all(previous.get(k) == body[k] for k in keys) and [
        (c["type"], c["status"]) for c in previous.get("conditions") or []
    ] == [(c["type"], c["status"]) for c in body["conditions"]]


def _format(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
