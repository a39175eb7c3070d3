"""Where the data gangops reads but does not ship lives: public traces and recorded GPU
telemetry, in `../shared/` beside the checkout unless an environment variable says
otherwise. Never copied into the project."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TELEMETRY_ENV", "TRACES_ENV", "shared_dir", "telemetry_dir", "traces_dir"]

TRACES_ENV = "GANGOPS_TRACES"
TELEMETRY_ENV = "GANGOPS_TELEMETRY"


def shared_dir() -> Path:
    """`../shared` beside the checkout."""
    return Path(__file__).resolve().parents[1].parent / "shared"


def traces_dir() -> Path:
    """The public GPU-cluster traces: $GANGOPS_TRACES, else ../shared/traces."""
    return Path(os.environ.get(TRACES_ENV) or shared_dir() / "traces")


def telemetry_dir() -> Path:
    """Recorded per-container GPU telemetry: $GANGOPS_TELEMETRY, else
    ../shared/telemetry/genai2026."""
    return Path(os.environ.get(TELEMETRY_ENV) or shared_dir() / "telemetry" / "genai2026")
