"""The kubelet pod-resources API, v1 (generated; see controller/agent/proto/__init__.py)."""
