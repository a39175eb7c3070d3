"""Benchmarks with committed thresholds, run by `make bench` (never by `make test`)."""
