"""gangops: a GitOps policy controller and gang scheduler for shared Kubernetes GPU clusters."""

__version__ = "0.1.0"
