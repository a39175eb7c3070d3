"""The policy language: load, validate and compile quota and priority policies.

The pipeline is `sources` (where policy files come from: a working tree, a
Git tree, paths) -> `loader` (YAML with file:line provenance) -> `validate`
(JSON Schema, then the semantic `rules` over the typed `model`) -> `compiler`
(pure: a valid `PolicySet` to the desired Kubernetes objects, among them the
compiled scheduling policy whose shape is schemas/schedulingpolicy.schema.json)
-> `plan` (the difference between two desired states). `build` is
validate-then-compile in one, the only one: the reconciler's Git and
custom-resource sources, the CLI and the simulator all call it. Every
user-caused problem comes out as a `Diagnostic` (`diagnostics`, formatted by
`report`), never as a traceback. `validate.check_scheduling_policy` holds any
compiled policy built by hand (the simulator's, the tests') to its schema.
"""
