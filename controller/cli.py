"""The `gangops` command line: one entry point, a subcommand per job.

Exit codes follow the linters users already script around: 0 success,
1 the policies are invalid (or a plan could not be made of them), 2 a usage
error (bad flags, a missing path, a ref that is not a commit).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller import __version__
from controller.cliargs import positive_count
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE

__all__ = ["main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

_VALIDATE_EPILOG = """\
Every YAML file under each PATH is read (hidden directories are skipped).
Documents of other API groups (a Kustomization, a cluster description) are
skipped with a notice. Every problem in every file is reported, then:
  exit 0  valid (warnings and notices do not fail)
  exit 1  invalid
  exit 2  usage error (for example a PATH that does not exist)

formats:
  text    file:line:col: error GP123: message      (default)
  json    {"diagnostics": [...], "summary": {...}}
  github  ::error file=...,line=...:: workflow commands that annotate the pull
          request; a table is appended to $GITHUB_STEP_SUMMARY when it is set
  sarif   SARIF 2.1.0, for code-scanning uploads
"""

_PLAN_EPILOG = """\
The policies under PATH in the working tree are compared with the same PATH
at --base (a branch, tag or commit), offline: both sides are validated and
compiled, and the compiled objects are diffed. With --cluster they are
compared with the live cluster instead: each object that would change is
server-side applied with dryRun=All (admission and validation run, nothing is
stored), and objects gangops manages that the policies no longer produce are
deletions. Each object is created,
updated (with the changed fields), recreated or deleted; destructive steps are
marked: a PriorityClass whose value or preemptionPolicy changes (immutable in
Kubernetes: deleted and recreated), a deleted tier, namespace or quota, and a
project guarantee cut. Exit 0 when a plan was made (with or without changes),
1 when the working tree's policies are invalid, 2 on a usage error.
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-file-size",
        type=positive_count,
        default=None,
        metavar="BYTES",
        help="refuse policy files larger than this (default 1048576)",
    )


_LEAN = {"agent": "controller.agent.cli"}
"""Commands that run on every node, parsed without loading the rest of gangops (the
Kubernetes client, the policy compiler): the node agent must stay small."""


def _lean_parser(command: str) -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="gangops")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    importlib.import_module(_LEAN[command]).add_subcommand(sub)
    return parser


def _parser() -> argparse.ArgumentParser:
    from controller.policy.report import DIAGNOSTIC_FORMATS, PLAN_FORMATS

    parser = argparse.ArgumentParser(
        prog="gangops",
        description="GitOps policy controller and gang scheduler for shared Kubernetes "
        "GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gangops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    v = sub.add_parser(
        "validate",
        help="validate policy files (schemas and semantic rules)",
        description="Validate quota and priority policies against the JSON Schemas and the "
        "semantic rules, reporting every problem at file:line:col.",
        epilog=_VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument(
        "paths", nargs="*", default=["."], metavar="PATH", help="files or directories (default .)"
    )
    v.add_argument(
        "--format", choices=DIAGNOSTIC_FORMATS, default="text", help="output format (default text)"
    )
    v.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        help="gangops' own namespace, which no project may claim (default %(default)s)",
    )
    _add_common(v)
    v.set_defaults(func=_validate)

    r = sub.add_parser(
        "render",
        help="print the Kubernetes objects the policies compile to",
        description="Validate, then print the objects the controller would apply, in apply "
        "order: PriorityClasses, Namespaces, ResourceQuotas, LimitRanges, the scheduling-policy "
        "ConfigMap.",
        epilog="Diagnostics go to stderr; exit 1 (and no objects) when the policies are invalid.",
    )
    r.add_argument("path", nargs="?", default=".", metavar="PATH", help="policy root (default .)")
    r.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="default yaml")
    r.add_argument(
        "--revision",
        help="revision recorded in the gangops.ai/revision annotation "
        "(default: the Git commit of PATH, with -dirty for local changes)",
    )
    r.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        help="namespace of the scheduling-policy ConfigMap (default %(default)s)",
    )
    _add_common(r)
    r.set_defaults(func=_render)

    pl = sub.add_parser(
        "plan",
        help="show what a change to the policies would change in the cluster",
        description="Compare the policy set at a Git ref with the working tree, offline.",
        epilog=_PLAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pl.add_argument("path", nargs="?", default=".", metavar="PATH", help="policy root (default .)")
    against = pl.add_mutually_exclusive_group(required=True)
    against.add_argument("--base", metavar="GIT_REF", help="branch, tag or commit to compare with")
    against.add_argument(
        "--cluster",
        action="store_true",
        help="compare with the live cluster instead (server-side dry-run of every changed object)",
    )
    pl.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="with --cluster: kubeconfig (default $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    pl.add_argument(
        "--source",
        metavar="NAME",
        help="with --cluster: compare as PolicySource NAME applies them; only its objects "
        "can be deletions (default: every object gangops manages)",
    )
    pl.add_argument(
        "--format", choices=PLAN_FORMATS, default="text", help="output format (default text)"
    )
    pl.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        help="namespace of the scheduling-policy ConfigMap (default %(default)s)",
    )
    _add_common(pl)
    pl.set_defaults(func=_plan)

    _add_plugins(sub)
    return parser


