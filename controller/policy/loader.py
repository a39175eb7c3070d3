"""Reading policy files into documents that remember where every value came from.

Policies are written by people and reviewed in pull requests, so every
problem must point at a file, line and column. The loader composes YAML with
ruamel.yaml's C parser (fast enough for thousands of files) and builds plain
Python values from the node graph itself, which lets it record the position
of every key and item, report every duplicate key instead of stopping at the
first, expand merge keys, and stop alias bombs by counting the nodes it
visits. Files come as `Source`s so the same code reads a working tree or a
Git tree at some revision.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver

from controller.policy.diagnostics import Diagnostic, did_you_mean

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_NODES",
    "KINDS",
    "LINK_REFUSED",
    "Document",
    "Limits",
    "LoadResult",
    "Source",
    "load_data",
    "load_sources",
    "nesting_too_deep",
    "sources_from_paths",
]

API_GROUP = "policy.ai.operator"
API_VERSION = f"{API_GROUP}/v1"
KINDS = ("ClusterPolicy", "PriorityTier", "Project")
DEFAULT_MAX_FILE_BYTES = 1 << 20
DEFAULT_MAX_NODES = 100_000
DEFAULT_MAX_DEPTH = 100
_COMPOSER_SAFE_DEPTH = 1000
"""Nesting libyaml's composer survives; text that may nest deeper is checked first."""
YAML_SUFFIXES = (".yaml", ".yml")

Path_ = tuple[str | int, ...]
"""A path into a document: mapping keys and sequence indexes."""


