"""A mounted secret read again when its file changes, the last good value kept
when it cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.secretfile import SecretFile


def _upper(raw: bytes) -> bytes:
    if not raw.strip():
        raise ValueError("empty")
    return raw.strip().upper()


def test_a_change_is_read_again_and_a_broken_file_keeps_the_last_value(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"one\n")
    secret = SecretFile(str(path), _upper)
    assert secret.get() == b"ONE"
    path.write_bytes(b"two-two\n")  # rewritten in place
    assert secret.get() == b"TWO-TWO"
    path.write_bytes(b"\n")  # unparsable
    assert secret.get() == b"TWO-TWO"
    path.unlink()  # gone while the kubelet swaps it
    assert secret.get() == b"TWO-TWO"
    path.write_bytes(b"three\n")
    assert secret.get() == b"THREE"


def test_the_file_is_read_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"one")
    reads: list[bytes] = []
    secret = SecretFile(str(path), lambda raw: reads.append(raw) or raw)
    for _ in range(5):
        secret.get()
    assert reads == [b"one"]
    st = path.stat()
    path.write_bytes(b"two")  # same size: told apart by the modification time
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert secret.get() == b"two" and len(reads) == 2


def test_a_secret_that_cannot_be_read_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        SecretFile(str(tmp_path / "missing"), bytes.strip)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError):
        SecretFile(str(tmp_path / "empty"), _upper)
