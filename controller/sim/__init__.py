"""The simulator: public GPU traces replayed through the real scheduling core.

`traces` loads clusters and traces, `tenants` maps traces onto the projects
of a policy set, `generator` makes seeded synthetic workloads, `engine` is
the discrete-event simulation (a virtual clock driving `cycle.schedule`),
`schedulers` the compared schedulers (gangops and the baselines, whose
per-pod placement lives in `baselines`), `report` and `plot` the output, and
`cli` the `gangops simulate` command.
"""
