"""A secret mounted from a file, read again when the file changes.

Kubernetes updates a mounted Secret in place (the kubelet swaps the volume's
`..data` link) without restarting the pod, and the clients that present it
(Alertmanager's `credentials_file`, a forge's webhook) pick the new value up at
once: a value read only at start would refuse them until a restart. `SecretFile`
checks the file's identity (device, inode, size, modification time) on each read,
which costs one `stat`, and reads the bytes again only when it changed. A file
that cannot be read or parsed after a change keeps the last good value, with a
warning, until it can be.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["SecretFile"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class SecretFile(Generic[_T]):
    """`parse(bytes of path)`, kept while the file stays the same. The first read
    happens here and raises (OSError, or `parse`'s ValueError): a secret that
    cannot be read at start is a usage error."""

    def __init__(self, path: str, parse: Callable[[bytes], _T]) -> None:
        self.path = path
        self._parse = parse
        self._seen = self._identity()
        self._value = self._load()

    def _identity(self) -> tuple[int, int, int, int]:
        st = os.stat(self.path)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> _T:
        with open(self.path, "rb") as f:
            return self._parse(f.read())

    def get(self) -> _T:
        """The value as the file holds it now (or the last good one)."""
        try:
            seen = self._identity()
            if seen != self._seen:
                self._value, self._seen = self._load(), seen
                log.info("secret file changed; read again path=%s", self.path)
        except (OSError, ValueError) as e:
            log.warning("secret file unreadable; keeping the last value path=%s error=%r",
                        self.path, str(e))  # fmt: skip
        return self._value
