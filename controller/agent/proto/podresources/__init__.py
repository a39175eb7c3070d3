"""The kubelet pod-resources API (generated; see controller/agent/proto/__init__.py)."""
