#!/usr/bin/env bash
# The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule), generated
# from its API types module (github.com/prometheus-operator/prometheus-operator/pkg/apis/
# monitoring, the version in go.mod) by controller-gen (sigs.k8s.io/controller-tools,
# the go.mod's tool), as upstream generates them: once, into a cache keyed by go.mod and
# go.sum: ${XDG_CACHE_HOME:-~/.cache}/gangops/monitoring-crds-<version>/. The chart's
# integration tests install them on the local control plane, so the chart's monitors
# and rules are checked by a real API server. Prints the directory on the last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
version="$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit}' "$here/go.mod")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gangops/monitoring-crds-${version}"
mkdir -p "$cache"
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  flock 9
fi
key="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
kinds=(servicemonitors podmonitors prometheusrules)
if [[ -f "$cache/.key" && "$(cat "$cache/.key")" == "$key" ]]; then
  echo "$cache"
  exit 0
fi
command -v go >/dev/null || {
  echo "build.sh: Go is required to generate the Prometheus Operator's CRDs ${version}" >&2
  exit 2
}
jobs="${GANGOPS_GO_BUILD_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
t0=$(date +%s)
echo "build.sh: generating the Prometheus Operator's CRDs ${version} with controller-gen (-p ${jobs}; a minute or two the first time) ..." >&2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && GOFLAGS=-mod=readonly go build -p "$jobs" -trimpath -o "$tmp/controller-gen" \
    sigs.k8s.io/controller-tools/cmd/controller-gen)
# `go list -m` names the module's directory only once it is in the module cache, and
# building controller-gen does not fetch it: download it first (a no-op when cached)
(cd "$here" && GOFLAGS=-mod=readonly go mod download "$module")
src="$(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "$module")"
[[ -n "$src" && -d "$src" ]] || {
  echo "build.sh: ${module} ${version} is not in the Go module cache after go mod download" >&2
  exit 1
}
# controller-gen loads the package from its own module, in the read-only module cache
(cd "$src" && GOFLAGS=-mod=mod "$tmp/controller-gen" crd:crdVersions=v1,allowDangerousTypes=true \
    paths=./v1/... output:crd:dir="$tmp/out")
rm -f "$cache"/*.yaml
for k in "${kinds[@]}"; do
  cp "$tmp/out/monitoring.coreos.com_${k}.yaml" "$cache/"
done
echo "$key" > "$cache/.key"
echo "build.sh: generated ${#kinds[@]} CRDs in $(( $(date +%s) - t0 ))s; ${cache}" >&2
echo "$cache"
