"""The policy reconciler: each PolicySource's revision (or the policy custom resources) applied.

Route, decide, write, as in the gang wing. `controller` holds the informers,
the routing handlers and the worker, and runs one reconcile at a time per
source from the `queue`; `fetch` resolves a source's ref and reads its files
from Git through the `GitRepos` seam (`git.GitCache` is the real one, bare
clones on disk; unit tests pass an in-memory fake); `crs` reads the policy
custom resources as files, and both build them with `policy.build`
(validate, then compile); `apply` syncs the objects (a pure `plan_sync`,
then dry-run, staged apply, prune); `status` assembles the kstatus
conditions and the outcome (pure) and `report` writes them, with the
metrics (`metrics`), the log line and the Events. `spec` parses a
PolicySource; `webhook` turns a Git push into a reconcile request;
`liveplan` is `gangops plan --cluster`; `cli` is `gangops install-crds`.
"""