def _add_plugins(sub: Any) -> None:
    """Subcommands that live with their own package."""
    from controller.agent.cli import add_subcommand as add_agent
    from controller.devcluster.cli import add_subcommand as add_dev_cluster
    from controller.gang.cli import add_subcommand as add_explain
    from controller.quota.cli import add_subcommand as add_quota
    from controller.reconciler.cli import add_subcommand as add_install_crds
    from controller.run import add_subcommand as add_run
    from controller.sim.cli import add_subcommand as add_simulate

    for add in (
        add_run,
        add_install_crds,
        add_explain,
        add_quota,
        add_simulate,
        add_dev_cluster,
        add_agent,
    ):
        add(sub)


def _limits(args: argparse.Namespace) -> Any:
    from controller.policy.loader import Limits

    return Limits(max_file_bytes=args.max_file_size) if args.max_file_size else Limits()


def _validate(args: argparse.Namespace) -> int:
    from controller.policy.loader import sources_from_paths
    from controller.policy.report import format_diagnostics, github_step_summary
    from controller.policy.sources import repository_resolver
    from controller.policy.validate import validate_sources

    try:
        sources = sources_from_paths(args.paths)
    except FileNotFoundError as e:
        print(f"gangops validate: {e}", file=sys.stderr)
        return EXIT_USAGE
    resolve = repository_resolver([Path(p) for p in args.paths])
    result = validate_sources(
        sources,
        root=" ".join(args.paths),
        resolve=resolve,
        limits=_limits(args),
        system_namespace=args.system_namespace,
    )
    sys.stdout.write(format_diagnostics(result.diagnostics, fmt=args.format, files=result.files))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if args.format == "github" and summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as f:
                f.write(github_step_summary(result.diagnostics, result.files))
        except OSError as e:  # the summary is an extra: the verdict stands
            print(f"gangops validate: no step summary: {e}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_INVALID


def _compile_tree(
    args: argparse.Namespace, root: Path, *, as_applied: bool = False
) -> tuple[Any, list[dict[str, Any]] | None]:
    """Validate and compile the working tree at `root`; print diagnostics to stderr.
    `as_applied`: with the source files named as the reconciler names them (relative
    to the top of the repository), for a comparison with the live objects."""
    from controller.policy.build import build
    from controller.policy.report import format_diagnostics
    from controller.policy.sources import repository_top, working_revision, working_tree

    sources, resolve = working_tree(root, in_repository=as_applied)
    top = repository_top(root) if as_applied else None
    source_root = root.as_posix()
    if top is not None:
        source_root = Path(os.path.relpath(root.resolve(), top)).as_posix()
    built = build(
        sources,
        root=str(root),
        resolve=resolve,
        revision=lambda: getattr(args, "revision", None) or working_revision(root),
        source_root=source_root,
        system_namespace=args.system_namespace,
        limits=_limits(args),
    )
    result = built.validation
    shown = [d for d in result.diagnostics if d.is_error or d.level.value == "warning"]
    if shown:
        sys.stderr.write(format_diagnostics(shown, fmt="text", files=result.files))
    return result.policy_set, built.objects


def _render(args: argparse.Namespace) -> int:
    root = Path(args.path)
    if not root.exists():
        print(f"gangops render: {root}: no such file or directory", file=sys.stderr)
        return EXIT_USAGE
    # files named as the reconciler names them (from the repository's top), so the
    # output is what is applied, from whichever directory render runs
    _, objects = _compile_tree(args, root, as_applied=True)
    if objects is None:
        return EXIT_INVALID
    if args.output == "json":
        doc = {"apiVersion": "v1", "kind": "List", "items": objects}
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_yaml_dump(objects))
    return EXIT_OK


