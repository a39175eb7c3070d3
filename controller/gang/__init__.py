"""The cluster-facing gang scheduler: TrainingJobs in, whole gangs bound to nodes out.

Route, decide, write. `controller` routes (informers whose events wake the
loop), runs the scheduling step and assumes each decision until its write
lands; `lifecycle` decides (pure): what each recorded decision needs next,
the step's snapshot and cycle, and each job's whole `Write`; `binder` writes
a decided `Write` (record first, then pods) and decides nothing. `view`
reads the API objects into the pure core's values; `record` is the decision
written on each TrainingJob before anything else happens; `explain` is
`gangops explain`'s dry run; `metrics` its Prometheus figures.
"""
