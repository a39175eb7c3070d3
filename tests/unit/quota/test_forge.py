"""The forge clients at their HTTP seam: the exact requests each sends, and the
documented response shapes (trimmed to the fields read) each understands."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.quota.forge import (
    ForgeError,
    ForgeUnavailable,
    Gitea,
    GitHub,
    GitLab,
    HttpRequest,
    HttpResponse,
    PullRequest,
)


@dataclass
class Recorded:
    """A transport that answers from a script and keeps what was sent."""

    answers: list[tuple[int, Any]]
    sent: list[HttpRequest] = field(default_factory=list)

    def __call__(self, req: HttpRequest) -> HttpResponse:
        self.sent.append(req)
        status, body = self.answers.pop(0)
        return HttpResponse(status, body, "" if body is None else str(body))

    def wire(self) -> list[tuple[str, str, Any]]:
        return [(r.method, r.url, r.body) for r in self.sent]


# GitHub: "Create a pull request" answers 201 with the pull request; merged PRs have
# "state": "closed", "merged": true and the merge commit's sha.
GH_PR = {
    "number": 7,
    "html_url": "https://github.com/acme/policies/pull/7",
    "state": "open",
    "merged": False,
    "merge_commit_sha": "e5bd3914e2e596debea16f433f57875b5b90bcd6",  # the test merge
    "head": {"ref": "gangops/quota/nlp/gpu", "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e"},
    "base": {"ref": "main"},
}
GH_MERGED = {**GH_PR, "state": "closed", "merged": True, "merged_at": "2026-12-03T10:00:00Z"}


def test_github_opens_finds_updates_and_reads_a_pull_request() -> None:
    t = Recorded([(201, GH_PR), (200, [GH_PR]), (200, GH_PR), (200, GH_MERGED)])
    gh = GitHub(api="https://api.github.com", repo="acme/policies", token="s3cret", transport=t)
    pr = gh.open(head="gangops/quota/nlp/gpu", base="main", title="T", body="B")
    assert pr == PullRequest(7, GH_PR["html_url"], "open", GH_PR["head"]["sha"], "")  # type: ignore[index]
    assert gh.find_open(head="gangops/quota/nlp/gpu") == pr
    gh.update(7, title="T2", body="B2")
    merged = gh.get(7)
    assert merged.state == "merged" and merged.merge_sha == GH_MERGED["merge_commit_sha"]
    assert t.wire() == [
        (
            "POST",
            "https://api.github.com/repos/acme/policies/pulls",
            {"title": "T", "head": "gangops/quota/nlp/gpu", "base": "main", "body": "B"},
        ),
        (
            "GET",
            "https://api.github.com/repos/acme/policies/pulls?state=open&head=acme%3Agangops%2Fquota%2Fnlp%2Fgpu",
            None,
        ),
        (
            "PATCH",
            "https://api.github.com/repos/acme/policies/pulls/7",
            {"title": "T2", "body": "B2"},
        ),
        ("GET", "https://api.github.com/repos/acme/policies/pulls/7", None),
    ]
    assert t.sent[0].headers == {
        "Accept": "application/vnd.github+json",
        "Authorization": "Bearer s3cret",
        "X-GitHub-Api-Version": "2022-11-28",
    }


def test_github_closed_unmerged_is_closed_and_checks_need_every_run_green() -> None:
    closed = {**GH_PR, "state": "closed", "merged": False, "merged_at": None}
    runs_ok = {"total_count": 1, "check_runs": [{"status": "completed", "conclusion": "success"}]}
    runs_bad = {"total_count": 1, "check_runs": [{"status": "completed", "conclusion": "failure"}]}
    no_status = {"state": "pending", "statuses": []}  # GitHub's combined status with none set
    t = Recorded(
        [(200, closed), (200, runs_ok), (200, no_status), (200, runs_bad), (200, no_status)]
    )
    gh = GitHub(api="https://api.github.com", repo="acme/policies", token="x", transport=t)
    pr = gh.get(7)
    assert pr.state == "closed"
    assert gh.checks_green(pr) is True
    assert gh.checks_green(pr) is False
    sha = GH_PR["head"]["sha"]  # type: ignore[index]
    assert t.wire()[1][1] == f"https://api.github.com/repos/acme/policies/commits/{sha}/check-runs"
    assert t.wire()[2][1] == f"https://api.github.com/repos/acme/policies/commits/{sha}/status"


def test_github_merge_puts_the_merge_then_reads_the_merged_state() -> None:
    merged = {
        "sha": GH_MERGED["merge_commit_sha"],
        "merged": True,
        "message": "Pull Request successfully merged",
    }
    t = Recorded([(200, merged), (200, GH_MERGED)])
    gh = GitHub(api="https://api.github.com", repo="acme/policies", token="x", transport=t)
    assert gh.merge(7).state == "merged"
    assert t.wire()[0] == (
        "PUT",
        "https://api.github.com/repos/acme/policies/pulls/7/merge",
        {"merge_method": "merge"},
    )


# GitLab: merge requests carry iid (the number in the project), web_url, and
# state opened | closed | locked | merged.
GL_MR = {
    "id": 1001,
    "iid": 3,
    "web_url": "https://gitlab.example/platform/policies/-/merge_requests/3",
    "state": "opened",
    "sha": "8888888888888888888888888888888888888888",
    "merge_commit_sha": None,
    "source_branch": "gangops/quota/nlp/gpu",
    "target_branch": "main",
}


def test_gitlab_opens_finds_updates_merges_and_reads_pipelines() -> None:
    merged = {**GL_MR, "state": "merged", "merge_commit_sha": "9" * 40}
    with_pipeline = {**GL_MR, "head_pipeline": {"id": 5, "status": "success"}}
    t = Recorded([(201, GL_MR), (200, [GL_MR]), (200, GL_MR), (200, with_pipeline), (200, merged)])
    gl = GitLab(
        api="https://gitlab.example/api/v4", repo="platform/policies", token="glpat", transport=t
    )
    pr = gl.open(head="gangops/quota/nlp/gpu", base="main", title="T", body="B")
    assert (pr.number, pr.url, pr.state) == (3, GL_MR["web_url"], "open")
    assert gl.find_open(head="gangops/quota/nlp/gpu") == pr
    gl.update(3, title="T2", body="B2")
    assert gl.checks_green(pr) is True
    done = gl.merge(3)
    assert (done.state, done.merge_sha) == ("merged", "9" * 40)
    base = "https://gitlab.example/api/v4/projects/platform%2Fpolicies/merge_requests"
    assert t.wire() == [
        (
            "POST",
            base,
            {
                "source_branch": "gangops/quota/nlp/gpu",
                "target_branch": "main",
                "title": "T",
                "description": "B",
            },
        ),
        ("GET", f"{base}?state=opened&source_branch=gangops%2Fquota%2Fnlp%2Fgpu", None),
        ("PUT", f"{base}/3", {"title": "T2", "description": "B2"}),
        ("GET", f"{base}/3", None),
        ("PUT", f"{base}/3/merge", {}),
    ]
    assert t.sent[0].headers == {"PRIVATE-TOKEN": "glpat"}


def test_gitlab_reads_locked_as_still_open_and_an_unknown_state_as_an_error() -> None:
    # `locked`: the short-lived state while GitLab merges (gitlab-ce#43790); read as
    # closed, a request whose merge is landing was rejected for good.
    states = ["closed", "locked", "reopened", "archived"]
    t = Recorded([(200, {**GL_MR, "state": s}) for s in states])
    gl = GitLab(api="https://g/api/v4", repo="a/b", token="x", transport=t)
    assert [gl.get(3).state for _ in range(3)] == ["closed", "open", "open"]
    with pytest.raises(ForgeError, match="unknown state 'archived'"):
        gl.get(3)


def test_gitea_finds_the_open_pull_request_of_a_branch_across_pages() -> None:
    other = {"number": 1, "html_url": "u1", "state": "open", "head": {"ref": "x", "sha": "a"}}
    mine = {"number": 2, "html_url": "u2", "state": "open", "head": {"ref": "b", "sha": "c"}}
    t = Recorded([(200, [other] * 50), (200, [mine])])
    gt = Gitea(api="http://127.0.0.1:3000/api/v1", repo="o/r", token="tok", transport=t)
    assert gt.find_open(head="b") == PullRequest(2, "u2", "open", "c", "")
    assert [r.url for r in t.sent] == [
        "http://127.0.0.1:3000/api/v1/repos/o/r/pulls?state=open&page=1&limit=50",
        "http://127.0.0.1:3000/api/v1/repos/o/r/pulls?state=open&page=2&limit=50",
    ]
    assert t.sent[0].headers["Authorization"] == "token tok"


@pytest.mark.parametrize(("status", "error"), [(502, ForgeUnavailable), (429, ForgeUnavailable)])
def test_an_outage_is_told_apart_from_a_refusal(status: int, error: type[Exception]) -> None:
    t = Recorded([(status, {"message": "Bad gateway"})])
    gh = GitHub(api="https://api.github.com", repo="a/b", token="x", transport=t)
    with pytest.raises(error, match="Bad gateway"):
        gh.get(1)


def test_a_refusal_carries_the_forges_message() -> None:
    body = {
        "message": "Validation Failed",
        "errors": [{"message": "A pull request already exists"}],
    }
    t = Recorded([(422, body)])
    gh = GitHub(api="https://api.github.com", repo="a/b", token="x", transport=t)
    with pytest.raises(ForgeError, match="HTTP 422 Validation Failed") as e:
        gh.open(head="h", base="main", title="t", body="b")
    assert not isinstance(e.value, ForgeUnavailable)


def test_gitea_opens_merges_and_reads_the_combined_status() -> None:
    # Gitea: POST /repos/{owner}/{repo}/pulls answers 201 with the pull request;
    # POST .../pulls/{index}/merge with {"Do": "merge"} answers 200 with no body.
    pr = {
        "number": 4,
        "html_url": "http://127.0.0.1:3000/o/r/pulls/4",
        "state": "open",
        "merged": False,
        "merge_commit_sha": None,
        "head": {"ref": "gangops/quota/p/gpu", "sha": "abc"},
    }
    merged = {**pr, "state": "closed", "merged": True, "merge_commit_sha": "def"}
    status = {"state": "success", "statuses": [{"status": "success", "context": "ci"}]}
    t = Recorded([(201, pr), (200, status), (200, None), (200, merged)])
    gt = Gitea(api="http://127.0.0.1:3000/api/v1", repo="o/r", token="tok", transport=t)
    opened = gt.open(head="gangops/quota/p/gpu", base="main", title="T", body="B")
    assert gt.checks_green(opened) is True
    assert gt.merge(4) == PullRequest(4, str(pr["html_url"]), "merged", "abc", "def")
    base = "http://127.0.0.1:3000/api/v1/repos/o/r"
    assert t.wire() == [
        (
            "POST",
            f"{base}/pulls",
            {"title": "T", "head": "gangops/quota/p/gpu", "base": "main", "body": "B"},
        ),
        ("GET", f"{base}/commits/abc/status", None),
        ("POST", f"{base}/pulls/4/merge", {"Do": "merge"}),
        ("GET", f"{base}/pulls/4", None),
    ]


def test_no_checks_at_all_is_not_green() -> None:
    t = Recorded([(200, {"state": "", "statuses": []})])
    gt = Gitea(api="http://g/api/v1", repo="o/r", token="x", transport=t)
    assert gt.checks_green(PullRequest(1, "u", "open", "abc")) is False
    t = Recorded(
        [(200, {"total_count": 0, "check_runs": []}), (200, {"state": "pending", "statuses": []})]
    )
    gh = GitHub(api="https://api.github.com", repo="a/b", token="x", transport=t)
    assert gh.checks_green(PullRequest(1, "u", "open", "abc")) is False
    t = Recorded([(200, {"iid": 1, "web_url": "u", "state": "opened", "head_pipeline": None})])
    gl = GitLab(api="https://g/api/v4", repo="a/b", token="x", transport=t)
    assert gl.checks_green(PullRequest(1, "u", "open", "abc")) is False


def test_each_forge_says_when_a_pull_request_conflicts_with_its_base() -> None:
    # GitHub and Gitea: mergeable false (null while the forge works it out);
    # GitLab: has_conflicts. A merged one conflicts with nothing.
    answers = [{**GH_PR, "mergeable": m} for m in (False, None, True)]
    gh = GitHub(api="https://api.github.com", repo="acme/policies", token="t",
                transport=Recorded([(200, a) for a in answers]))  # fmt: skip
    assert [gh.get(7).conflicted for _ in answers] == [True, False, False]
    gt = Gitea(api="http://g/api/v1", repo="o/r", token="t",
               transport=Recorded([(200, {**GH_PR, "mergeable": False})]))  # fmt: skip
    assert gt.get(7).conflicted is True
    mrs = [{**GL_MR, "has_conflicts": True}, {**GL_MR, "has_conflicts": False},
           {**GL_MR, "state": "merged", "has_conflicts": True}]  # fmt: skip
    gl = GitLab(api="https://g/api/v4", repo="a/b", token="x",
                transport=Recorded([(200, m) for m in mrs]))  # fmt: skip
    assert [gl.get(3).conflicted for _ in mrs] == [True, False, False]