@dataclass(frozen=True)
class Limits:
    """What the loader refuses to read."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    """Files larger than this are reported (GP103) and not read."""
    max_nodes: int = DEFAULT_MAX_NODES
    """A document may never expand to more nodes than this (GP105)."""
    max_depth: int = DEFAULT_MAX_DEPTH
    """Lists and mappings nested deeper than this are refused (GP114)."""


DEFAULT_LIMITS = Limits()


LINK_REFUSED = (
    "is a symbolic link; links are not followed (Git stores a link as the text of its "
    "target, so the reconciler and `plan --base` could never read what it points to): "
    "commit the file itself"
)
"""Why a symbolic link is not read, from the working tree or from Git alike."""


@dataclass(frozen=True)
class Source:
    """One file to read, wherever it lives (working tree or Git tree)."""

    path: str
    """Display path, relative to the policy root, with `/` separators."""
    size: int
    read: Callable[[], bytes]
    refused: str | None = None
    """Why the file is not read (a symbolic link, a FIFO, a device), reported as
    GP112 after its path; `read` is then never called."""


@dataclass
class Document:
    """One YAML document of a policy kind, as plain values plus positions."""

    file: str
    api_version: str
    kind: str
    name: str
    data: dict[str, Any]
    line: int
    """1-based line where the document starts."""
    column: int
    positions: dict[Path_, tuple[int, int]] = field(repr=False, default_factory=dict)

    def pos(self, path: Iterable[str | int]) -> tuple[int, int]:
        """The 1-based (line, column) of `path`, or of its nearest ancestor."""
        p = tuple(path)
        while p:
            if p in self.positions:
                return self.positions[p]
            p = p[:-1]
        return (self.line, self.column)


@dataclass
class LoadResult:
    """Documents of known kinds, plus everything wrong with the files."""

    documents: list[Document] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0


def sources_from_paths(paths: Iterable[str | Path], *, root: Path | None = None) -> list[Source]:
    """YAML files at or under `paths`, sorted; hidden directories are skipped.
    Only regular files are read: symbolic links (as Git readers see them: link
    text), FIFOs and devices come as refused `Source`s, reported as GP112.

    Display paths are relative to `root` (default: the current directory)
    when the file is below it. A `root` (the top of a Git working tree, as the
    reconciler names files from it) is resolved, and so is the way to each file
    (not the file itself: a link is named as Git names it), so a path given
    through a linked directory is named as the same file reached directly.
    Raises `FileNotFoundError` for a missing path.
    """
    resolved = root is not None
    base = Path(os.path.realpath(root) if root is not None else os.path.abspath(Path.cwd()))
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                # hidden directories, a hidden link to one among them (as os.walk
                # lists it), are skipped: `sources._hidden` prunes them in Git alike
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                # a linked directory is not walked: it is refused like a linked
                # file (GP112), not dropped from the policy without a word
                links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
                dirnames[:] = [d for d in dirnames if d not in links]
                found.extend(Path(dirpath, d) for d in links)
                found.extend(
                    Path(dirpath, f) for f in sorted(filenames) if f.endswith(YAML_SUFFIXES)
                )
        else:
            found.append(p)
    out: list[Source] = []
    seen: set[Path] = set()
    for f in found:
        absolute = _located(f, resolved=resolved)
        if absolute in seen:
            continue
        seen.add(absolute)
        try:
            display = absolute.relative_to(base).as_posix()
        except ValueError:
            display = f.as_posix()
        out.append(_file_source(f, display))
    return out


def _located(f: Path, *, resolved: bool) -> Path:
    """`f` made absolute; `resolved`: with the directories on its way resolved, as
    `Path.resolve` resolves the top of a repository, but not `f` itself (a link is
    named as itself, as Git names it, not as its target)."""
    if not resolved:
        return Path(os.path.abspath(f))
    return Path(os.path.realpath(f.parent), f.name)


def _file_source(f: Path, display: str) -> Source:
    """A file on disk as a `Source`: only a regular file is read. A symbolic
    link is refused as Git readers would see it (`LINK_REFUSED`), and so are
    FIFOs, devices and sockets, which could block or never end."""
    try:
        st = os.lstat(f)
    except OSError as e:
        return Source(display, 0, f.read_bytes, refused=f"cannot read file: {e.strerror or e}")
    if stat.S_ISLNK(st.st_mode):
        return Source(display, 0, f.read_bytes, refused=LINK_REFUSED)
    if not stat.S_ISREG(st.st_mode):
        what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        return Source(display, 0, f.read_bytes, refused=f"is {what}, not a regular file")
    return Source(display, st.st_size, lambda: _read_regular(f))


_YAML_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S+)", re.MULTILINE)
"""A `%YAML` directive: the loader reads YAML 1.2 whatever it says, ruamel's other
readers (the quota edits) follow it, so one file must not mean two things."""


def _read_regular(f: Path) -> bytes:
    """The bytes of `f`, opened without following a link or waiting on a FIFO, and
    read only if it is (still) a regular file."""
    fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(f))
        return fh.read()


class _Resolver(VersionedResolver):
    """ruamel's YAML 1.2 resolver, with its per-scalar version lookup cached.

    With the C parser, finding the YAML version raises and catches an
    exception for every scalar, a third of the loading time; policy files
    are always read as YAML 1.2, so the table is looked up once.
    """

    _table: Any = None

    @property
    def versioned_resolver(self) -> Any:
        if self._table is None:
            self._table = super().versioned_resolver
        return self._table


def _yaml() -> YAML:
    yaml = YAML(typ="safe")
    yaml.Resolver = _Resolver
    return yaml


class _Yaml11:
    """How kubectl reads a plain scalar that gangops reads as YAML 1.2.

    The policies of one repository may reach the cluster two ways: read by
    gangops (YAML 1.2), or applied as custom resources by kubectl, Argo CD or
    Flux. kubectl's and Argo CD's sigs.k8s.io/yaml reads them with go-yaml v2,
    which keeps two readings of YAML 1.1: the booleans `y`, `no`, `on`, `off`
    (in any case; strings to YAML 1.2) and integers written with a leading 0,
    which are octal (`010` is 8, not 10). A policy file must mean one thing to
    both, so such a plain scalar is GP115, and quoting it (or writing the
    number without the 0) settles it. What else YAML 1.1 reads otherwise, go-yaml
    reads as gangops does (`1:20` a string, `0o10` and `08` numbers), and is
    left alone. ruamel.yaml's own YAML 1.1 resolver and constructor give the
    other reading; they are asked once per distinct scalar.
    """

    def __init__(self) -> None:
        other = YAML(typ="safe")
        other.version = (1, 1)
        self.resolver, self.constructor = other.resolver, other.constructor
        self.memo: dict[tuple[str, str], tuple[Any] | None] = {}

    def reading(self, node: ScalarNode, value: Any, text: str) -> tuple[Any] | None:
        """(what a YAML 1.1 reader makes of `node`,) when that is not `value`,
        what gangops made of it; None when they agree. `text` is the document's."""
        if node.style:  # quoted or a block scalar: a string to both
            return None
        key = (str(node.tag), str(node.value))
        if key not in self.memo:  # as YAML 1.1 resolves it, were it written untagged
            tag = str(self.resolver.resolve(ScalarNode, node.value, (True, False)))
            self.memo[key] = self._compare(node, value, tag)
        found = self.memo[key]
        if found is not None and _tagged(node, text):  # `!!str no`, `!!int 010`: rare
            return self._compare(node, value, key[0])  # the tag, which both follow
        return found

    def _compare(self, node: ScalarNode, value: Any, tag: str) -> tuple[Any] | None:
        """(`node` read by YAML 1.1 as `tag`,) when that is not `value` and kubectl
        reads it so too: a boolean gangops reads as a string, or an integer written
        with a leading 0. Longer scalars are no such word or number (and YAML 1.1
        reads a long `1:0:0:...` in quadratic time)."""
        if len(node.value) > _LONGEST_APART:
            return None
        boolean = tag == _BOOL and isinstance(value, str)
        octal = tag == _INT and type(value) is int and _leading_zero(node.value)
        if not (boolean or octal):
            return None
        other = ScalarNode(tag, node.value, start_mark=node.start_mark, end_mark=node.end_mark)
        try:
            read = self.constructor.construct_object(other)
        except Exception:  # `!!int 0x`: the 1.2 reading reports it
            return None
        finally:
            self.constructor.constructed_objects.pop(other, None)
            self.constructor.recursive_objects.pop(other, None)
        if type(read) is type(value) and read == value:
            return None
        return (read,)


