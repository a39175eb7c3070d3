#!/usr/bin/env bash
# Build the local control plane's binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, fake-kubelet) from Go modules, once, into a cache keyed by
# the Kubernetes version: ${XDG_CACHE_HOME:-~/.cache}/gangops/k8s-<version>/bin.
# A binary is rebuilt only when go.mod, go.sum or its own cmd/ sources change.
# Prints the cache directory's bin path on the last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gangops/k8s-${version}"
bin="$cache/bin"
mkdir -p "$bin"
# One build at a time per cache (two test runs may start together).
if command -v flock >/dev/null; then
  exec 9>"$cache/.build.lock"
  flock 9
fi
# At most four parallel compile jobs: keep the compiler from starving the machine.
# A progress line every this many seconds while a binary compiles.
every="${GANGOPS_BUILD_PROGRESS_S:-15}"
jobs="${GANGOPS_GO_BUILD_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${version} \
 -X k8s.io/component-base/version.gitMajor=$(echo "${version#v}" | cut -d. -f1) \
 -X k8s.io/component-base/version.gitMinor=$(echo "${version#v}" | cut -d. -f2) \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
start=$(date +%s)
built=0
for dir in "$here"/cmd/*/; do
  name="$(basename "$dir")"
  key="$(cat "$here/go.mod" "$here/go.sum" "$dir"*.go | sha256sum | cut -c1-16)"
  if [[ -x "$bin/$name" && -f "$bin/.$name.key" && "$(cat "$bin/.$name.key")" == "$key" ]]; then
    echo "build.sh: $name is up to date in $bin" >&2
    continue
  fi
  command -v go >/dev/null || {
    echo "build.sh: Go is required to build $name for the local control plane (https://go.dev/doc/install)" >&2
    exit 2
  }
  t0=$(date +%s)
  if [[ ! -f "$cache/.modules.key" || "$(cat "$cache/.modules.key")" != "$(sha256sum < "$here/go.sum")" ]]; then
    echo "build.sh: downloading Go modules (once per go.sum) ..." >&2
    (cd "$here" && GOFLAGS=-mod=readonly go mod download)
    sha256sum < "$here/go.sum" > "$cache/.modules.key"
  fi
  total="$(cd "$here" && GOFLAGS=-mod=readonly go list -deps "./cmd/$name" | wc -l)"
  echo "build.sh: building $name (Kubernetes ${version}, ${total} packages, -p ${jobs}) ..." >&2
  # `go build -v` names each package as it compiles it: count them for a progress
  # line every $every s; anything else it prints (a compile error) passes through.
  (cd "$here" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -v -p "$jobs" -trimpath \
      -ldflags "$ldflags" -o "$bin/$name.tmp" "./cmd/$name" 2>&1) | {
    n=0 last=$SECONDS
    while IFS= read -r line; do
      if [[ "$line" =~ ^[A-Za-z0-9_./~-]+$ ]]; then
        n=$((n + 1))
        if (( SECONDS - last >= every )); then
          last=$SECONDS
          echo "build.sh: $name: $(( n < total ? n : total ))/${total} packages compiled ($(( $(date +%s) - t0 ))s)" >&2
        fi
      else
        echo "$line" >&2
      fi
    done
  }
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$key" > "$bin/.$name.key"
  echo "build.sh: built $name in $(( $(date +%s) - t0 ))s" >&2
  built=$((built + 1))
done
echo "build.sh: ${built} binaries built in $(( $(date +%s) - start ))s; cache ${bin}" >&2
echo "$bin"
