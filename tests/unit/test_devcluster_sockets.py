"""The dev cluster refuses, before starting anything, a data directory so long that a
node's pod-resources socket path would not fit in a unix socket address."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.clusterspec import load_cluster
from controller.devcluster import DEFAULT_CLUSTER_FILE, DevClusterError, Options, start


def test_a_too_long_socket_path_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 100)
    options = Options(
        cluster=load_cluster(DEFAULT_CLUSTER_FILE), data_dir=data_dir, bin_dir=tmp_path
    )
    with pytest.raises(DevClusterError) as err:
        start(options)
    message = str(err.value)
    assert f"{data_dir}/pod-resources/a100-000.sock would be" in message
    assert "more than the 107" in message
    assert not data_dir.exists()