_LONGEST_APART = 64
"""The longest plain scalar GP115 reads again as YAML 1.1 (`false` and `0777` are short)."""


def _leading_zero(text: str) -> bool:
    """Whether a YAML integer is written with a leading 0 (`010`, `-007`, `0_10`): octal
    to go-yaml v2, as YAML 1.1 has it, decimal to YAML 1.2. `0x1F`, `0b11` and `0o10`
    are read alike by both."""
    digits = text.lstrip("+-")
    return len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbBoO"


def _tagged(node: ScalarNode, text: str) -> bool:
    """Whether the plain scalar `node` of `text` is written with a tag (`!!str no`),
    which YAML 1.1 and 1.2 readers both follow. Its properties (tag, anchor) come
    before it, and a plain scalar cannot itself start with `!` or `&`."""
    written = text[node.start_mark.index : node.end_mark.index].split()
    for word in written:
        if word[:1] == "!":
            return True
        if word[:1] != "&":
            return False
    return False


def load_sources(sources: Iterable[Source], *, limits: Limits = DEFAULT_LIMITS) -> LoadResult:
    """Read every source; report every problem; never raise on bad input."""
    result = LoadResult()
    yaml = _yaml()
    yaml11 = _Yaml11()
    for src in sources:
        result.files += 1
        _load_one(src, yaml, yaml11, limits, result)
    return result


def _load_one(src: Source, yaml: YAML, yaml11: _Yaml11, limits: Limits, result: LoadResult) -> None:
    composed = _compose(src, yaml, limits, result.diagnostics)
    if composed is None:
        return
    text, nodes, budget = composed
    for index, node in enumerate(nodes):
        aliases = _AliasFinder(yaml, text, index)
        _document(src.path, node, yaml, yaml11, budget, result, aliases)


