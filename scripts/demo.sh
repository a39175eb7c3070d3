#!/usr/bin/env bash
# `make demo`: gangops itself, on the local control plane, narrated step by step.
#
#   1. a real Kubernetes control plane (`gangops dev-cluster up`, the nodes of
#      clusters/local/cluster.yaml) and the CRDs (`gangops install-crds`);
#   2. a policy repository (a real Git repository holding policies/, served by
#      `git daemon` on loopback), a PolicySource for it, and `gangops run`
#      reconciling it: PriorityClasses, Namespaces, ResourceQuotas appear;
#   3. TrainingJobs applied by their users (kubectl as alice, bob, carol, frank):
#      gangs placed whole, an elastic job grown onto idle GPUs and shrunk back
#      when a high-tier job needs them, a job waiting over its user's quota (and
#      why);
#   4. a policy pull request merged (a commit pushed, the push webhook): the
#      new quota applied in seconds, the waiting job starts by preempting the
#      batch sweeps;
#   5. a broken commit pushed: nothing of it applied, the PolicySource Stalled
#      with file:line, the last good state kept;
#   6. live GPU telemetry: node agents replaying recorded GPU telemetry on every
#      node, scraped by a real Prometheus; the pods' GPUs in PromQL, a scripted XID
#      taking a GPU out of service (Node condition and annotation), the scheduler
#      never offering it.
#
# Everything lives in a temporary directory and is stopped and deleted at the
# end, also on Ctrl-C. GANGOPS_DEMO_KEEP=1 leaves the cluster up for poking
# around (the last lines say how to reach it and how to stop it).
# The offline pull-request workflow (validate, render, plan) is `make demo-pr`.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
demo="$repo/scripts/demo"
gangops="$repo/.venv/bin/gangops"
python="$repo/.venv/bin/python"
started=$SECONDS

