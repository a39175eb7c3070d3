"""Alertmanager alerts become protective actions on nodes, GPUs and TrainingJobs.

Route, decide, write, as the other wings. `receiver` routes: it serves
Alertmanager's webhook (`POST /alertmanager`), checks who is calling, parses the
payload (`payload`) and queues the alerts; it answers at once and acts on nothing.
`machine` decides (pure): from a node's recorded alert state, the alerts that
arrived, the policy (`policy`, the ClusterPolicy's `alertActions` as compiled) and
the time, it returns the node's next state and what to change. `actor` writes: one
worker drains the queue and a periodic tick (grace periods, cool-downs), reads the
Node, writes the state and the change in one compare-and-swap patch, then the
TrainingJob annotations and the Events; `metrics` are its Prometheus figures.

Words: an *alert instance* is one alert as Alertmanager identifies it,
`fingerprint@startsAt`; an *entry* is what the node's state records about one
instance; an *action* is what an alert rule says to do (quarantine GPUs, cordon the
node, nothing); an *episode* is a node's time out of service, from its first
enforced action until everything gangops placed is undone.
"""
