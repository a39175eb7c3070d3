"""The diagnostic registry and its helpers."""

from __future__ import annotations

import re

import pytest

from controller.policy.diagnostics import CODES, Diagnostic, Severity, did_you_mean, sort_key


def test_codes_are_well_formed() -> None:
    for key, code in CODES.items():
        assert key == code.id and re.fullmatch(r"GP[1-3]\d\d", code.id)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", code.name)
        assert code.doc.endswith(".")
    assert len({c.name for c in CODES.values()}) == len(CODES)


def test_only_registered_codes() -> None:
    with pytest.raises(ValueError, match="unregistered diagnostic code GP999"):
        Diagnostic("GP999", "x", "f")


def test_severity_defaults_to_the_codes_and_can_be_overridden() -> None:
    assert Diagnostic("GP315", "x", "f").level is Severity.WARNING
    assert not Diagnostic("GP315", "x", "f").is_error
    assert Diagnostic("GP315", "x", "f", severity=Severity.ERROR).is_error
    assert Diagnostic("GP101", "x", "f").is_error


def test_sort_key_orders_by_place_then_code() -> None:
    diags = [
        Diagnostic("GP202", "b", "b.yaml", 1, 1),
        Diagnostic("GP201", "z", "a.yaml", 10, 1),
        Diagnostic("GP202", "a", "a.yaml", 2, 5),
        Diagnostic("GP201", "a", "a.yaml", 2, 5),
        Diagnostic("GP113", "a", "a.yaml"),
    ]
    assert [(d.file, d.line, d.code) for d in sorted(diags, key=sort_key)] == [
        ("a.yaml", 0, "GP113"),
        ("a.yaml", 2, "GP201"),
        ("a.yaml", 2, "GP202"),
        ("a.yaml", 10, "GP201"),
        ("b.yaml", 1, "GP202"),
    ]


@pytest.mark.parametrize(
    ("word", "choices", "hint"),
    [
        ("namespace", ["namespaces", "quota"], " (did you mean 'namespaces'?)"),
        ("maxgpu", ["maxGPU", "tiers"], " (did you mean 'maxGPU'?)"),
        ("MAXGPU", ["maxGPU", "tiers"], " (did you mean 'maxGPU'?)"),
        ("zzz", ["maxGPU", "tiers"], ""),
        ("x", [], ""),
    ],
)
def test_did_you_mean(word: str, choices: list[str], hint: str) -> None:
    assert did_you_mean(word, choices) == hint
