"""What reviewers read: the pull request's title and body.

The body says who asked for how much and why, the one-line change, whether
the policy set still validates (the same `policy.build` every source uses),
the object plan (`gangops plan`'s markdown) and, where they are available,
the project's recent usage and a simulator what-if (supplied by the caller as
text). Pure: the plan and validation are computed from the working tree the
caller checked out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.policy.build import build
from controller.policy.plan import make_plan
from controller.policy.report import format_plan, md_cell
from controller.policy.sources import git_tree, policy_root, working_tree
from controller.quota.edit import Edit, format_amount
from controller.quota.request import QuotaRequestSpec

__all__ = ["Checked", "check_tree", "pr_body", "pr_title", "withdrawn_pr"]


@dataclass(frozen=True)
class Checked:
    """The edited policy set, validated and planned against the base."""

    valid: bool
    diagnostics: list[str]
    plan_markdown: str


def check_tree(workdir: Path, path: str, *, base_commit: str, head_name: str) -> Checked:
    """Validate the policies under `path` of the working tree at `workdir` and plan
    them over the same root at `base_commit`; diagnostics name files by their path
    in the repository. `path` is a PolicySource's spec.path (`/policies` is the
    repository's `policies`, not the controller's own)."""
    root = workdir / policy_root(path)
    sources, resolve = working_tree(root)
    head = build(sources, root=str(root), resolve=resolve, revision=head_name)
    diagnostics = [
        f"{_relative(d.file, workdir)}:{d.line}:{d.column}: {d.level.value}: {d.message}"
        for d in head.validation.diagnostics
        if d.is_error or d.level.value == "warning"
    ]
    if head.objects is None:
        return Checked(False, diagnostics, "")
    base_sources, base_resolve, base_sha = git_tree(root, base_commit)
    base = build(base_sources, root=str(root), resolve=base_resolve, revision=base_sha)
    plan = make_plan(
        base.objects or [],
        head.objects,
        base_set=base.validation.policy_set,
        head_set=head.validation.policy_set,
    )
    return Checked(
        True, diagnostics, format_plan(plan, fmt="markdown", base="base", head=head_name)
    )


def _relative(file: str, workdir: Path) -> str:
    prefix = workdir.as_posix().rstrip("/") + "/"
    return file.removeprefix(prefix)


def pr_title(spec: QuotaRequestSpec, edit: Edit, *, revert: bool = False) -> str:
    who = f"user {spec.user} in project {spec.project}" if spec.user else f"project {spec.project}"
    verb = "Revert temporary" if revert else "Raise"
    return f"{verb} max {spec.resource} of {who}: {edit.old or '(default)'} -> {edit.new}"


def _cell(text: str) -> str:
    """A requester's words as one table cell: no line ending of any kind CommonMark
    knows (\\n, \\r), no raw HTML (an unclosed comment would hide the rest of the
    body, the validation result with it), and '|' and '\\' as character references, so
    no escape (a '\\' before an escaped '|') can end the cell."""
    return (
        " ".join(text.splitlines())
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\\", "&#92;")
        .replace("|", "&#124;")
    )


def pr_body(
    requests: Sequence[QuotaRequestSpec],
    *,
    edit: Edit,
    file: str,
    checked: Checked,
    usage: str | None,
    what_if: str | None,
    revert_of: QuotaRequestSpec | None = None,
    deleted: bool = False,
) -> str:
    """The markdown body (of the revert of `revert_of`, expired or, `deleted`, ended
    early by the request's deletion)."""
    out = []
    if revert_of is not None:
        name = f"QuotaRequest `{revert_of.namespace}/{revert_of.name}`"
        until = f"{revert_of.expires_at:%Y-%m-%d %H:%M UTC}"
        out.append(
            (
                f"{name}, a temporary grant until {until}, was deleted"
                if deleted
                else f"The temporary grant of {name} expired at {until}"
            )
            + f": this takes {format_amount(revert_of.resource, revert_of.amount)} "
            f"{revert_of.resource} back."
        )
    else:
        out.append("Opened by gangops for these QuotaRequests (the merge is the approval):")
        out.append("")
        out.append("| request | requester | amount | expires | reason |")
        out.append("|---|---|---|---|---|")
        for r in requests:
            expires = f"{r.expires_at:%Y-%m-%d %H:%M UTC}" if r.expires_at else "never"
            out.append(
                f"| `{r.namespace}/{r.name}` | {_cell(r.requester or '?')} | +{r.amount_text} "
                f"| {expires} | {md_cell(r.reason)} |"
            )
    out += [
        "",
        "### Change",
        "",
        f"`{file}` line {edit.line}: `{edit.path}` {edit.old or '(unset)'} -> {edit.new}",
        "",
        "### Validation",
        "",
    ]
    if checked.valid:
        out.append("The policy set validates." if not checked.diagnostics else "Valid, with:")
    else:
        out.append("**The policy set does not validate; this cannot be merged as it is:**")
    out += [f"- `{d}`" for d in checked.diagnostics]
    if checked.plan_markdown:
        out += ["", "### Plan", "", checked.plan_markdown.rstrip()]
    out += ["", "### Recent usage", "", usage or "No Prometheus configured: usage not available."]
    if what_if:
        out += ["", "### What-if (simulator, recent workload)", "", what_if.rstrip()]
    out += ["", "<!-- gangops:quota-request -->", ""]
    return "\n".join(out)


def withdrawn_pr(requests: Sequence[QuotaRequestSpec]) -> tuple[str, str]:
    """The title and body of a pull request whose every request was deleted: its
    branch is the base again (no forge call closes it), so merging it changes nothing."""
    first = requests[0]
    who = (
        f"user {first.user} in project {first.project}"
        if first.user
        else f"project {first.project}"
    )
    names = ", ".join(f"`{r.namespace}/{r.name}`" for r in requests)
    body = (
        f"The QuotaRequests of this pull request were deleted ({names}): its branch no "
        "longer changes anything. Close it; a new request for this max reuses it.\n\n"
        "<!-- gangops:quota-request -->\n"
    )
    return f"Withdrawn: max {first.resource} of {who}", body
