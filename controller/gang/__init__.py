"""The cluster-facing gang scheduler: TrainingJobs in, whole gangs bound to nodes out.

`view` reads the API objects into the pure core's values; `record` is the
decision written on each TrainingJob before anything else happens;
`lifecycle` says what each recorded decision needs next; `controller` runs
the informers, the scheduling loop and the writers; `explain` is
`gangops explain`'s dry run; `metrics` its Prometheus figures.
"""
