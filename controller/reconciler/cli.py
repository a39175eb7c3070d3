"""`gangops install-crds`: the CRDs generated from schemas/, into a cluster or a directory.

The Helm chart ships the same objects (`charts/gangops/files/crds/` and
`files/admission/`, written by `--output-dir charts/gangops/files`, which its
templates read); this command is for clusters installed without Helm and for
regenerating the chart's copies after a schema or policy change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE

__all__ = ["add_subcommand"]


_NOT_SERVED = (
    "the cluster does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1beta1; "
    "enable the MutatingAdmissionPolicy feature gate and --runtime-config="
    "admissionregistration.k8s.io/v1beta1=true on the API server)"
)


def _install_crds(args: argparse.Namespace) -> int:
    from controller.jobs.admission import admission_objects, mutating_objects
    from controller.kube.client import FIELD_MANAGER, ApiError, connect
    from controller.kube.crds import (
        crd_file_name,
        generate_crds,
        install,
        render_yaml,
        render_yaml_stream,
    )
    from controller.policy.validate import schema_dir

    crds = generate_crds(schema_dir())
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": args.system_namespace},
    }
    if args.output_dir is not None:
        files = {f"crds/{crd_file_name(c)}": render_yaml(c) for c in crds}
        files["admission/validating.yaml"] = render_yaml_stream(admission_objects())
        files["admission/mutating.yaml"] = render_yaml_stream(mutating_objects())
        for name, text in files.items():
            path = Path(args.output_dir) / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            except OSError as e:
                print(f"gangops install-crds: --output-dir: {e}", file=sys.stderr)
                return 2
            print(f"wrote {path}")
        return 0
    if args.print:
        docs = [namespace, *crds, *admission_objects()]
        if args.mutating_policy == "on":
            docs += mutating_objects()
        sys.stdout.write("".join("---\n" + render_yaml(c) for c in docs))
        return 0
    applied = []
    try:
        kube = connect(args.kubeconfig)
        # The controller's own namespace (its Lease, the policy ConfigMap, Git secrets):
        # `gangops run` refuses to start without it.
        kube.apply(namespace, field_manager=FIELD_MANAGER)
        install(kube, crds, timeout_s=args.timeout)
        for obj in admission_objects():
            kube.apply(obj, field_manager=FIELD_MANAGER)
            applied.append(obj)
        if args.mutating_policy != "off":
            try:
                for obj in mutating_objects():
                    kube.apply(obj, field_manager=FIELD_MANAGER)
                    applied.append(obj)
            except ApiError as e:
                if e.status != 404:
                    raise
                if args.mutating_policy == "on":
                    print(f"gangops install-crds: {_NOT_SERVED}", file=sys.stderr)
                    return 1
                print(
                    f"note: {_NOT_SERVED}; TrainingJob authors set the ai.operator/user label "
                    "themselves (the validating policy checks it)",
                    file=sys.stderr,
                )
    except (ApiError, TimeoutError) as e:
        print(f"gangops install-crds: {e}", file=sys.stderr)
        return 1
    print(f"namespace/{args.system_namespace} applied")
    for crd in crds:
        print(f"customresourcedefinition/{crd['metadata']['name']} established")
    for obj in applied:
        print(f"{obj['kind'].lower()}/{obj['metadata']['name']} applied")
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `gangops install-crds`."""
    p = subparsers.add_parser(
        "install-crds",
        help="install the gangops system namespace, CRDs (PolicySource, the policy kinds, "
        "TrainingJob) and the TrainingJob admission policy",
        description="Create the controller's namespace (--system-namespace), generate the "
        "CustomResourceDefinitions from the JSON Schemas and apply "
        "them (server-side, field manager gangops), waiting until they are established, "
        "then the ValidatingAdmissionPolicy that charges a TrainingJob to its creator "
        "and, where the cluster serves it, the MutatingAdmissionPolicy that fills the "
        "creator in; or write the CRDs to a directory, or print everything.",
    )
    p.add_argument(
        "--mutating-policy",
        choices=("auto", "on", "off"),
        default="auto",
        help="the MutatingAdmissionPolicy that sets a new TrainingJob's ai.operator/user "
        "label to its creator when missing: auto installs it where the API is served "
        "(beta, off by default in Kubernetes 1.34-1.35), on requires it, off skips it; "
        "with --print, only on prints it (default auto)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ...)")
    p.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        help="the controller's namespace, created here (default %(default)s; give `gangops run`"
        " the same)",
    )
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--output-dir",
        metavar="DIR",
        help="write DIR/crds/<group>_<plural>.yaml per CRD and DIR/admission/{validating,"
        "mutating}.yaml instead (the chart's copies: --output-dir charts/gangops/files)",
    )
    where.add_argument("--print", action="store_true", help="print the CRDs as YAML instead")
    p.set_defaults(func=_install_crds)
