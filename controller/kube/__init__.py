"""The one package that talks to the API server.

`client.KubeApi` is the seam every controller takes, and `client.Kube` its
one implementation (raw JSON, server-side apply with a required field
manager, a write fence); `informer.Informer` (list-then-watch cache),
`leader.LeaseElector` (Lease-based leader election), `events.EventRecorder`,
`crds` (CRDs generated from the JSON Schemas) and `clock` (injected time).
Nothing outside this package imports `kubernetes`.
"""