bold=$'\033[1m' dim=$'\033[2m' off=$'\033[0m'
if [[ ! -t 1 ]]; then bold="" dim="" off=""; fi
step() { printf '\n%s== %s%s  %s(%ds)%s\n' "$bold" "$*" "$off" "$dim" $((SECONDS - started)) "$off"; }
say() { printf '%s\n' "$*" | fold -s -w 100; }
# Show a command as a user would type it, then run it.
# (The command line goes to stderr, so `show cmd | filter` filters only the output.)
show() {
  local line="$*"
  line="${line//$kubectl_bin/kubectl}" line="${line//$gangops/gangops}"
  line="${line//$work\//}" line="${line//$repo\//}"
  printf '%s$ %s%s\n' "$dim" "$line" "$off" >&2
  "$@"
}
fail() {
  printf '\ndemo FAILED: %s\n' "$*" >&2
  if [[ -f "${work:-}/admin.kubeconfig" ]]; then
    printf -- '--- the TrainingJobs: phase reason GPUs: message\n' >&2
    k get tj -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.phase} {.status.reason} {.status.gpus}: {.status.message}{"\n"}{end}' >&2 || true
    printf -- '--- the TrainingJobs: attempts refusals notBefore\n' >&2
    k get tj -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.attempts} {.status.refusals} {.status.notBefore}{"\n"}{end}' >&2 || true
    printf -- '--- the ResourceQuotas (used / hard GPUs):\n' >&2
    k get resourcequota -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.used.requests\.nvidia\.com/gpu} / {.status.hard.requests\.nvidia\.com/gpu}{"\n"}{end}' >&2 || true
    printf -- '--- the worker pods: attempt phase deleting\n' >&2
    k get pods -A -l ai.operator/job-name -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.labels.ai\.operator/attempt} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}' >&2 || true
    printf -- '--- the Warning Events:\n' >&2
    k get events -A --field-selector type=Warning -o jsonpath='{range .items[*]}{.involvedObject.namespace}/{.involvedObject.name} {.reason}: {.message}{"\n"}{end}' 2>/dev/null | tail -n 20 >&2 || true
  fi
  if [[ -f "${work:-}/gangops-run.log" ]]; then
    printf -- '--- every launch gangops run refused, in the API server'"'"'s words:\n' >&2
    grep -E 'launch refused|pod create refused' "$work/gangops-run.log" | tail -n 10 >&2 || true
    printf -- '--- the last warnings and errors of gangops run:\n' >&2
    grep -E 'level=(WARNING|ERROR)' "$work/gangops-run.log" | tail -n 15 >&2 || true
    printf -- '--- the last lines of gangops run:\n' >&2
    tail -n 30 "$work/gangops-run.log" >&2
  fi
  exit 1
}
# wait_for "what" SECONDS command...: poll every 0.5 s until the command succeeds.
wait_for() {
  local what="$1" timeout="$2" t0=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    (( SECONDS - t0 < timeout )) || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
  printf '%s   ... %s (%ds)%s\n' "$dim" "$what" $((SECONDS - t0)) "$off"
}
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- set-up and clean-up
bin="$(bash clusters/local/build.sh 2>/dev/null)" || fail "the control plane could not be built: bash clusters/local/build.sh"
kubectl_bin="$bin/kubectl"
work="$(mktemp -d -t gangops-demo.XXXXXX)"
state="$work/dev-cluster.json"
say "${dim}(working directory $work)${off}"
# The narrated steps run as a child of this shell (`demo &`, then `wait`), so Ctrl-C
# always reaches the trap below: a shell waiting for a foreground command that handles
# SIGINT itself (kubectl does) would carry on instead. The processes the steps start
# in the background are listed in $work/pids for the clean-up.
pids_file="$work/pids"
: >"$pids_file"
# stop PID...: SIGTERM, then wait (at most 30 s) until each is gone.
stop() {
  local pid t0=$SECONDS
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null && (( SECONDS - t0 < 30 )); do sleep 0.2; done
  done
}
cleanup() {
  local code=$?
  # Not to be cut short: a second Ctrl-C here (while "stopping the cluster" shows)
  # left the whole cluster running, its state file in a temporary directory.
  trap - EXIT
  trap '' INT TERM HUP
  local pids
  mapfile -t pids <"$pids_file"
  if [[ "${GANGOPS_DEMO_KEEP:-}" == 1 && $code -eq 0 ]]; then
    say ""
    # printf, not say: a command folded at 100 columns pastes as two broken ones
    # %q: paths with spaces paste whole; &&: the state goes only once down worked
    printf 'Left running (GANGOPS_DEMO_KEEP=1). Reach it with:\n  export KUBECONFIG=%q\n  (kubectl is %q)\n' \
      "$work/admin.kubeconfig" "$kubectl_bin"
    printf 'Stop everything with:\n  kill %s; %q dev-cluster down --state %q && rm -rf %q\n' \
      "${pids[*]}" "$gangops" "$state" "$work"
    return
  fi
  (( code == 0 )) || printf 'clean-up (%ds): stopping the demo, gangops run and git-daemon\n' $((SECONDS - started)) >&2
  [[ -n "${body:-}" ]] && { pkill -TERM -P "$body" 2>/dev/null || true; stop "$body"; }
  stop "${pids[@]}"
  (( code == 0 )) || printf 'clean-up (%ds): stopping the cluster (%s dev-cluster down --state %s)\n' \
    $((SECONDS - started)) "$gangops" "$state" >&2
  "$gangops" dev-cluster down --state "$state" >/dev/null 2>&1 || true
  rm -rf "$work"
  (( code == 0 )) && printf '\n%sdemo finished in %ds; everything it started is stopped and deleted%s\n' \
    "$bold" $((SECONDS - started)) "$off"
  exit "$code"
}
trap cleanup EXIT
trap 'printf "\ninterrupted; cleaning up\n" >&2; exit 130' INT TERM

export KUBECACHEDIR="$work/kube-cache"  # kubectl's discovery cache: not in ~/.kube
k() { "$kubectl_bin" --kubeconfig "$work/admin.kubeconfig" "$@"; }
as() { local user="$1"; shift; "$kubectl_bin" --kubeconfig "$users_dir/$user.kubeconfig" "$@"; }
phase() { k get tj -n "$1" "$2" -o jsonpath='{.status.phase}'; }
is_phase() { [[ "$(phase "$1" "$2")" == "$3" ]]; }
gpus_of() { k get tj -n "$1" "$2" -o jsonpath='{.status.gpus}'; }
tj_table() { show "$kubectl_bin" get tj -A -L ai.operator/user --sort-by=.metadata.creationTimestamp; }

