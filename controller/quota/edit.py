"""The minimal edit of a policy file: one quota value changed, every other byte kept.

A quota request becomes a pull request that reviewers read as a one-line
diff, so the file is not re-serialised: ruamel.yaml's round-trip loader
finds where the value sits (line and column of the scalar, or of the last
key of the mapping a new key joins), the text is spliced there, and the
result is parsed again and compared with the old document plus the one
change, so an edit that touched anything else is refused rather than
proposed. Comments, key order, flow or block style and quoting outside the
changed value stay byte for byte. Pure: text in, text out.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from controller.quantity import QuantityError, format_quantity, parse_quantity

__all__ = [
    "Edit",
    "EditError",
    "Superseded",
    "auto_propose",
    "edit_max",
    "find_project",
    "format_amount",
    "owner_of",
    "project_namespaces",
    "read_max",
]


class EditError(ValueError):
    """The file cannot be edited as asked: says where and why."""


class Superseded(EditError):
    """What the edit would change is no longer there as it was granted: the Project is
    gone, its max no longer set, or lowered below what a revert would take back."""


@dataclass(frozen=True)
class Edit:
    """One changed value."""

    text: str
    """The whole file after the edit."""
    path: str
    """Where, dotted from the document (`spec.quota.max.gpu`)."""
    old: str | None
    """The value before, as written (None: the key was absent)."""
    new: str
    line: int
    """1-based line of the new value."""


_TOKEN = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^\s,}\]#]+")


def format_amount(resource: str, amount: Fraction) -> str:
    """How the new value is written: whole GPUs as an integer, CPU and memory as
    quantities (binary suffixes for memory)."""
    if resource == "gpu":
        return str(int(amount))
    return format_quantity(amount, binary=resource == "memory")


def _parse(resource: str, value: Any) -> Fraction:
    try:
        return parse_quantity(value if isinstance(value, (int, str)) else str(value))
    except QuantityError as e:
        raise EditError(f"{resource}: {value!r} is not a quantity ({e})") from None


def _rt() -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    return yaml


def _docs(text: str) -> list[Any]:
    try:
        return list(_rt().load_all(io.StringIO(text)))
    except Exception as e:  # ruamel's errors carry the position in their text
        raise EditError(f"does not parse as YAML: {e}") from None


def find_project(text: str, project: str) -> bool:
    """Whether `text` holds the Project document named `project`."""
    try:
        docs = _docs(text)
    except EditError:
        return False
    return any(_is_project(d, project) for d in docs)


def _is_project(doc: Any, project: str) -> bool:
    return (
        isinstance(doc, CommentedMap)
        and doc.get("kind") == "Project"
        and isinstance(doc.get("metadata"), dict)
        and doc["metadata"].get("name") == project
    )


def _project(docs: list[Any], project: str) -> tuple[int, CommentedMap]:
    for i, d in enumerate(docs):
        if _is_project(d, project):
            return i, d
    raise Superseded(f"no Project named {project!r} in the file")


def _member(spec: CommentedMap, user: str) -> tuple[CommentedMap | None, CommentedSeq | None]:
    users = spec.get("users")
    members = users.get("members") if isinstance(users, CommentedMap) else None
    if not isinstance(members, CommentedSeq):
        return None, None
    for m in members:
        if isinstance(m, CommentedMap) and m.get("name") == user:
            return m, members
    return None, members


def owner_of(text: str, namespace: str) -> str | None:
    """The name of the Project in `text` that owns `namespace`, if any."""
    try:
        docs = _docs(text)
    except EditError:
        return None
    for d in docs:
        if isinstance(d, CommentedMap) and d.get("kind") == "Project":
            spec = d.get("spec") or {}
            if namespace in [str(n) for n in spec.get("namespaces") or []]:
                return str((d.get("metadata") or {}).get("name"))
    return None


def project_namespaces(text: str, project: str) -> list[str]:
    """The namespaces Project `project` in `text` owns."""
    _, doc = _project(_docs(text), project)
    spec = doc.get("spec")
    namespaces = spec.get("namespaces") if isinstance(spec, CommentedMap) else None
    return [str(n) for n in namespaces] if isinstance(namespaces, list) else []


def auto_propose(text: str, project: str) -> bool:
    """Whether Project `project` opted in to proposals (`spec.quotaRequests.autoPropose`)."""
    _, doc = _project(_docs(text), project)
    spec = doc.get("spec")
    settings = spec.get("quotaRequests") if isinstance(spec, CommentedMap) else None
    return isinstance(settings, CommentedMap) and settings.get("autoPropose") is True


def read_max(text: str, *, project: str, user: str | None, resource: str) -> Fraction | None:
    """The max `resource` the file gives the project (or `user` in it, falling back
    to the project's users.default); None where it sets none."""
    _, doc = _project(_docs(text), project)
    spec = doc.get("spec")
    if not isinstance(spec, CommentedMap):
        raise EditError(f"Project {project!r} has no spec")
    if user is None:
        value = ((spec.get("quota") or {}).get("max") or {}).get(resource)
    else:
        member, _ = _member(spec, user)
        source = member if member is not None else (spec.get("users") or {}).get("default") or {}
        value = (source.get("max") or {}).get(resource)
        if value is None and member is not None:
            value = (((spec.get("users") or {}).get("default") or {}).get("max") or {}).get(
                resource
            )
    return None if value is None else _parse(resource, value)


def _offset(text: str, line: int, col: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(x) for x in lines[:line]) + col


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _replace_value(text: str, mapping: CommentedMap, key: str, new: str) -> tuple[str, str, int]:
    line, col = mapping.lc.value(key)
    start = _offset(text, line, col)
    m = _TOKEN.match(text, start)
    if m is None:
        raise EditError(f"cannot find the value of {key!r} at line {line + 1}")
    old = m.group(0)
    if old[0] in "\"'":
        new = old[0] + new + old[0]
    return text[:start] + new + text[m.end() :], old, start


def _value_end(text: str, mapping: CommentedMap, key: str) -> int:
    """Where the value of `key` ends: after its token, or its closing bracket."""
    vline, vcol = mapping.lc.value(key)
    start = _offset(text, vline, vcol)
    value = mapping[key]
    if isinstance(value, (CommentedMap, CommentedSeq)) and value.fa.flow_style():
        depth, quote = 0, ""
        for i in range(start, len(text)):
            c = text[i]
            if quote:
                quote = "" if c == quote else quote
            elif c in "\"'":
                quote = c
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
        raise EditError(f"unbalanced brackets in the value of {key!r} at line {vline + 1}")
    if isinstance(value, (CommentedMap, CommentedSeq)):
        raise EditError(f"cannot add a key after the nested block of {key!r}: edit by hand")
    m = _TOKEN.match(text, start)
    if m is None:
        raise EditError(f"cannot find the value of {key!r} at line {vline + 1}")
    return m.end()


def _append_key(text: str, mapping: CommentedMap, key: str, value: str) -> tuple[str, int]:
    """`key: value` added after the mapping's last key, in the mapping's style."""
    last = list(mapping)[-1]
    _, kcol = mapping.lc.key(last)
    end = _value_end(text, mapping, last)
    if mapping.fa.flow_style():
        insert, at = f", {key}: {value}", end
        return text[:at] + insert + text[at:], at + len(insert) - len(value)
    eol = text.find("\n", end)
    at = len(text) if eol < 0 else eol + 1
    insert = " " * kcol + f"{key}: {value}\n"
    if eol < 0:
        insert = "\n" + insert
    return text[:at] + insert + text[at:], at + len(insert) - len(value) - 1


def _append_member(text: str, members: CommentedSeq, entry: str) -> tuple[str, int]:
    """`- <entry>` added after the sequence's last item, in the sequence's style."""
    if members.fa.flow_style() or not members:
        raise EditError("users.members is not a block sequence: add the member by hand")
    iline, icol = members.lc.item(len(members) - 1)
    item_start = _offset(text, iline, icol)
    dash = text.rfind("-", 0, item_start)
    indent = dash - (text.rfind("\n", 0, dash) + 1)
    # The item ends where the next line indented no deeper than its dash starts.
    lines = text.splitlines(keepends=True)
    end_line = iline + 1
    while end_line < len(lines):
        stripped = lines[end_line].lstrip(" ")
        depth = len(lines[end_line]) - len(stripped)
        if stripped.strip() and not stripped.startswith("#") and depth <= indent:
            break
        end_line += 1
    at = sum(len(x) for x in lines[:end_line])
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    insert = prefix + " " * indent + f"- {entry}\n"
    return text[:at] + insert + text[at:], at + len(prefix)


def edit_max(text: str, *, project: str, user: str | None, resource: str, delta: Fraction) -> Edit:
    """Raise (or, with a negative `delta`, lower) the project's max of `resource`, or
    `user`'s inside the project, by `delta`; the file otherwise unchanged."""
    docs = _docs(text)
    index, doc = _project(docs, project)
    spec = doc.get("spec")
    if not isinstance(spec, CommentedMap):
        raise EditError(f"Project {project!r} has no spec")
    current = read_max(text, project=project, user=user, resource=resource)
    if current is None:
        who = f"user {user!r} in project {project!r}" if user else f"project {project!r}"
        raise Superseded(f"{who} has no max {resource} to raise (it is not limited)")
    target = current + delta
    if target < 0:
        raise Superseded(
            f"max {resource} would fall below zero ({format_amount(resource, target)})"
        )
    new = format_amount(resource, target)
    old: str | None
    if user is None:
        quota = spec["quota"]
        text, old, at = _replace_value(text, quota["max"], resource, new)
        path, want = f"spec.quota.max.{resource}", ("quota", "max")
    else:
        member, members = _member(spec, user)
        path = f"spec.users.members[{user}].max.{resource}"
        if member is not None and isinstance(member.get("max"), CommentedMap):
            if resource in member["max"]:
                text, old, at = _replace_value(text, member["max"], resource, new)
            else:
                old = None
                text, at = _append_key(text, member["max"], resource, new)
        elif member is not None:
            old = None
            text, at = _append_key(text, member, "max", f"{{{resource}: {new}}}")
        elif members is not None:
            old = None
            entry = f"{{name: {_string(user)}, max: {{{resource}: {new}}}}}"
            text, at = _append_member(text, members, entry)
        else:
            raise EditError(
                f"project {project!r} lists no users.members to add {user!r} to: add the "
                "list by hand, or request the project's max"
            )
        want = ("users", user)
    _verify(docs, index, _docs(text), want=want, resource=resource, value=target)
    return Edit(text=text, path=path, old=old, new=new, line=_line_of(text, at))


def _string(value: str) -> str:
    """`value` as a YAML string inside a flow mapping: plain where it reads back as
    itself there both to gangops (YAML 1.2) and to kubectl (YAML 1.1, which reads
    `no` or `y` as booleans: GP115), else double-quoted (a username of `12345`,
    `true`, `null` or `no` is a label value, and plain it would read as a number,
    a boolean or nothing, and `1:20` would not parse in a flow mapping)."""
    entry = f"{{name: {value}}}"
    for version in ((1, 2), (1, 1)):
        yaml = YAML(typ="safe")
        yaml.version = version
        try:
            same = yaml.load(entry) == {"name": value}
        except Exception:  # not a plain scalar there at all
            same = False
        if not same:  # characters as they are: `\ud83d\ude00` reads as no character
            return json.dumps(value, ensure_ascii=False)
    return value


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node if isinstance(node, (bool, int, float)) or node is None else str(node)


def _verify(
    before: list[Any],
    index: int,
    after: list[Any],
    *,
    want: tuple[str, str],
    resource: str,
    value: Fraction,
) -> None:
    """The edited file means the old one with exactly the one value changed."""
    old, new = [_plain(d) for d in before], [_plain(d) for d in after]
    if len(old) != len(new):
        raise EditError("the edit changed the number of documents")
    spec = old[index]["spec"]
    if want[0] == "quota":
        spec["quota"]["max"][resource] = _plain(after[index]["spec"]["quota"]["max"][resource])
        got = spec["quota"]["max"][resource]
    else:
        members = spec["users"]["members"]
        entry = next((m for m in members if m.get("name") == want[1]), None)
        new_members = new[index]["spec"]["users"]["members"]
        new_entry = next((m for m in new_members if m.get("name") == want[1]), None)
        if new_entry is None:
            raise EditError(f"the edit did not add member {want[1]!r}")
        if entry is None:
            members.append({"name": want[1], "max": {resource: new_entry["max"][resource]}})
        else:
            entry.setdefault("max", {})[resource] = new_entry["max"][resource]
        got = new_entry["max"][resource]
    if old != new or _parse(resource, got) != value:
        raise EditError("the minimal edit would have changed more than the one value")
