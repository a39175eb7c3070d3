"""Forges: GitHub, GitLab and Gitea pull requests behind one small interface.

The quota controller needs five things of a forge: find the open pull
request of a branch, open one, update its title and body, read its state
(open, merged, closed unmerged; and whether it conflicts with its base) and,
for auto-approval, merge it when its checks are green. Each client speaks its
forge's REST API (JSON over HTTPS, the token from a file or a Secret) through
one `Transport`, the seam the unit tests replace with recorded request and
response shapes; the real transport is urllib's. A forge that cannot be reached, or answers 5xx or
429, raises `ForgeUnavailable` (the controller retries with backoff); any
other refusal raises `ForgeError` with the forge's own message.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from controller import httpread

__all__ = [
    "Forge",
    "ForgeError",
    "ForgeUnavailable",
    "GitHub",
    "GitLab",
    "Gitea",
    "HttpRequest",
    "HttpResponse",
    "PullRequest",
    "Transport",
    "make_forge",
    "urllib_transport",
]

PrState = Literal["open", "merged", "closed"]


@dataclass(frozen=True)
class PullRequest:
    """A pull request (GitLab: merge request) as the controller sees it."""

    number: int
    """GitHub's and Gitea's number, GitLab's iid."""
    url: str
    """Where a person reads it."""
    state: PrState
    head_sha: str = ""
    merge_sha: str = ""
    """The merge commit, once merged (empty for a fast-forward GitLab merge)."""
    conflicted: bool = False
    """The forge says it cannot be merged as it stands: its branch conflicts with the
    base (GitHub's and Gitea's `mergeable: false`, GitLab's `has_conflicts`; unknown,
    while the forge is still working it out, reads as False)."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: Any = None
    """JSON-serialisable, or None for no body."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: Any
    """The decoded JSON (None for an empty body)."""
    text: str = ""


Transport = Callable[[HttpRequest], HttpResponse]


class ForgeError(Exception):
    """The forge refused: the message is its own, with the request that failed."""


class ForgeUnavailable(ForgeError):
    """The forge could not be reached or answered 5xx/429: try again later."""


ANSWER_LIMIT = 16 * 1024 * 1024
"""The longest forge answer read: a page of pull requests or check runs is far
shorter; a longer one is refused (`ForgeError`) rather than held in memory."""


