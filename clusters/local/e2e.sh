#!/usr/bin/env bash
# `make e2e`: create a kind cluster from clusters/local/kind.yaml and run tests/e2e
# against it, then delete the cluster (GANGOPS_E2E_KEEP=1 keeps it; an existing
# cluster of the same name is reused and kept).
# Without Docker or kind it says that the end-to-end tests are skipped, and why,
# and exits 0: the integration tests (`make test`) cover the local control plane.
# Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
name="${GANGOPS_E2E_CLUSTER:-gangops-e2e}"

skip() {
  echo "e2e: SKIPPED - $*" >&2
  exit 0
}
command -v docker >/dev/null || skip "docker is not installed; tests/e2e need Docker and kind"
if ! err="$(docker info 2>&1 >/dev/null)"; then
  skip "the Docker engine is not reachable ($(tail -n 1 <<<"$err"))"
fi
command -v kind >/dev/null ||
  skip "kind is not installed (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"

kubeconfig="$(mktemp -t gangops-e2e-kubeconfig.XXXXXX)"
created=0
cleanup() {
  rm -f "$kubeconfig"
  if [[ $created == 1 && "${GANGOPS_E2E_KEEP:-0}" != 1 ]]; then
    kind delete cluster --name "$name"
  fi
}
trap cleanup EXIT
if kind get clusters 2>/dev/null | grep -qx "$name"; then
  echo "e2e: reusing kind cluster $name" >&2
  kind get kubeconfig --name "$name" >"$kubeconfig"
else
  echo "e2e: creating kind cluster $name from $here/kind.yaml" >&2
  created=1
  kind create cluster --name "$name" --config "$here/kind.yaml" --kubeconfig "$kubeconfig" \
    --wait 180s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
GANGOPS_E2E_KUBECONFIG="$kubeconfig" "$repo/.venv/bin/pytest" "$repo/tests/e2e" "$@"
