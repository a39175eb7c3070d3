#!/usr/bin/env bash
# Check the node agent on a machine with a real NVIDIA GPU: run `gangops agent` on
# NVML, scrape it, and compare its values with nvidia-smi's (memory used and total,
# utilisation, temperature, power: within 1 % or one unit). Prints both and a verdict.
# Usage: bash scripts/gpu-check.sh   (needs nvidia-smi, Python 3.11+, pip access or .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
if [[ ! -x $py ]]; then
  python3 -m venv /tmp/gpu-check-venv
  /tmp/gpu-check-venv/bin/pip install --quiet nvidia-ml-py 'waitress>=3.0.2' 'ruamel.yaml>=0.18'
  py=/tmp/gpu-check-venv/bin/python
fi
nvidia-smi -L
PYTHONPATH=. $py -m controller.cli agent --listen 127.0.0.1:19499 --node gpu-check \
  --pod-resources-socket '' --publish-node off >/tmp/gpu-check-agent.log 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf http://127.0.0.1:19499/readyz >/dev/null && break; sleep 0.2; done
sleep 2
PYTHONPATH=. $py scripts/gpu_check.py http://127.0.0.1:19499/metrics
echo "--- agent log"; tail -5 /tmp/gpu-check-agent.log
