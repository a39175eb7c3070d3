"""The node agent: GPU telemetry and its attribution to pods (issue 12)."""