def _yaml_dump(objects: Sequence[dict[str, Any]]) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    buf = io.StringIO()
    yaml.dump_all(objects, buf)
    return "---\n" + buf.getvalue() if objects else ""


def _plan(args: argparse.Namespace) -> int:
    from controller.policy.build import build
    from controller.policy.plan import make_plan
    from controller.policy.report import format_plan
    from controller.policy.sources import GitRefError, git_tree

    root = Path(args.path)
    if not root.exists():
        print(f"gangops plan: {root}: no such file or directory", file=sys.stderr)
        return EXIT_USAGE
    if args.cluster:
        return _plan_live(args, root)
    try:
        base_sources, base_resolve, base_sha = git_tree(root, args.base)
    except GitRefError as e:
        print(f"gangops plan: {e}", file=sys.stderr)
        return EXIT_USAGE
    head_set, head_objects = _compile_tree(args, root)
    if head_objects is None:
        print("gangops plan: the working tree's policies are invalid; no plan", file=sys.stderr)
        return EXIT_INVALID
    built = build(
        base_sources,
        root=f"{args.base}:{root}",
        resolve=base_resolve,
        revision=base_sha,
        source_root=root.as_posix(),
        system_namespace=args.system_namespace,
        limits=_limits(args),
    )
    base = built.validation
    base_objects = built.objects or []
    # files there, but no valid policy set (a root new since base has none)
    if built.objects is None and base.files:
        print(
            f"gangops plan: warning: the policies at {args.base} do not validate; "
            "planning as if the cluster held none of them",
            file=sys.stderr,
        )
    plan = make_plan(base_objects, head_objects, base_set=base.policy_set, head_set=head_set)
    sys.stdout.write(format_plan(plan, fmt=args.format, base=args.base, head="working tree"))
    return EXIT_OK


def _plan_live(args: argparse.Namespace, root: Path) -> int:
    from controller.kube.client import RESOURCES, ApiError, connect
    from controller.policy.report import format_plan
    from controller.reconciler.liveplan import LivePlanError, live_plan

    # named as the reconciler names them, or every object would differ by its
    # source-file annotation when run from anywhere but the repository's top
    _, head_objects = _compile_tree(args, root, as_applied=True)
    if head_objects is None:
        print("gangops plan: the working tree's policies are invalid; no plan", file=sys.stderr)
        return EXIT_INVALID
    try:
        kube = connect(args.kubeconfig)
        prune = True
        if args.source:  # a source that does not prune keeps a default it drops
            found = kube.get(RESOURCES["PolicySource"], args.source)
            prune = bool(((found or {}).get("spec") or {}).get("prune", True))
        plan = live_plan(kube, head_objects, source=args.source, prune=prune)
    except (ApiError, LivePlanError, OSError) as e:
        print(f"gangops plan: {e}", file=sys.stderr)
        return EXIT_USAGE
    base = f"cluster {kube.server}"
    sys.stdout.write(format_plan(plan, fmt=args.format, base=base, head="working tree"))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `gangops` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the subcommands' modules load here: a Ctrl-C may come while they do
        parser = _lean_parser(argv[0]) if argv and argv[0] in _LEAN else _parser()
    except KeyboardInterrupt:
        print("gangops: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    args = parser.parse_args(argv)
    # Logging is configured here, once (a second basicConfig would be a no-op); a
    # subcommand's -v/--verbose turns on debug.
    logging.basicConfig(
        stream=sys.stderr,
        format="time=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    logging.getLogger().setLevel(logging.DEBUG if getattr(args, "verbose", False) else logging.INFO)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print(f"gangops {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # The reader went away (`| head -1`): as a program killed by SIGPIPE, quietly;
        # stdout goes to /dev/null so that flushing it at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