demo() {
# ---------------------------------------------------------------- 1. the cluster
step "1. A Kubernetes control plane on this machine: gangops dev-cluster up"
say "etcd, kube-apiserver and kube-controller-manager built from Go modules, plus fake GPU nodes"
say "(clusters/local/cluster.yaml: 8 A100 and 4 H100 nodes of 8 GPUs, 4 tainted T4 nodes of 4),"
say "and --telemetry: a node agent for every node replaying recorded GPU telemetry"
say "(../shared/telemetry), scraped by a real Prometheus (Debian package prometheus)."
faults_start="$work/gpu-faults.start"
printf '%s$ gangops dev-cluster up --detach --telemetry --scenario scripts/demo/gpu-faults.yaml --scenario-start-file gpu-faults.start%s\n' "$dim" "$off"
env_lines="$("$gangops" dev-cluster up --detach --no-progress --telemetry \
  --scenario "$demo/gpu-faults.yaml" --scenario-start-file "$faults_start" \
  --state "$state" 2>"$work/up.log")" \
  || { cat "$work/up.log" >&2; fail "gangops dev-cluster up"; }
kubeconfig="$(sed -n 's/^export KUBECONFIG=//p' <<<"$env_lines")"
prom_url="$(sed -n 's/^export GANGOPS_PROMETHEUS_URL=//p' <<<"$env_lines")"
users_dir="$(dirname "$kubeconfig")"
cp "$kubeconfig" "$work/admin.kubeconfig"
export KUBECONFIG="$work/admin.kubeconfig"
show "$kubectl_bin" get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.clique --no-headers | sed -n 1,4p
echo "... ($(k get nodes --no-headers | wc -l) nodes)"

step "gangops install-crds: the system namespace, the CRDs, the TrainingJob admission policies"
show "$gangops" install-crds | sed 's/^/  /'

# ---------------------------------------------------------------- 2. the policy repository
step "2. The policy repository: policies/ in a Git repository, served by git daemon"
git_root="$work/git"
mkdir -p "$git_root"
git init -q --bare -b main "$git_root/policies.git"
checkout="$work/platform-team"
git clone -q "$git_root/policies.git" "$checkout" 2>/dev/null
cp -r policies "$checkout/policies"
mkdir -p "$checkout/clusters/local" && cp clusters/local/cluster.yaml "$checkout/clusters/local/"
# The example policy protects a job from preemption and growth for 10 minutes after it
# starts; the demo's copy says 10 seconds, so those steps happen while you watch.
sed -i 's/minRuntimeSeconds: 600/minRuntimeSeconds: 10/' "$checkout/policies/cluster-policy.yaml"
say "policies/ as in this checkout (tiers, 5 projects, the cluster policy), except"
say "preemption.minRuntimeSeconds 600 -> 10 so preemption and growth happen within the demo."
gitc() { git -C "$checkout" -c user.name="platform team" -c user.email=platform@example.invalid "$@"; }
gitc add -A && gitc commit -qm "policies: tiers, projects, cluster policy" && gitc push -q origin main
git_port="$(free_port)"
# git-daemon itself, not the `git daemon` wrapper: killing the wrapper would leave it.
"$(git --exec-path)/git-daemon" --reuseaddr --listen=127.0.0.1 --port="$git_port" --base-path="$git_root" \
  --export-all "$git_root" >"$work/git-daemon.log" 2>&1 &
echo "$!" >>"$pids_file"
url="git://127.0.0.1:$git_port/policies.git"
wait_for "git daemon serves $url" 10 git ls-remote "$url"

step "gangops run: the reconciler and the gang scheduler, with a PolicySource for the repository"
secret="$work/webhook-secret"
head -c 24 /dev/urandom | base64 >"$secret"
metrics_port="$(free_port)" webhook_port="$(free_port)"
a100=nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB  # the nodes this gangops places on
run_args=(run --kubeconfig "$work/admin.kubeconfig" --metrics-addr "127.0.0.1:$metrics_port"
  --webhook-addr "127.0.0.1:$webhook_port" --webhook-secret-file "$secret"
  --cache-dir "$work/cache" --grow-interval 10
  --node-selector "$a100" --prometheus-url "$prom_url" --telemetry-interval 5)
printf '%s$ gangops %s%s\n' "$dim" "${run_args[*]/#$work\//}" "$off"
say "(this gangops places on the 8 A100 nodes, 64 GPUs: --node-selector; elastic jobs may"
say "grow every 10 s instead of every 10 minutes: --grow-interval; it reads GPU health and"
say "utilisation from Prometheus every 5 s: --prometheus-url)"
"$gangops" "${run_args[@]}" >"$work/gangops-run.log" 2>&1 &
echo "$!" >>"$pids_file"
cat >"$work/policysource.yaml" <<YAML
apiVersion: policy.ai.operator/v1
kind: PolicySource
metadata:
  name: platform-policies
spec:
  url: $url
  ref: {branch: main}
  path: policies
  interval: 5m        # the push webhook makes changes immediate; polling is the fallback
YAML
show "$kubectl_bin" apply -f "$work/policysource.yaml"
wait_for "PolicySource platform-policies Ready" 60 \
  k wait policysource/platform-policies --for=condition=Ready --timeout=1s
show "$kubectl_bin" get policysource
show "$kubectl_bin" get priorityclasses -l app.kubernetes.io/managed-by=gangops
show "$kubectl_bin" get resourcequota -A -l app.kubernetes.io/managed-by=gangops

# ---------------------------------------------------------------- 3. TrainingJobs
step "3. TrainingJobs, applied by their users"
show "$kubectl_bin" apply -f "$demo/rbac.yaml" | sed 's/^/  /'
say "Tenants may create TrainingJobs in their project's namespaces, not pods: the ai.operator/user"
say "label is filled in by admission (MutatingAdmissionPolicy) with who created the job."

say ""
say "frank (research) and carol (vision) start batch sweeps of 24 and 16 GPUs: tier batch is"
say "preemptible, it soaks up idle GPUs and is the first to go."
# A new CRD reaches the admission policies' type mapping a few seconds after it is
# established; until then creates are refused with 503 ServiceUnavailable.
wait_for "TrainingJob admission ready" 60 as frank create --dry-run=server -f "$demo/sweep.yaml"
show as frank apply -f "$demo/sweep.yaml"
show as carol apply -f "$demo/vit-sweep.yaml"
wait_for "sweep Running" 60 is_phase research sweep Running
wait_for "vit-sweep Running" 60 is_phase vision vit-sweep Running

say ""
say "alice (nlp) applies the seed's bert-training: 8 GPUs (two workers of 4), tier high,"
say "elastic between 4 and 16 GPUs."
show as alice apply -f "$demo/bert-training.yaml"
wait_for "bert-training Running" 60 is_phase nlp bert-training Running
say "placed whole on the tightest domain that holds it (its workers and their nodes):"
show "$kubectl_bin" get pods -n nlp -l ai.operator/job-name=bert-training -o wide --no-headers \
  | awk '{print "  " $1, $7}'
tj_table

step "An elastic job grows onto idle GPUs"
say "16 of the 64 A100 GPUs are idle, 8 of them the reserve kept for tier critical"
say "(policies/cluster-policy.yaml). Nothing waits, so bert-training grows towards its maxGPU."
grown() { [[ "$(gpus_of nlp bert-training)" == 16 ]]; }
wait_for "bert-training grown to 16 GPUs" 60 grown
tj_table

step "... and shrinks back when a job of its tier needs the GPUs"
say "A resize restarts the job from its checkpoint, so grown workers are protected like a new"
say "job for minRuntimeSeconds (10 s here) before anyone may take them back."
# minRuntimeSeconds counts from the decision that restarted the gang (status.admission.
# decidedAt), which a busy machine may make later than the grown pods show up: wait for
# that, not for a fixed time.
past_min_runtime() {
  local at
  at="$(k get tj -n nlp bert-training -o jsonpath='{.status.admission.decidedAt}')"
  [[ -n "$at" ]] && (( $(date +%s) - $(date -d "$at" +%s) >= 12 ))
}
wait_for "bert-training's grown workers past minRuntimeSeconds" 60 past_min_runtime
say "bob (nlp) applies gpt-pretrain, 8 GPUs, tier high. No GPU is free outside the reserve:"
say "gangops takes back the workers bert-training grew by, instead of evicting anyone."
show as bob apply -f "$demo/gpt-pretrain.yaml"
wait_for "gpt-pretrain Running" 60 is_phase nlp gpt-pretrain Running
# at 8 GPUs and running: a refused relaunch also reads 8 (its gangSize) while it waits
shrunk() { [[ "$(gpus_of nlp bert-training)" == 8 ]] && is_phase nlp bert-training Running; }
wait_for "bert-training back at 8 GPUs" 30 shrunk
is_phase research sweep Running && is_phase vision vit-sweep Running \
  || fail "gpt-pretrain should have taken bert-training's grown workers, not evicted a sweep"
tj_table

step "A job over its user's quota waits, and says why"
say "alice applies llama-ft, 32 GPUs, tier high, in nlp-dev. alice may hold 32 GPUs in"
say "project nlp (policies/projects/nlp.yaml), and bert-training holds 8 of them (it could"
say "shrink to 4, still too many)."
show as alice apply -f "$demo/llama-ft.yaml"
waits() { [[ -n "$(k get tj -n nlp-dev llama-ft -o jsonpath='{.status.reason}')" ]]; }
wait_for "llama-ft to say why it waits" 60 waits
why="$(k get tj -n nlp-dev llama-ft -o jsonpath='{.status.phase} {.status.reason}: {.status.message}')"
[[ "$why" == "Queued Quota: "* ]] || fail "llama-ft should wait on alice's quota; it is $why"
show as alice get tj -n nlp-dev -o wide
show "$gangops" explain nlp-dev/llama-ft --kubeconfig "$work/admin.kubeconfig" \
  --node-selector "$a100" | sed 's/^/  /'

# ---------------------------------------------------------------- 4. a pull request merged
step "4. A policy pull request merged: alice's max 32 -> 48 GPUs"
sed -i 's/- {name: alice, guaranteed: {gpu: 8}, max: {gpu: 32}}/- {name: alice, guaranteed: {gpu: 8}, max: {gpu: 48}}/' \
  "$checkout/policies/projects/nlp.yaml"
show git -C "$checkout" --no-pager diff
show "$gangops" validate "$checkout/policies"
gitc commit -qam "nlp: alice may hold 48 GPUs (llama-ft)"
show git -C "$checkout" push -q origin main
revision="$(git -C "$checkout" rev-parse HEAD)"
# The forge's push webhook, signed as GitHub signs it (HMAC-SHA256 of the body).
push_hook() {
  local body
  body="$(printf '{"ref":"refs/heads/main","after":"%s","repository":{"clone_url":"%s"}}' "$revision" "$url")"
  printf '%s$ curl -X POST .../hook/platform-policies (X-GitHub-Event: push, X-Hub-Signature-256)%s\n' "$dim" "$off"
  curl -sS -X POST "http://127.0.0.1:$webhook_port/hook/platform-policies" \
    -H "Content-Type: application/json" -H "X-GitHub-Event: push" \
    -H "X-Hub-Signature-256: sha256=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$(cat "$secret")" -r | cut -d' ' -f1)" \
    --data-binary "$body" | sed 's/^/  /'
}
t_push=$SECONDS
push_hook
applied() { [[ "$(k get policysource platform-policies -o jsonpath='{.status.lastAppliedRevision}')" == *"$revision"* ]]; }
wait_for "revision ${revision:0:7} applied" 30 applied
say "applied $((SECONDS - t_push)) s after the push. llama-ft now fits alice's quota, but the"
say "A100s are full: as a high-tier job it preempts the preemptible batch sweeps (the smallest"
say "set of lower-tier gangs that makes room), which wait in the queue for GPUs to free up."
wait_for "llama-ft Running" 90 is_phase nlp-dev llama-ft Running
if is_phase research sweep Running && is_phase vision vit-sweep Running; then
  fail "llama-ft runs, yet neither batch sweep was preempted"