def load_data(
    src: Source, *, limits: Limits = DEFAULT_LIMITS
) -> tuple[list[Any], list[Diagnostic]]:
    """Every document of `src` as plain values, read as policy files are (the
    same size, nesting and alias-expansion limits, the same diagnostics), for
    YAML that is not a policy: a cluster description. A document that cannot
    be read is left out, and its diagnostics say why."""
    yaml = _yaml()
    diags: list[Diagnostic] = []
    composed = _compose(src, yaml, limits, diags)
    if composed is None:
        return [], diags
    text, nodes, budget = composed
    out = []
    for index, node in enumerate(nodes):
        builder = _Builder(src.path, yaml, budget)
        problem = _build(builder, node, budget, _AliasFinder(yaml, text, index))
        if problem is not None:
            diags.append(problem)
            continue
        diags.extend(builder.diagnostics)
        out.append(builder.data)
    return out, diags


def _compose(
    src: Source, yaml: YAML, limits: Limits, diags: list[Diagnostic]
) -> tuple[str, list[Node], Limits] | None:
    """The file's text, its documents' node graphs and the limits to build them
    with; None, with diagnostics, when the file cannot be read or parsed."""
    if src.refused is not None:
        diags.append(Diagnostic("GP112", src.refused, src.path))
        return None
    if src.size > limits.max_file_bytes:
        diags.append(
            Diagnostic(
                "GP103",
                f"file is {src.size} bytes, over the limit of {limits.max_file_bytes}; "
                "split it or raise --max-file-size",
                src.path,
            )
        )
        return None
    try:
        raw = src.read()
    except OSError as e:
        diags.append(Diagnostic("GP112", f"cannot read file: {e.strerror or e}", src.path))
        return None
    if len(raw) > limits.max_file_bytes:  # the file grew after it was listed
        diags.append(Diagnostic("GP103", f"file is over {limits.max_file_bytes} bytes", src.path))
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        diags.append(
            Diagnostic(
                "GP104",
                f"byte 0x{raw[e.start]:02x} is not UTF-8; save the file as UTF-8",
                src.path,
                line,
                col,
            )
        )
        return None
    directive = _YAML_DIRECTIVE.search(text)
    if directive is not None and directive.group(1) != "1.2":
        line = text.count("\n", 0, directive.start()) + 1
        msg = (
            f"%YAML {directive.group(1)}: policy files are YAML 1.2 (the tools that edit "
            "them, such as the quota-request loop, would read 0100 or yes otherwise); "
            "remove the directive"
        )
        diags.append(Diagnostic("GP101", msg, src.path, line, 1))
        return None
    deep = _too_deep(yaml, text, limits.max_depth)
    if deep is not None:
        diags.append(_deep_diagnostic(src.path, limits.max_depth, *deep))
        return None
    try:
        nodes = list(yaml.compose_all(text))
    except MarkedYAMLError as e:
        diags.append(_syntax_diagnostic(src.path, e, text))
        return None
    except ReaderError as e:  # a character YAML does not allow, by its offset
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        char = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
        msg = f"character {char} is not allowed in YAML ({e.reason}); remove it"
        diags.append(Diagnostic("GP101", msg, src.path, line, col))
        return None
    except YAMLError as e:
        diags.append(Diagnostic("GP101", str(e).strip() or "invalid YAML", src.path, 1, 1))
        return None
    # Without aliases a document cannot have more nodes than its file has
    # characters, so expanding past that (plus slack for tiny files) is an
    # alias bomb: stop it after a few thousand nodes, not at max_nodes.
    return text, nodes, replace(limits, max_nodes=min(limits.max_nodes, len(text) + 1000))


def _syntax_diagnostic(file: str, e: MarkedYAMLError, text: str) -> Diagnostic:
    """GP101 where the parser gave up, naming also where the construct it was
    reading opened (an unclosed bracket or quote is fixed there, not here)."""
    mark, opened = e.problem_mark or e.context_mark, e.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    message = e.problem or "invalid YAML"
    lines = text.splitlines()
    if mark is not None and mark.line < len(lines) and lines[mark.line][mark.column :][:1] == "\t":
        message += ": a tab, which YAML does not indent with (use spaces)"
    if e.context:
        where = ""
        if opened is not None and (opened.line + 1, opened.column + 1) != (line, col):
            where = f" that opened at line {opened.line + 1}, column {opened.column + 1}"
        message += f" ({e.context}{where})"
    return Diagnostic("GP101", message, file, line, col)


