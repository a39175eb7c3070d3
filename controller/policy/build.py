"""Validate, then compile: the one way from policy files to desired objects.

The Git source and the custom-resource source of the reconciler, `gangops
render` and `gangops plan`, and the simulator all read a policy set the same
way: `validate_sources` (load, schema, semantic rules), and only when it has
no errors, `compile_policy_set`. Pure apart from reading the sources given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from controller.policy.compiler import compile_policy_set
from controller.policy.diagnostics import Diagnostic
from controller.policy.loader import DEFAULT_LIMITS, Limits, Source
from controller.policy.validate import Resolver, ValidationResult, validate_sources
from controller.scheduler.policy import DEFAULT_SYSTEM_NAMESPACE

__all__ = ["Built", "build"]


@dataclass(frozen=True)
class Built:
    """A policy set validated and, when valid, compiled."""

    validation: ValidationResult
    objects: list[dict[str, Any]] | None
    """The desired objects in apply order; None when the set has errors."""

    @property
    def errors(self) -> list[Diagnostic]:
        """The diagnostics that kept the set from compiling."""
        return [d for d in self.validation.diagnostics if d.is_error]


def build(
    sources: Iterable[Source],
    *,
    root: str,
    resolve: Resolver,
    revision: str | Callable[[], str],
    source_root: str | None = None,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
    limits: Limits = DEFAULT_LIMITS,
) -> Built:
    """Validate `sources` (`root` labels set-wide problems) and compile a valid set
    at `revision` (or what calling it returns: it is only asked for a valid set);
    `source_root` (default `root`) names the policy root in the
    objects' annotations."""
    result = validate_sources(
        sources, root=root, resolve=resolve, limits=limits, system_namespace=system_namespace
    )
    if result.policy_set is None:
        return Built(result, None)
    objects = compile_policy_set(
        result.policy_set,
        revision=revision if isinstance(revision, str) else revision(),
        source_root=root if source_root is None else source_root,
        system_namespace=system_namespace,
    )
    return Built(result, objects)