def urllib_transport(*, timeout_s: float = 30.0) -> Transport:
    """The real transport: one HTTPS request per call, JSON in and out."""

    def send(req: HttpRequest) -> HttpResponse:
        data = None if req.body is None else json.dumps(req.body).encode()
        headers = dict(req.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        r = urllib.request.Request(req.url, data=data, method=req.method, headers=headers)
        try:
            status, raw = httpread.get(r, timeout_s=timeout_s, limit_bytes=ANSWER_LIMIT)
        except httpread.BodyTooLarge as e:
            raise ForgeError(f"{req.method} {req.url}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            # HTTPException: not an HTTP answer (BadStatusLine), or one cut short
            raise ForgeUnavailable(f"{req.method} {req.url}: {e!r}") from None
        text = raw.decode("utf-8", "replace")
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = None
        return HttpResponse(status, body, text)

    return send


class Forge(Protocol):
    """What the quota controller asks of a forge."""

    def find_open(self, *, head: str) -> PullRequest | None:
        """The open pull request from branch `head`, if any."""
        ...

    def open(self, *, head: str, base: str, title: str, body: str) -> PullRequest: ...

    def update(self, number: int, *, title: str, body: str) -> PullRequest: ...

    def get(self, number: int) -> PullRequest: ...

    def checks_green(self, pr: PullRequest) -> bool:
        """Whether every check reported on the head commit passed (none is not green)."""
        ...

    def merge(self, number: int) -> PullRequest: ...


@dataclass
class _Client:
    api: str
    """The API root, e.g. https://api.github.com or https://gitlab.example/api/v4."""
    repo: str
    """owner/name (GitLab: the project's full path)."""
    token: str = field(repr=False)
    transport: Transport = field(default_factory=urllib_transport)

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _call(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = ()) -> Any:
        url = self.api.rstrip("/") + path
        resp = self.transport(HttpRequest(method, url, self._headers(), body))
        if resp.status >= 500 or resp.status == 429:
            raise ForgeUnavailable(f"{method} {url}: HTTP {resp.status} {_message(resp)}")
        if resp.status >= 400 and resp.status not in ok:
            raise ForgeError(f"{method} {url}: HTTP {resp.status} {_message(resp)}")
        return resp.body


def _message(resp: HttpResponse) -> str:
    if isinstance(resp.body, dict):
        for key in ("message", "error", "errors"):
            if key in resp.body:
                return str(resp.body[key])
    return resp.text[:200]


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class GitHub(_Client):
    """GitHub's REST API (api.github.com or GitHub Enterprise's /api/v3)."""

    def _headers(self) -> dict[str, str]:
        return {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def _pr(self, d: dict[str, Any]) -> PullRequest:
        state: PrState = "merged" if d.get("merged") or d.get("merged_at") else d["state"]
        return PullRequest(
            number=int(d["number"]),
            url=str(d["html_url"]),
            state=state,
            head_sha=str((d.get("head") or {}).get("sha") or ""),
            merge_sha=str(d.get("merge_commit_sha") or "") if state == "merged" else "",
            conflicted=state == "open" and d.get("mergeable") is False,
        )

    def find_open(self, *, head: str) -> PullRequest | None:
        owner = self.repo.split("/")[0]
        q = urllib.parse.urlencode({"state": "open", "head": f"{owner}:{head}"})
        found = self._call("GET", f"/repos/{self.repo}/pulls?{q}") or []
        return self._pr(found[0]) if found else None

    def open(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        payload = {"title": title, "head": head, "base": base, "body": body}
        return self._pr(self._call("POST", f"/repos/{self.repo}/pulls", payload))

    def update(self, number: int, *, title: str, body: str) -> PullRequest:
        payload = {"title": title, "body": body}
        return self._pr(self._call("PATCH", f"/repos/{self.repo}/pulls/{number}", payload))

    def get(self, number: int) -> PullRequest:
        return self._pr(self._call("GET", f"/repos/{self.repo}/pulls/{number}"))

    def checks_green(self, pr: PullRequest) -> bool:
        runs = self._call("GET", f"/repos/{self.repo}/commits/{pr.head_sha}/check-runs") or {}
        status = self._call("GET", f"/repos/{self.repo}/commits/{pr.head_sha}/status") or {}
        checks = runs.get("check_runs") or []
        statuses = status.get("statuses") or []
        if not checks and not statuses:
            return False
        runs_ok = all(
            c.get("status") == "completed"
            and c.get("conclusion") in ("success", "neutral", "skipped")
            for c in checks
        )
        return runs_ok and (not statuses or status.get("state") == "success")

    def merge(self, number: int) -> PullRequest:
        self._call("PUT", f"/repos/{self.repo}/pulls/{number}/merge", {"merge_method": "merge"})
        return self.get(number)


class GitLab(_Client):
    """GitLab's REST API v4 (merge requests of the project at `repo`, its full path)."""

    def _headers(self) -> dict[str, str]:
        return {"PRIVATE-TOKEN": self.token}

    @property
    def _project(self) -> str:
        return f"/projects/{_quote(self.repo)}"

    def _pr(self, d: dict[str, Any]) -> PullRequest:
        # `locked` is GitLab's state while a merge is under way: not yet merged, and
        # certainly not closed (read as closed, a poll at that moment would reject a
        # request whose merge is landing).
        states: dict[str, PrState] = {
            "opened": "open", "reopened": "open", "locked": "open",
            "merged": "merged", "closed": "closed",
        }  # fmt: skip
        state = states.get(str(d["state"]))
        if state is None:
            raise ForgeError(f"merge request {d.get('web_url')}: unknown state {d['state']!r}")
        return PullRequest(
            number=int(d["iid"]),
            url=str(d["web_url"]),
            state=state,
            head_sha=str(d.get("sha") or ""),
            merge_sha=str(d.get("merge_commit_sha") or d.get("squash_commit_sha") or ""),
            conflicted=state == "open" and d.get("has_conflicts") is True,
        )

    def find_open(self, *, head: str) -> PullRequest | None:
        q = urllib.parse.urlencode({"state": "opened", "source_branch": head})
        found = self._call("GET", f"{self._project}/merge_requests?{q}") or []
        return self._pr(found[0]) if found else None

    def open(self, *, head: str, base: str, title: str, body: str) -> PullRequest:
        payload = {
            "source_branch": head,
            "target_branch": base,
            "title": title,
            "description": body,
        }
        return self._pr(self._call("POST", f"{self._project}/merge_requests", payload))

    def update(self, number: int, *, title: str, body: str) -> PullRequest:
        payload = {"title": title, "description": body}
        return self._pr(self._call("PUT", f"{self._project}/merge_requests/{number}", payload))

    def get(self, number: int) -> PullRequest:
        return self._pr(self._call("GET", f"{self._project}/merge_requests/{number}"))

    def checks_green(self, pr: PullRequest) -> bool:
        d = self._call("GET", f"{self._project}/merge_requests/{pr.number}") or {}
        pipeline = d.get("head_pipeline") or {}
        return bool(pipeline) and pipeline.get("status") == "success"

    def merge(self, number: int) -> PullRequest:
        d = self._call("PUT", f"{self._project}/merge_requests/{number}/merge", {})
        return self._pr(d)


class Gitea(GitHub):
    """Gitea's REST API v1 (also Forgejo's): GitHub's pull-request shapes, its own
    authorisation, search for a branch's pull request, status checks and merge call."""

    def _headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "Authorization": f"token {self.token}"}

    def find_open(self, *, head: str) -> PullRequest | None:
        page = 1
        while True:
            q = urllib.parse.urlencode({"state": "open", "page": page, "limit": 50})
            found = self._call("GET", f"/repos/{self.repo}/pulls?{q}") or []
            for d in found:
                if (d.get("head") or {}).get("ref") == head:
                    return self._pr(d)
            if len(found) < 50:
                return None
            page += 1

    def checks_green(self, pr: PullRequest) -> bool:
        d = self._call("GET", f"/repos/{self.repo}/commits/{pr.head_sha}/status") or {}
        return bool(d.get("statuses")) and d.get("state") == "success"

    def merge(self, number: int) -> PullRequest:
        self._call("POST", f"/repos/{self.repo}/pulls/{number}/merge", {"Do": "merge"})
        return self.get(number)


_KINDS: dict[str, type[GitHub] | type[GitLab]] = {
    "github": GitHub,
    "gitlab": GitLab,
    "gitea": Gitea,
}


def make_forge(kind: str, *, api: str, repo: str, token: str, transport: Transport) -> Forge:
    """The client of forge `kind` (github, gitlab or gitea)."""
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown forge {kind!r}: one of {', '.join(_KINDS)}") from None
    client: Forge = cls(api=api, repo=repo, token=token, transport=transport)
    return client
