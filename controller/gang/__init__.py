"""The cluster-facing gang scheduler: TrainingJobs in, whole gangs bound to nodes out.

Route, decide, write. `controller` routes (informers whose events wake the
loop), runs the scheduling step and assumes each decision until its write
lands; `lifecycle` decides (pure): `plan` reads what each recorded decision
needs next into the step's `Agenda`, `decide` adds the snapshot and the
scheduling cycle (`controller.scheduler.cycle`), and each job's whole `Write`
comes from `action_write` / `cycle_writes`; `binder` writes a decided `Write`
(record first, then pods) and decides nothing. `view` reads the API objects
into the pure core's values (`Memo` keeps them from one step to the next);
`record` is the decision written on each TrainingJob before anything else
happens; `cli` is `gangops explain` (a dry-run step for one job, the account
written by `controller.scheduler.explain`); `metrics` its Prometheus figures.

Words: a *step* is one pass of the controller's loop (read the caches,
decide, hand out the writes); the *cycle* inside it is the pure core's
`schedule` over the queue and the snapshot; an *explanation* is the account
of one job in a cycle.
"""