def nesting_too_deep(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[int, int] | None:
    """The (line, column) where `text` nests lists and mappings deeper than
    `max_depth`, when it might nest too deep for libyaml to compose; check
    any YAML from a user with it before loading it."""
    return _too_deep(_yaml(), text, max_depth)


def _too_deep(yaml: YAML, text: str, max_depth: int) -> tuple[int, int] | None:
    """Where the text's nesting first exceeds `max_depth`, when it might nest
    too deep to compose; None otherwise.

    libyaml composes recursively in C (some ten thousand levels crash the
    process) and scans flow collections in time quadratic in their depth, so
    such text is refused from the parser's events before it is composed.
    Each level of nesting takes a `[` or `{`, or at least two more columns
    (indentation, `- `, `? `), which bounds the depth cheaply, so ordinary
    files are not parsed twice. Shallower nesting is checked while building.
    """
    longest = max(map(len, text.splitlines()), default=0)
    if text.count("[") + text.count("{") + 2 * longest + 2 <= _COMPOSER_SAFE_DEPTH:
        return None
    depth = 0
    try:
        for event in yaml.parse(text):
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    return (event.start_mark.line + 1, event.start_mark.column + 1)
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except YAMLError:
        return None  # the composer reports it, with its position
    return None


def _deep_diagnostic(file: str, max_depth: int, line: int, col: int) -> Diagnostic:
    return Diagnostic(
        "GP114",
        f"lists and mappings nest more than {max_depth} levels deep here; "
        "no policy needs more than ten",
        file,
        line,
        col,
    )


_RUN_ON_VERSION = re.compile(r"[._-]?v[0-9]+(?:(?:alpha|beta)[0-9]*)?$")
"""A version run into the group, as in `policy.ai.operator.v1` or `policy.ai.operatorv1`."""


def _near_miss(api_version: str, group: str, kind: str) -> bool:
    """Whether an apiVersion outside the policy group is a slip of its pen, not another
    group's document: the group without a version (`policy.ai.operator`), or a group
    a letter or two from it on a policy kind (`policy.ai.operater/v1` Project). With
    no `/`, the whole apiVersion is the group, less a version run into it
    (`policy.ai.operator.v1`, `policy.ai.operator-v1`, `Policy.ai.operator` Project)."""
    if api_version == API_GROUP:
        return True
    if "/" not in api_version:
        group = _RUN_ON_VERSION.sub("", api_version.lower())
    close = difflib.SequenceMatcher(None, group.lower(), API_GROUP).ratio() >= 0.85
    return kind in KINDS and close


def _document(
    file: str,
    node: Node,
    yaml: YAML,
    yaml11: _Yaml11,
    limits: Limits,
    result: LoadResult,
    aliases: _AliasFinder,
) -> None:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    diags = result.diagnostics
    if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        diags.append(Diagnostic("GP106", "empty document is ignored", file, line, col))
        return
    if not isinstance(node, MappingNode):
        what = "a list" if isinstance(node, SequenceNode) else "a scalar"
        diags.append(
            Diagnostic("GP107", f"a document must be a mapping, found {what}", file, line, col)
        )
        return
    builder = _Builder(file, yaml, limits, yaml11=yaml11, text=aliases.text)
    problem = _build(builder, node, limits, aliases)
    if problem is not None:
        diags.append(problem)
        return
    data = builder.data
    diags.extend(builder.diagnostics)
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not isinstance(api_version, str) or not api_version:
        diags.append(Diagnostic("GP108", "document has no apiVersion", file, line, col))
        return
    if not isinstance(kind, str) or not kind:
        diags.append(Diagnostic("GP108", "document has no kind", file, line, col))
        return
    group, _, version = api_version.rpartition("/")
    kl, kc = builder.positions.get(("kind",), (line, col))
    if group != API_GROUP and _near_miss(api_version, group, kind):
        al, ac = builder.positions.get(("apiVersion",), (line, col))
        slash = "" if "/" in api_version else "; an apiVersion is group/version"
        diags.append(
            Diagnostic(
                "GP110",
                f"apiVersion {api_version!r} is not supported; use {API_VERSION}{slash}"
                " (read as a typo: skipping the document would drop its policy)",
                file,
                al,
                ac,
            )
        )
        return
    if group != API_GROUP:
        diags.append(
            Diagnostic(
                "GP111", f"{kind} ({api_version}) is not a gangops policy; skipped", file, kl, kc
            )
        )
        return
    if kind not in KINDS:
        hint = did_you_mean(kind, KINDS)
        diags.append(
            Diagnostic(
                "GP109",
                f"unknown kind {kind!r}{hint}; known kinds: {', '.join(KINDS)}",
                file,
                kl,
                kc,
            )
        )
        return
    if version != "v1":
        al, ac = builder.positions.get(("apiVersion",), (line, col))
        diags.append(
            Diagnostic(
                "GP110",
                f"apiVersion {api_version!r} is not supported; use {API_VERSION}",
                file,
                al,
                ac,
            )
        )
        return
    diags.extend(builder.read_apart.values())
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    result.documents.append(
        Document(
            file=file,
            api_version=api_version,
            kind=kind,
            name=name if isinstance(name, str) else "",
            data=data,
            line=line,
            column=col,
            positions=builder.positions,
        )
    )


def _build(
    builder: _Builder, node: Node, limits: Limits, aliases: _AliasFinder
) -> Diagnostic | None:
    """Build `node` into `builder.data`; the diagnostic that stopped it, if any."""
    file = builder.file
    try:
        builder.data = builder.build(node, ())
    except _TooDeep as e:
        return _deep_diagnostic(file, limits.max_depth, *e.position)
    except _Recursive as e:
        return Diagnostic(
            "GP105",
            "an alias refers to a list or mapping that contains it, so it never ends; "
            "remove the alias",
            file,
            *e.position,
        )
    except _TooManyNodes as e:
        found = aliases.nth(e.alias) if e.alias is not None else None
        if found is None:
            line, col, which = node.start_mark.line + 1, node.start_mark.column + 1, ""
        else:
            (line, col), name = found
            which = f"; the alias *{name} here crossed the limit"
        return Diagnostic(
            "GP105",
            f"document expands to more than {limits.max_nodes} nodes through anchors and "
            f"aliases (an alias bomb?){which}; remove the aliases",
            file,
            line,
            col,
        )
    return None


class _AliasFinder:
    """Where the aliases of one document of a text are, found only when asked:
    the composed graph keeps no trace of them (an alias is the node it names)."""

    def __init__(self, yaml: YAML, text: str, document: int) -> None:
        self.yaml, self.text, self.document = yaml, text, document

    def nth(self, n: int) -> tuple[tuple[int, int], str] | None:
        """The (line, column) and anchor name of the document's `n`th alias (from 1)."""
        document, seen = -1, 0
        try:
            for event in self.yaml.parse(self.text):
                if isinstance(event, DocumentStartEvent):
                    document += 1
                elif isinstance(event, AliasEvent) and document == self.document:
                    seen += 1
                    if seen == n:
                        mark = event.start_mark
                        return (mark.line + 1, mark.column + 1), str(event.anchor)
        except YAMLError:
            return None
        return None


class _TooManyNodes(Exception):
    def __init__(self, alias: int | None) -> None:
        super().__init__()
        self.alias = alias
        """Which of the document's aliases (from 1) was being expanded; None if none was."""


class _Positioned(Exception):
    def __init__(self, node: Node) -> None:
        super().__init__()
        self.position = (node.start_mark.line + 1, node.start_mark.column + 1)


class _TooDeep(_Positioned):
    pass


class _Recursive(_Positioned):
    pass


_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"


def _int(text: str) -> int:
    t = text.replace("_", "")
    sign, digits = (-1, t[1:]) if t[:1] == "-" else (1, t.lstrip("+"))
    if digits[:2] in ("0x", "0o", "0b"):
        return sign * int(digits[2:], {"0x": 16, "0o": 8, "0b": 2}[digits[:2]])
    return sign * int(digits, 10)


def _float(text: str) -> float:
    t = text.replace("_", "").lower()
    if t.endswith(".inf"):
        return float("-inf") if t.startswith("-") else float("inf")
    if t == ".nan":
        return float("nan")
    return float(t)


def _bool(text: str) -> bool:
    t = text.lower()
    if t not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return t == "true"


# Scalars resolved by ruamel's YAML 1.2 resolver, built without its (slow,
# per-node) constructor; anything unusual falls back to the constructor.
_PLAIN_TAGS: dict[str, Callable[[str], Any]] = {
    "tag:yaml.org,2002:int": _int,
    "tag:yaml.org,2002:float": _float,
    "tag:yaml.org,2002:bool": _bool,
    "tag:yaml.org,2002:null": lambda t: None,
}


def _whole(value: Any) -> Any:
    """A float with no fraction (`1e5`, `32.0`) as the integer it is: the schemas
    take it where an integer goes (JSON Schema's reading), and what is compiled from
    it must say `100000`, not `100000.0`, which an int32 field of the API server
    refuses. Beyond 2**53 a float is not exact, and is left as it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


class _Builder:
    """Builds plain values from a node graph, recording positions and problems."""

    def __init__(
        self,
        file: str,
        yaml: YAML,
        limits: Limits,
        *,
        yaml11: _Yaml11 | None = None,
        text: str = "",
    ) -> None:
        self.file = file
        self.yaml11 = yaml11
        """Set for a policy document (whose `text` it is): its scalars are checked
        against a YAML 1.1 reading."""
        self.text = text
        self.read_apart: dict[int, Diagnostic] = {}
        """GP115 for each scalar node (by id) that YAML 1.1 reads apart: an alias of
        one is reported once."""
        self.constructor = yaml.constructor
        self.budget = limits.max_nodes
        self.max_depth = limits.max_depth
        self.open: list[Node] = []
        """The lists and mappings being built, outermost first."""
        self.positions: dict[Path_, tuple[int, int]] = {}
        self.diagnostics: list[Diagnostic] = []
        self.data: Any = None
        """What `build` built, once it has."""
        self.built: set[int] = set()
        """The nodes met so far (by id): meeting one again is following an alias."""
        self.aliases = 0
        """Aliases of the text followed so far (not those inside an alias' expansion)."""
        self.expanding: int | None = None
        """Which of them is being expanded now."""

    def build(self, node: Node, path: Path_) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _TooManyNodes(self.expanding)
        if path not in self.positions:
            self.positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        outermost = self._alias(node)
        try:
            if not isinstance(node, MappingNode | SequenceNode):
                return self._scalar(node)
            if any(n is node for n in self.open):
                raise _Recursive(node)
            if len(self.open) >= self.max_depth:
                raise _TooDeep(node)
            self.open.append(node)
            try:
                if isinstance(node, MappingNode):
                    return self._mapping(node, path)
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            finally:
                self.open.pop()
        finally:
            if outermost:
                self.expanding = None

    def _alias(self, node: Node) -> bool:
        """Note `node` as met; True when it is an alias of the text itself (not one
        inside an alias' expansion), which is then the one being expanded."""
        if id(node) not in self.built:
            self.built.add(id(node))
            return False
        if self.expanding is not None:
            return False
        self.aliases += 1
        self.expanding = self.aliases
        return True

    def _scalar(self, node: Node) -> Any:
        value = self._read(node)
        if self.yaml11 is not None and isinstance(node, ScalarNode):
            other = self.yaml11.reading(node, value, self.text)
            if other is not None and id(node) not in self.read_apart:
                self.read_apart[id(node)] = self._apart(node, value, other[0])
        return value

    def _apart(self, node: ScalarNode, value: Any, other: Any) -> Diagnostic:
        written = _clip(str(node.value))
        ours, theirs = _clip(json.dumps(value, default=str)), _clip(json.dumps(other, default=str))
        if isinstance(value, str):
            fix = f"quote it ({ours}) to keep the string"
        else:
            fix = f"write it as {ours}"
        return Diagnostic(
            "GP115",
            f"{written} is {ours} to gangops (YAML 1.2) but {theirs} to YAML 1.1 readers, "
            "such as kubectl and Argo CD (sigs.k8s.io/yaml) applying the policies as "
            f"custom resources; {fix}",
            self.file,
            node.start_mark.line + 1,
            node.start_mark.column + 1,
        )

    def _read(self, node: Node) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag in _PLAIN_TAGS:
            try:
                return _whole(_PLAIN_TAGS[tag](node.value))
            except ValueError:  # a form only ruamel's constructor knows
                pass
            try:
                return _whole(self.constructor.construct_object(node))
            except Exception as e:  # `!!int abc`, `!!int ""`, `!!bool maybe`, 5,000 digits
                self.constructor.recursive_objects.pop(node, None)
                self.diagnostics.append(
                    Diagnostic(
                        "GP101",
                        f"{_clip(str(node.value))} cannot be read as !!{tag.rpartition(':')[2]} "
                        f"({_clip(str(e))}); quote it to make it a string",
                        self.file,
                        node.start_mark.line + 1,
                        node.start_mark.column + 1,
                    )
                )
                return str(node.value)
        # Timestamps, binary and custom tags: keep the text as written; the
        # schema decides whether a string is acceptable there.
        return str(node.value)

    def _mapping(self, node: MappingNode, path: Path_) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        # Where the merged values are written, kept apart: a key of this mapping
        # overrides a merged one, and its position with it, whichever comes first.
        merged_at: dict[Path_, tuple[int, int]] = {}
        first_lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                own, self.positions = self.positions, merged_at
                try:
                    for source in self._merge_sources(value_node, path):
                        for k, v in source.items():
                            merged.setdefault(k, v)
                finally:
                    self.positions = own
                continue
            key = self._key(key_node)
            kpath = (*path, key)
            if key in out:
                first = first_lines[key]
                self.diagnostics.append(
                    Diagnostic(
                        "GP102",
                        f"duplicate key {key!r} (first defined on line {first}); "
                        "the later value is used",
                        self.file,
                        key_node.start_mark.line + 1,
                        key_node.start_mark.column + 1,
                    )
                )
                self.positions.pop(kpath, None)
            self.positions[kpath] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            first_lines.setdefault(key, key_node.start_mark.line + 1)
            out[key] = self.build(value_node, kpath)
        for k, v in merged.items():
            if k in out:
                continue
            out[k] = v
            under = (*path, k)
            for at, pos in merged_at.items():
                if at[: len(under)] == under:
                    self.positions.setdefault(at, pos)
        return out

    def _merge_sources(self, node: Node, path: Path_) -> Iterator[dict[str, Any]]:
        items = node.value if isinstance(node, SequenceNode) else [node]
        for item in items:
            value = self.build(item, path)
            if isinstance(value, dict):
                yield value
            else:
                self.diagnostics.append(
                    Diagnostic(
                        "GP101",
                        "a merge key (<<) must refer to a mapping",
                        self.file,
                        item.start_mark.line + 1,
                        item.start_mark.column + 1,
                    )
                )

    def _key(self, node: Node) -> str:
        if self._alias(node):
            self.expanding = None
        if isinstance(node, ScalarNode):
            value = self._scalar(node)
            return value if isinstance(value, str) else str(node.value)
        self.diagnostics.append(
            Diagnostic(
                "GP101",
                "a mapping key must be a plain scalar",
                self.file,
                node.start_mark.line + 1,
                node.start_mark.column + 1,
            )
        )
        return f"<complex key at line {node.start_mark.line + 1}>"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
