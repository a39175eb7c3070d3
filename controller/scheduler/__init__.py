"""The gang scheduler's pure core: values in, decisions out, no I/O, no clock.

`policy` parses the compiled scheduling policy (the JSON the compiler writes
into the `gangops-scheduling-policy` ConfigMap, whose name, key and reader,
`SchedulingPolicy.from_configmap`, live there too); `types` holds the nodes,
gangs and decisions; `snapshot` is the mutable in-cycle view of free
capacity and quota usage, with undo; `placement` finds nodes for a gang,
all-or-nothing and topology-aware; `cycle` runs one scheduling cycle (order,
quota, placement, preemption, reservation). The controller, the simulator
and the benchmarks all call `cycle.schedule`; `explain` writes the account
of one job in a finished cycle (what `gangops explain` prints).
"""