fi
tj_table
show "$kubectl_bin" describe tj -n research sweep | sed -n '/^Events:/,$p'

# ---------------------------------------------------------------- 5. a broken commit
step "5. A broken commit pushed: nothing of it is applied"
sed -i 's/tiers: \[high, normal, batch\]/tiers: [high, normal, bacth]/' "$checkout/policies/projects/nlp.yaml"
sed -i 's/max: {gpu: 48}}/max: {gpu: 8}}/' "$checkout/policies/projects/nlp.yaml"
gitc commit -qam "nlp: typo in a tier, and alice's max cut to 8"
show git -C "$checkout" push -q origin main
revision="$(git -C "$checkout" rev-parse HEAD)"
push_hook
stalled() { [[ "$(k get policysource platform-policies -o jsonpath='{.status.conditions[?(@.type=="Stalled")].status}')" == True ]]; }
wait_for "PolicySource Stalled" 30 stalled
show "$kubectl_bin" get policysource platform-policies \
  -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' | cut -c1-220
say "The last good revision stays applied: alice's jobs keep running, her quota is still 48."
alice_max="$(show "$kubectl_bin" get configmap -n gangops-system gangops-scheduling-policy \
  -o jsonpath='{.data.policy\.json}' | "$python" -c \
  'import json,sys; p=json.load(sys.stdin); print([m for q in p["projects"] if q["name"]=="nlp" for m in q["users"]["members"] if m["name"]=="alice"][0]["max"]["gpu"])')"
