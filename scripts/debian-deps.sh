#!/usr/bin/env bash
# Install the Debian packages the test suite runs for real, when they are missing:
#   lua5.4          runs the Argo CD health script shipped in clusters/argocd/
#   openssh-server  sshd on loopback, for the reconciler's SSH-auth tests
#                   (tests/integration/test_reconciler_auth.py; brings ssh, ssh-keygen)
#   prometheus      the real Prometheus (and promtool) beside the dev cluster
#                   (controller/devcluster/prometheus.py, `dev-cluster up --prometheus`)
#                   and the recording-rule tests (tests/unit/prometheus/)
#   prometheus-alertmanager  for the alerting rules the chart will ship (where systemd
#                   runs, Debian starts both as services on their usual ports; ours use
#                   free loopback ports, so they do not collide)
# Needs root (or sudo). Without either, it says what is missing and carries on:
# the tests that need a package then skip, printing the install command.
set -uo pipefail
want=(lua5.4 openssh-server prometheus prometheus-alertmanager)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -eq 0 ]]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo -n); else
  echo "debian-deps: missing ${missing[*]}; install them (apt-get install ${missing[*]}) to run every test" >&2
  exit 0
fi
echo "debian-deps: installing ${missing[*]}" >&2
if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
  "${sudo[@]}" apt-get update -qq >/dev/null && \
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || echo "debian-deps: could not install ${missing[*]}; the tests that need them will skip" >&2
fi
exit 0
