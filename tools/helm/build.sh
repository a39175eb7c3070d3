#!/usr/bin/env bash
# Build `helm` from its Go module (helm.sh/helm/v4, the version in go.mod), once,
# into a cache keyed by that version: ${XDG_CACHE_HOME:-~/.cache}/gangops/helm-<version>/bin.
# Rebuilt only when go.mod or go.sum change. The chart's tests call this (through
# tests/unit/chart/helm.py) so `make test` needs nothing but Go on a fresh machine.
# Prints the binary's path on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "helm.sh/helm/v4" {print $2; exit}' "$here/go.mod")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gangops/helm-${version}"
bin="$cache/bin"
mkdir -p "$bin"
# One build at a time per cache (two test runs may start together).
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  flock 9
fi
key="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
if [[ -x "$bin/helm" && -f "$bin/.helm.key" && "$(cat "$bin/.helm.key")" == "$key" ]]; then
  echo "$bin/helm"
  exit 0
fi
command -v go >/dev/null || {
  echo "build.sh: Go is required to build helm ${version} (https://go.dev/doc/install)" >&2
  exit 2
}
jobs="${GANGOPS_GO_BUILD_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
t0=$(date +%s)
echo "build.sh: building helm ${version} from its Go module (-p ${jobs}; minutes the first time) ..." >&2
(cd "$here" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -p "$jobs" -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${version} \
              -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    -o "$bin/helm.tmp" helm.sh/helm/v4/cmd/helm)
mv "$bin/helm.tmp" "$bin/helm"
echo "$key" > "$bin/.helm.key"
echo "build.sh: built helm ${version} in $(( $(date +%s) - t0 ))s; ${bin}/helm" >&2
echo "$bin/helm"