say "  alice max: $alice_max GPUs"
[[ "$alice_max" == 48 ]] || fail "the broken commit changed alice's max to $alice_max"
is_phase nlp-dev llama-ft Running || fail "llama-ft stopped running after the broken commit"
tj_table

# ---------------------------------------------------------------- 6. live GPU telemetry
step "6. Live GPU telemetry: node agents, a real Prometheus, GPU health"
# Prints the query, then each result as the Python in $2 formats it; no result for 15 s
# fails the demo (a claim with nothing under it). Asked again each second meanwhile: what
# the agent just wrote on the Node reaches Prometheus at its next scrape.
promql() {
  printf '%s$ PromQL: %s%s\n' "$dim" "$1" "$off"
  local out tries=0
  while :; do
    out="$(curl -sS -G "$prom_url/api/v1/query" --data-urlencode "query=$1" \
      | "$python" -c "$2")" || out=""
    [[ -n "$out" ]] && break
    (( ++tries < 15 )) || fail "PromQL $1: no result in 15 s"
    sleep 1
  done
  printf '%s\n' "$out"
}
say "Every node's agent serves dcgm-exporter's metrics with the pod that holds each GPU (the"
say "kubelet's pod-resources API, served by the fake kubelet). bert-training's GPUs:"
promql 'DCGM_FI_DEV_GPU_UTIL{namespace="nlp",pod=~"bert-training-.*"}' '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    m = r["metric"]
    print("  %-28s %s GPU %s %s: %s %% busy" % (m["pod"], m["Hostname"], m["gpu"], m["modelName"], r["value"][1]))'
