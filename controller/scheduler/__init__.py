"""The gang scheduler's pure core: values in, decisions out, no I/O, no clock.

`policy` parses the compiled scheduling policy (the same JSON the compiler
writes into the `gangops-scheduling-policy` ConfigMap); `types` holds the
nodes, gangs and decisions; `snapshot` is the mutable in-cycle view of free
capacity and quota usage, with undo; `placement` finds nodes for a gang,
all-or-nothing and topology-aware; `cycle` runs one scheduling cycle (order,
quota, placement, preemption, reservation). The controller, the simulator
and the benchmarks all call `cycle.schedule`.
"""
