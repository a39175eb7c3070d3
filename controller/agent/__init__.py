"""The node agent (`gangops agent`): GPU telemetry from NVML with dcgm-exporter's
names, GPU health from XID errors, published as metrics and on the Node.

Rooms:

- `nvml`: the one seam to the GPUs (the `Nvml` Protocol), its real implementation
  over nvidia-ml-py, and what each NVML error means (`classify`);
- `replay`: the same Protocol over recorded telemetry with scripted faults (the dev
  cluster, tests, demo, benchmarks);
- `deadline`: every NVML call under a deadline, without waiting on a hung driver;
- `health` (pure): XID classes and each GPU's health state;
- `fields` (pure): the DCGM metrics exported, and the defaults NVML cannot give;
- `agent`: one sampling round (`Agent.tick`) and XID wait (`Agent.poll_xids`), each
  publishing an immutable `Snapshot`;
- `exposition`: a snapshot as Prometheus text, dcgm-exporter-compatible;
- `podresources`: the kubelet's pod-resources API (which container holds which GPU);
- `node`: GPU health on the Node (condition and annotation);
- `cli`: `gangops agent`, its threads and HTTP endpoints.
"""