say ""
say "The scripted fault: GPU 2 of a100-007 reports XID 48 (a double-bit ECC error; the GPU"
say "needs a reset). The agent takes it out of service, on the Node and in Prometheus:"
show touch "$faults_start"
bad_gpu() { [[ "$(k get node a100-007 -o jsonpath='{.metadata.annotations.gangops\.ai/unhealthy-gpus}')" == 2 ]]; }
wait_for "a100-007's GPU 2 out of service" 90 bad_gpu
show "$kubectl_bin" get node a100-007 \
  -o jsonpath='{.metadata.annotations.gangops\.ai/unhealthy-gpus}{"\n"}{range .status.conditions[?(@.type=="GPUProblem")]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' \
  | sed 's/^/  /'
promql 'DCGM_EXP_XID_ERRORS_COUNT > 0' '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    m = r["metric"]
    print("  %s GPU %s: XID %s x%s" % (m["Hostname"], m["gpu"], m["xid"], r["value"][1]))'
say ""
holder="$(curl -sS -G "$prom_url/api/v1/query" \
  --data-urlencode 'query=DCGM_FI_DEV_GPU_UTIL{Hostname="a100-007",gpu="2"}' | "$python" -c \
  'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["metric"].get("pod", "") if r else "")')"
if [[ -n "$holder" ]]; then
  say "The GPU was in use: $holder goes on running on it here. Stopping or checkpointing such a job is the protective action an Alertmanager alert asks for (docs/alerts.md), which this demo does not run."
fi
say "The scheduler never offers the bad GPU to a gang; explain says so, with the telemetry it"
say "reads:"
show "$gangops" explain research/sweep --kubeconfig "$work/admin.kubeconfig" \
  --node-selector "$a100" --prometheus-url "$prom_url" | sed 's/^/  /'
}
demo &
body=$!
wait "$body"
