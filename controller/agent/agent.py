"""The node agent's loop: sample every GPU under a deadline, attribute GPUs to pods,
follow XID errors, keep each GPU's health, and publish one immutable `Snapshot` per
round for the metrics endpoint and the Node publisher to read.

`Agent.tick` is one sampling round and `Agent.poll_xids` one wait for XID events:
`gangops agent` drives them from two threads; a process serving many fake nodes
drives many agents from one loop. Nothing here reads the wall clock or sleeps
outside the injected clock and the deadline lanes.

What a reader of the metrics can rely on:

- a value is never older than `interval + deadline`: a GPU that cannot be read
  (lost, hung, an NVML error) has its series withdrawn in the same round, never
  frozen at the last good reading (dcgm-exporter's known failure);
- `gangops_nvml_up` is 0 while NVML itself is unusable, and the agent initialises it
  again every `reinit_s` until it works;
- each GPU's health (`health.py`) has a series of its own that stays while the
  GPU's values are withdrawn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from controller.agent import health as h
from controller.agent.deadline import Lanes, Outcome
from controller.agent.nvml import ErrorClass, GpuIdentity, Nvml, Sample, classify, error_name

__all__ = ["Agent", "AgentConfig", "GpuView", "Owner", "Snapshot"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owner:
    """The container a GPU is allocated to (from the kubelet's pod-resources API)."""

    namespace: str
    pod: str
    container: str


OwnersReader = Callable[[], Mapping[str, Owner]]
"""GPU UUID -> owner, for the GPUs some container holds; raises on failure."""


@dataclass(frozen=True)
class AgentConfig:
    node: str
    interval_s: float = 1.0
    deadline_s: float = 2.0
    clean_period_s: float = 600.0
    """A reset-class fault clears after this long without a repeat (0: never)."""
    reinit_s: float = 5.0
    owners_ttl_s: float = 30.0
    """How long owners read earlier stay in use while pod-resources cannot be read."""
    xid_overrides: Mapping[int, h.XidClass] = field(default_factory=dict)
    xid_owner_window_s: float = 360.0
    """A repeat of an XID that finds no pod within this long of the last one is still
    the pod's that XID hit (the alert about it, a 5-minute `increase()` seen a scrape
    late, is still firing); the pod is named this long after the last repeat."""

    @property
    def stale_after_s(self) -> float:
        return self.interval_s + self.deadline_s


@dataclass(frozen=True)
class GpuView:
    """One GPU as the last round saw it."""

    identity: GpuIdentity
    health: h.GpuHealth
    sample: Sample | None
    """None when withdrawn (unreadable this round)."""
    sampled_at: float
    owner: Owner | None
    last_xid: int
    xids: Mapping[int, int]
    """XID -> how many since the agent started."""
    xid_owners: Mapping[int, Owner] = field(default_factory=dict)
    """XID -> the container its last repeat hit: the one holding the GPU then or, for
    a repeat within `xid_owner_window_s` that found none (the pod has ended), the one
    the repeat before it hit; until `xid_owner_window_s` after the last repeat. The
    alert about an XID names the pod it hit even once that pod has ended, as a fatal
    XID's pod usually has by the next scrape."""
    xid_times: Mapping[int, float] = field(default_factory=dict)
    """XID -> wall-clock (Unix) time it last came (an owner's time too)."""


@dataclass(frozen=True)
class Snapshot:
    node: str
    taken_at: float
    nvml_up: bool
    driver_version: str
    gpus: tuple[GpuView, ...]
    errors: Mapping[tuple[str, str], int]
    """(gpu index or "nvml" / "pod-resources", error name) -> count since start."""
    owners_ok: bool
    ticks: int
    stale_after_s: float = 3.0

    def fresh(self, now: float) -> Snapshot:
        """This snapshot as of `now`: readings older than `stale_after_s` withdrawn, so
        a stalled sampling loop never serves frozen values."""
        cutoff = now - self.stale_after_s
        if all(g.sample is None or g.sampled_at >= cutoff for g in self.gpus):
            return self
        gpus = tuple(
            g if g.sample is None or g.sampled_at >= cutoff else replace(g, sample=None)
            for g in self.gpus
        )
        return replace(self, gpus=gpus)

    @property
    def unhealthy(self) -> tuple[GpuView, ...]:
        return tuple(g for g in self.gpus if not g.health.healthy)


@dataclass
class _Gpu:
    identity: GpuIdentity
    health: h.GpuHealth = field(default_factory=h.GpuHealth)
    sample: Sample | None = None
    sampled_at: float = 0.0
    last_xid: int = 0
    xids: Counter[int] = field(default_factory=Counter)
    xid_owners: dict[int, tuple[Owner, float]] = field(default_factory=dict)
    """XID -> its owner and, on the agent's clock, when it last came."""
    xid_times: dict[int, float] = field(default_factory=dict)
    """XID -> wall-clock time it last came."""
    identified: bool = True
    """False for a GPU NVML counts but whose identity it could not read (lost or
    hung from the start, or since NVML was initialised again): out of service under
    its index with an empty UUID, identified when it can be."""
    stand_in: bool = False
    """An unidentified entry that holds, out of service, the index of a GPU that was
    not healthy when NVML was initialised again and whose index could then not be
    read (it may well be there still): its fault is that GPU's, never carried over to
    another GPU identified there."""
    gone: bool = False
    """At no index NVML could read since it was initialised again (it fell off the
    bus, or its index could not be read): numbered past NVML's count, never read,
    published only while not healthy (out of service under its own UUID: a GPU that
    needs a reboot stays out), and back with its health and XIDs where NVML lists
    its UUID again."""


class Agent:
    """One node's GPUs. Thread-safe: `tick` and `poll_xids` may run concurrently."""

    def __init__(
        self,
        nvml: Nvml,
        config: AgentConfig,
        *,
        owners: OwnersReader | None = None,
        on_held: Callable[[set[str] | None], None] | None = None,
        lanes: Lanes | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.config = config
        self._wall = wall
        self._nvml = nvml
        self._owners_reader = owners
        self._on_held = on_held
        self._clock = clock
        self._lanes = lanes or Lanes(config.deadline_s, workers=4, name=f"nvml-{config.node}")
        self._lock = threading.RLock()
        self._gpus: list[_Gpu] = []
        self._nvml_up = False
        self._driver = ""
        self._count = 0
        self._next_init = 0.0
        self._owners: Mapping[str, Owner] = {}
        self._owners_at: float | None = None
        self._errors: Counter[tuple[str, str]] = Counter()
        self._ticks = 0
        self.last_tick = time.monotonic()
        """When the sampling loop last finished a round (for /healthz)."""
        self._on_change = on_change
        self._snapshot = self._build(clock())

    # -- running

    def start(
        self, stop: threading.Event, *, on_tick: Callable[[Snapshot], None] | None = None
    ) -> list[threading.Thread]:
        """Run the sampling loop (a round every `interval_s`) and the XID loop on two
        daemon threads until `stop` is set; `on_tick` gets each round's snapshot."""

        def sample_loop() -> None:
            next_at = time.monotonic()
            while not stop.is_set():
                try:
                    snap = self.tick()
                    if on_tick is not None:
                        on_tick(snap)
                except Exception:
                    log.exception("sampling round failed node=%s; continuing", self.config.node)
                self.last_tick = time.monotonic()
                next_at += self.config.interval_s
                stop.wait(max(0.0, next_at - time.monotonic()))
                if next_at < time.monotonic():
                    next_at = time.monotonic()

        def xid_loop() -> None:
            while not stop.is_set():
                try:
                    began = time.monotonic()
                    if self.poll_xids(0.5) == 0 and time.monotonic() - began < 0.25:
                        stop.wait(0.5)  # it waited for nothing: NVML down, or the wait failed
                except Exception:
                    log.exception("XID loop failed node=%s; continuing", self.config.node)
                    stop.wait(1.0)

        threads = [
            threading.Thread(target=sample_loop, name="sample", daemon=True),
            threading.Thread(target=xid_loop, name="xid", daemon=True),
        ]
        for t in threads:
            t.start()
        return threads

    # -- reading

    def snapshot(self) -> Snapshot:
        """The last round's view (immutable; cheap)."""
        return self._snapshot

    def ready(self) -> bool:
        s = self._snapshot
        return s.nvml_up and s.ticks > 0

    # -- one round

    def tick(self) -> Snapshot:
        now = self._clock()
        if not self._nvml_up and now >= self._next_init:
            self._initialise(now)
        if self._nvml_up:
            self._identify(now)
            self._read_owners(now)
            self._sample(now)
        with self._lock:
            self._ticks += 1
            for g in self._gpus:
                self._set_health(g, h.after_clean_period(g.health, self.config.clean_period_s, now))
        return self._publish(now)

    def _initialise(self, now: float) -> None:
        self._next_init = now + self.config.reinit_s

        def start() -> tuple[str, int]:
            self._nvml.init()
            return self._nvml.driver_version(), self._nvml.device_count()

        out = self._lanes.run((self.config.node, "nvml"), start)
        if not out.ok or out.value is None:
            self._count_failure("nvml", out)
            log.warning("NVML unavailable node=%s error=%s", self.config.node, _why(out))
            return
        driver, count = out.value
        with self._lock:
            self._driver, self._count = driver, count
        # Every GPU read again: NVML may number them anew (one fell off the bus and
        # the driver was reloaded), and each keeps its state by UUID, not index.
        self._identify(now, again=True)
        with self._lock:  # up once identified: an XID polled before would find no GPU
            self._nvml_up = True
        log.info("NVML up node=%s gpus=%d driver=%s", self.config.node, count, driver)

    def _identify(self, now: float, *, again: bool = False) -> None:
        """Read the identity of GPUs not known yet (each in its own lane: one hung or
        lost GPU does not keep the others, or NVML, from starting); with `again` (NVML
        initialised anew), of every GPU NVML counts (`_renumber`)."""
        with self._lock:
            known = {g.identity.index: g for g in self._gpus if not g.gone}
            count = self._count
        missing = [i for i in range(count) if again or i not in known or not known[i].identified]
        if not missing and not again:
            return
        node = self.config.node
        outcomes = self._lanes.run_all(
            {(node, i): partial(self._nvml.identity, i) for i in missing}
        )
        with self._lock:
            read = [out.value for out in outcomes.values() if out.ok and out.value is not None]
            # before the re-init: the GPU at each index (whose fault may be there still)
            was = (
                {g.identity.index: g for g in self._gpus if g.identified and not g.gone}
                if again
                else {}
            )
            if again:
                self._renumber(read)
            else:
                for ident in read:
                    self._place(ident)
            for (_, i), out in outcomes.items():
                if out.ok and out.value is not None:
                    continue
                self._count_failure(str(i), out)
                lost = out.error is not None and classify(out.error) is ErrorClass.GPU_LOST
                if not (lost or out.hung is not None):
                    before = was.get(i)
                    if before is not None and before.gone and not before.health.healthy:
                        # the GPU that needed a reset or a reboot here may be here still:
                        # its index stays out of service until it is read
                        stand_in = self._unidentified(i)
                        stand_in.health, stand_in.stand_in = before.health, True
                    continue
                # counted by NVML, so out of service, not left out
                g = self._unidentified_at(i) or self._unidentified(i)
                g.stand_in = False  # its fault is this index's own now
                if out.hung is not None:
                    self._set_health(g, h.on_hang(g.health, self.config.deadline_s, now))
                else:
                    self._set_health(g, h.on_lost(g.health, str(out.error), now))
            self._gpus.sort(key=lambda g: g.identity.index)

    def _renumber(self, read: list[GpuIdentity]) -> None:
        """NVML came back and said which GPU each index is (`read`; an index it could
        not read is missing), perhaps numbered anew. Each GPU read goes to its index
        (`_place`). A GPU known before that is at no index read is `gone`: NVML lists it
        no more, or it is at an index that could not be read, which is therefore never
        published under its UUID (it may be another GPU now; `_identify` reads that
        index again next round). Gone GPUs are numbered past the count, so never at an
        index a listed GPU has; an unidentified entry past the count is dropped, as
        always. Caller holds the lock."""
        listed = {ident.uuid for ident in read}
        kept = []
        for g in self._gpus:
            if not g.identified:
                if g.identity.index < self._count:
                    kept.append(g)
                continue
            if not g.gone and g.identity.uuid not in listed:
                g.gone, g.sample = True, None
                if not g.health.healthy:
                    log.warning(
                        "GPU not listed by NVML any more node=%s uuid=%s state=%s;"
                        " kept out of service",
                        self.config.node,
                        g.identity.uuid,
                        g.health.state.value,
                    )
            kept.append(g)
        self._gpus = kept
        for ident in read:
            self._place(ident)
        gone = sorted(
            (g for g in self._gpus if g.gone), key=lambda g: (g.health.healthy, g.identity.index)
        )
        for n, g in enumerate(gone, start=self._count):
            g.identity = replace(g.identity, index=n)

    def _place(self, ident: GpuIdentity) -> None:
        """NVML says the GPU `ident.uuid` is at `ident.index`: the entry that knows that
        UUID (renumbered, or `gone` and listed again) goes there with its health, XIDs
        and owner; otherwise the unidentified entry at that index is identified (it
        keeps its fault until a reading clears it), or a new entry is made. Caller
        holds the lock."""
        at = self._unidentified_at(ident.index)
        g = next((g for g in self._gpus if g.identified and g.identity.uuid == ident.uuid), None)
        if at is not None and at.stand_in:  # another GPU's fault: not this one's
            self._gpus.remove(at)
            at = None
        if g is None:
            if at is None:
                self._gpus.append(_Gpu(ident))
            else:
                at.identity, at.identified = ident, True
            return
        if at is not None:  # the unidentified entry was this GPU
            self._gpus.remove(at)
            if g.health.healthy:
                self._set_health(g, at.health)
        if g.gone or g.identity.index != ident.index:
            log.warning(
                "GPU %s by NVML node=%s uuid=%s index=%d->%d state=%s",
                "listed again" if g.gone else "renumbered",
                self.config.node,
                ident.uuid,
                g.identity.index,
                ident.index,
                g.health.state.value,
            )
            g.sample = None
        g.identity, g.gone = ident, False

    def _unidentified(self, index: int) -> _Gpu:
        """A new entry for a GPU NVML counts at `index` but could not identify. Caller
        holds the lock."""
        g = _Gpu(GpuIdentity(index, "", "", "", index), identified=False)
        self._gpus.append(g)
        return g

    def _unidentified_at(self, index: int) -> _Gpu | None:
        return next((g for g in self._gpus if not g.identified and g.identity.index == index), None)

    def _read_owners(self, now: float) -> None:
        if self._owners_reader is None:
            return
        out = self._lanes.run((self.config.node, "pod-resources"), self._owners_reader)
        if out.ok and out.value is not None:
            self._owners, self._owners_at = dict(out.value), now
        else:
            self._count_failure("pod-resources", out)
            if self._owners_at is None or now - self._owners_at > self.config.owners_ttl_s:
                self._owners = {}
        if self._on_held is not None:
            self._on_held(set(self._owners) if self._owners_at is not None else None)

    def _sample(self, now: float) -> None:
        with self._lock:
            gpus = [g for g in self._gpus if not g.gone]
        node = self.config.node
        outcomes = self._lanes.run_all(
            {(node, g.identity.index): partial(self._nvml.sample, g.identity.index) for g in gpus}
        )
        # stamped once read: a slow pod-resources answer or NVML call is not their age
        read_at = self._clock()
        down = False
        with self._lock:
            for g in gpus:
                out = outcomes[(node, g.identity.index)]
                if out.ok and out.value is not None:
                    g.sample, g.sampled_at = out.value, read_at
                    self._set_health(g, h.after_sample(g.health, now))
                    continue
                g.sample = None  # never a stale value
                self._count_failure(str(g.identity.index), out)
                if out.hung is not None:
                    self._set_health(g, h.on_hang(g.health, self.config.deadline_s, now))
                elif out.error is not None:
                    cls = classify(out.error)
                    if cls is ErrorClass.GPU_LOST:
                        self._set_health(g, h.on_lost(g.health, str(out.error), now))
                    elif cls is ErrorClass.NVML_DOWN:
                        down = True
            if down:
                self._nvml_down(now)

    def _nvml_down(self, now: float) -> None:
        """NVML itself stopped working: withdraw everything, initialise again later."""
        self._nvml_up = False
        self._next_init = now + self.config.reinit_s
        for g in self._gpus:
            g.sample = None
        log.warning("NVML down node=%s; retrying in %gs", self.config.node, self.config.reinit_s)

    # -- XID events

    def poll_xids(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for XID errors and apply them; how many arrived."""
        if not self._nvml_up:
            return 0
        out = self._lanes.run((self.config.node, "xid"), partial(self._nvml.wait_xids, timeout_s))
        if not out.ok or out.value is None:
            self._count_failure("xid", out)
            if out.error is not None and classify(out.error) is ErrorClass.NVML_DOWN:
                with self._lock:
                    self._nvml_down(self._clock())
            return 0
        if not out.value:
            return 0
        now = self._clock()
        with self._lock:
            by_uuid = {g.identity.uuid: g for g in self._gpus}
            for event in out.value:
                g = by_uuid.get(event.uuid)
                if g is None:
                    continue
                cls = h.classify_xid(event.xid, dict(self.config.xid_overrides))
                g.xids[event.xid] += 1
                g.last_xid = event.xid
                owner = self._owners.get(event.uuid)
                if owner is None and event.xid in g.xid_owners:
                    # the pod it hit has ended; a repeat while the alert about it
                    # still fires is still that pod's fault
                    previous, last = g.xid_owners[event.xid]
                    if now - last <= self.config.xid_owner_window_s:
                        owner = previous
                g.xid_times[event.xid] = self._wall()
                if owner is None:
                    g.xid_owners.pop(event.xid, None)
                else:
                    g.xid_owners[event.xid] = (owner, now)
                log.warning(
                    "XID node=%s gpu=%d uuid=%s xid=%d class=%s",
                    self.config.node,
                    g.identity.index,
                    g.identity.uuid,
                    event.xid,
                    cls.value,
                )
                self._set_health(g, h.on_xid(g.health, event.xid, cls, now))
        self._publish(now)
        return len(out.value)

    # -- helpers

    def _set_health(self, g: _Gpu, new: h.GpuHealth) -> None:
        if new.state is not g.health.state:
            log.warning(
                "GPU health node=%s gpu=%d uuid=%s from=%s to=%s reason=%r",
                self.config.node,
                g.identity.index,
                g.identity.uuid,
                g.health.state.value,
                new.state.value,
                new.reason,
            )
        g.health = new

    def _count_failure(self, where: str, out: Outcome[Any]) -> None:
        name = "deadline_exceeded" if out.hung else error_name(out.error or Exception())
        with self._lock:
            self._errors[(where, name)] += 1

    def _publish(self, now: float) -> Snapshot:
        with self._lock:
            previous = self._snapshot
            self._snapshot = snap = self._build(now)
        if self._on_change is not None and _health_of(previous) != _health_of(snap):
            self._on_change(snap)
        return snap

    def _build(self, now: float) -> Snapshot:
        stale = now - self.config.stale_after_s
        return Snapshot(
            node=self.config.node,
            taken_at=now,
            nvml_up=self._nvml_up,
            driver_version=self._driver,
            gpus=tuple(
                GpuView(
                    identity=g.identity,
                    health=g.health,
                    sample=g.sample if g.sample is not None and g.sampled_at >= stale else None,
                    sampled_at=g.sampled_at,
                    owner=self._owners.get(g.identity.uuid),
                    last_xid=g.last_xid,
                    xids=dict(g.xids),
                    xid_owners={
                        xid: o
                        for xid, (o, at) in g.xid_owners.items()
                        if now - at <= self.config.xid_owner_window_s
                    },
                    xid_times=dict(g.xid_times),
                )
                for g in self._gpus
                if not (g.gone and g.health.healthy)
            ),
            errors=dict(self._errors),
            owners_ok=self._owners_reader is None or self._owners_at == now,
            ticks=self._ticks,
            stale_after_s=self.config.stale_after_s,
        )


def _health_of(s: Snapshot) -> tuple[object, ...]:
    """What the Node says (`node.node_patch`): a GPU listed again moves to its index."""
    return (s.nvml_up, tuple((g.identity.index, g.identity.uuid, g.health.state) for g in s.gpus))


def _why(out: Outcome[Any]) -> str:
    if out.hung is not None:
        return "deadline exceeded"
    return repr(out.error)
