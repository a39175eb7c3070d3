"""The policy language: load, validate and compile quota and priority policies.

The pipeline is `loader` (YAML with file:line provenance) -> `validate`
(JSON Schema, then the semantic `rules` over the typed `model`) -> `compiler`
(pure: a valid `PolicySet` to the desired Kubernetes objects) -> `plan`
(the difference between two desired states). Every user-caused problem comes
out as a `Diagnostic`, never as a traceback.
"""
