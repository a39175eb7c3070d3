"""End-to-end tests: gangops on a kind cluster (real kubelets, real kube-scheduler)."""
