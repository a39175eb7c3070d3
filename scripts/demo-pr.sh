#!/usr/bin/env bash
# `make demo-pr`: the offline pull-request workflow on the example policies in policies/:
# validate, render, then plan a change against a Git base (in a scratch copy,
# so the checkout is never touched).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
gangops=("$repo/.venv/bin/gangops")

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "gangops validate policies/"
"${gangops[@]}" validate policies/

step "gangops render policies/ (the first objects; $("${gangops[@]}" render policies/ | grep -c '^kind:') in all)"
"${gangops[@]}" render policies/ | head -n 40
echo "..."

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -r policies "$scratch/policies"
mkdir -p "$scratch/clusters/local" && cp clusters/local/cluster.yaml "$scratch/clusters/local/"
cd "$scratch"
git init -q -b main
git add -A
git -c user.name=demo -c user.email=demo@example.invalid commit -qm "policies as merged"

step "A pull request: raise tier 'high', cut nlp's guarantee, add a project, drop a namespace"
# tier values are immutable in Kubernetes: the plan must say delete+recreate
sed -i 's/^  value: 100000$/  value: 150000/' policies/tiers.yaml
sed -i 's/guaranteed: {gpu: 32, cpu: "256", memory: 2Ti}/guaranteed: {gpu: 24, cpu: "256", memory: 2Ti}/' policies/projects/nlp.yaml
sed -i 's/namespaces: \[research, research-sandbox\]/namespaces: [research]/' policies/projects/research.yaml
cat > policies/projects/robotics.yaml <<'YAML'
apiVersion: policy.ai.operator/v1
kind: Project
metadata:
  name: robotics
spec:
  namespaces: [robotics]
  quota:
    guaranteed: {gpu: 4}
    max: {gpu: 16}
  jobs:
    tiers: [normal, batch]
YAML
git --no-pager diff --stat

step "gangops validate policies/ --format github"
"${gangops[@]}" validate policies/ --format github

step "gangops plan policies/ --base main"
"${gangops[@]}" plan policies/ --base main

step "gangops plan policies/ --base main --format markdown (the pull-request comment)"
"${gangops[@]}" plan policies/ --base main --format markdown

step "gangops simulate: the same scheduling core on a generated workload, gangops vs static islands"
"${gangops[@]}" simulate --cluster "$repo/clusters/local/cluster.yaml" --policies "$repo/policies" \
    --generate 400 --scheduler gangops static --report "$repo/out/demo-sim" --no-progress
echo "(report.json and PNG plots in out/demo-sim/)"

step "A broken change is caught at file:line"
sed -i 's/tiers: \[normal, batch\]/tiers: [normal, batchh]/' policies/projects/robotics.yaml
set +e
"${gangops[@]}" validate policies/
rc=$?
set -e
echo "(exit status $rc)"
[[ $rc -eq 1 ]]
