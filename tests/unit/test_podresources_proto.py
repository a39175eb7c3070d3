"""The committed code generated from the pod-resources api.proto is what grpcio-tools
generates from it now: regenerated into a temporary directory, byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("controller/agent/proto/podresources/v1/api.proto")
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
# The command in controller/agent/proto/__init__.py, run from the repository root.
PROTOC = ["-I", ".", "--python_out=.", "--pyi_out=.", "--grpc_python_out=.", str(PROTO)]


def test_generated_code_is_in_sync_with_the_proto(tmp_path: Path) -> None:
    (tmp_path / PROTO.parent).mkdir(parents=True)
    shutil.copyfile(ROOT / PROTO, tmp_path / PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", *PROTOC], cwd=tmp_path, check=True)
    stale = [
        name
        for name in GENERATED
        if (tmp_path / PROTO.parent / name).read_bytes()
        != (ROOT / PROTO.parent / name).read_bytes()
    ]
    assert not stale, (
        f"{', '.join(stale)} in {PROTO.parent} differ from what grpcio-tools generates from"
        f" {PROTO.name}; regenerate them as controller/agent/proto/__init__.py says"
    )
