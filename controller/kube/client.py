"""The one door to the API server: raw JSON over the official client's transport.

Everything in gangops that reads or writes Kubernetes objects goes through
`Kube`. It borrows from the `kubernetes` package only what is hard to get
right (kubeconfig and in-cluster credentials, TLS, token refresh) and speaks
plain JSON dicts on top of it (`_preload_content=False`): typed models cost a
deserialisation per object and cannot represent custom resources anyway.

Writes have sharp edges removed, as in lightkube: server-side apply always
names its field manager (there is no default), and every write passes the
`fence` first, so a replica that has lost its leader Lease cannot write even
if a thread is still running. urllib3's own retries are off (`_api_client`):
a request it sent again after a timeout skipped the fence and landed up to
three timeouts late. A request is sent again only where its connection was
found dead (`_dropped`), the fence checked again; the callers retry the
rest of what is transient, through the fence.

`KubeApi` is the seam: the calls the controllers, informers, elector and
recorders make. `Kube` is its one real implementation; unit tests pass the one
fake (`tests/unit/fakes.FakeKube`), typed against the same Protocol.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, cast

import urllib3
import yaml  # type: ignore[import-untyped]  # PyYAML, the kubeconfig loader's parser
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

__all__ = [
    "FIELD_MANAGER",
    "RESOURCES",
    "ApiError",
    "Kube",
    "KubeApi",
    "NotLeaderError",
    "Resource",
    "WatchEvent",
    "connect",
    "resource_for",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Fence = Callable[[], bool]

FIELD_MANAGER = "gangops"
"""The field manager of what gangops applies: the compiled policy objects, the CRDs
and admission policies, the system namespace. (The scheduler writes as its own,
`gangops-scheduler`.)"""


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`group/version`, or `version` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, name: str | None = None, namespace: str | None = None, sub: str | None = None
    ) -> str:
        """The URL path of the collection (no name) or of one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        if sub is not None:
            base += f"/{sub}"
        return base


def _r(group: str, version: str, kind: str, plural: str, namespaced: bool) -> Resource:
    return Resource(group, version, kind, plural, namespaced)


RESOURCES: Mapping[str, Resource] = {
    r.kind: r
    for r in (
        _r("", "v1", "Namespace", "namespaces", False),
        _r("", "v1", "ResourceQuota", "resourcequotas", True),
        _r("", "v1", "LimitRange", "limitranges", True),
        _r("", "v1", "ConfigMap", "configmaps", True),
        _r("", "v1", "Secret", "secrets", True),
        _r("", "v1", "ServiceAccount", "serviceaccounts", True),
        _r("", "v1", "Pod", "pods", True),
        _r("", "v1", "Node", "nodes", False),
        _r("", "v1", "Service", "services", True),
        _r("", "v1", "Event", "events", True),
        _r("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False),
        _r("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False),
        _r("coordination.k8s.io", "v1", "Lease", "leases", True),
        _r(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            False,
        ),
        _r(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            False,
        ),
        _r(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            False,
        ),
        _r(
            "admissionregistration.k8s.io",
            "v1beta1",
            "MutatingAdmissionPolicy",
            "mutatingadmissionpolicies",
            False,
        ),
        _r(
            "admissionregistration.k8s.io",
            "v1beta1",
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
            False,
        ),
        _r("ai.operator", "v1", "TrainingJob", "trainingjobs", True),
        _r("ai.operator", "v1", "QuotaRequest", "quotarequests", True),
        _r("policy.ai.operator", "v1", "PolicySource", "policysources", False),
        _r("policy.ai.operator", "v1", "ClusterPolicy", "clusterpolicies", False),
        _r("policy.ai.operator", "v1", "PriorityTier", "prioritytiers", False),
        _r("policy.ai.operator", "v1", "Project", "projects", False),
    )
}
"""The kinds gangops reads or writes. A fixed table: no discovery round trips."""


def resource_for(obj: Mapping[str, Any]) -> Resource:
    """The resource of an object, by its `kind` (and checked against its `apiVersion`)."""
    kind = obj.get("kind", "")
    res = RESOURCES.get(kind)
    if res is None or obj.get("apiVersion") != res.api_version:
        raise KeyError(f"gangops does not manage {obj.get('apiVersion')}/{kind}")
    return res


class ApiError(Exception):
    """The API server refused a request (or could not be reached: status 0)."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        """The Status `reason` (NotFound, Conflict, Invalid, ...), or Unreachable."""
        self.message = message
        self.retry_after = retry_after
        """Seconds the server asked the client to wait before trying again (a 429 or
        503's `Retry-After`, or the Status' `details.retryAfterSeconds`), or None."""

    @property
    def transient(self) -> bool:
        """Whether the refusal may pass by itself: the server unreachable (0), a
        conflict (409), busy (429) or failing (5xx); not a request refused as written."""
        return self.status in (0, 409, 429) or self.status >= 500

    @classmethod
    def from_exception(cls, e: ApiException) -> ApiError:
        body: Any = e.body
        try:
            status = json.loads(body) if body else {}
        except ValueError:
            status = {}
        if not isinstance(status, dict):
            status = {}
        return cls(
            int(e.status or 0),
            str(status.get("reason") or e.reason or "Unknown"),
            str(status.get("message") or body or e.reason),
            retry_after=_retry_after(status, e.headers),
        )


RETRY_AFTER_MAX_S = 300.0
"""The longest `Retry-After` taken as said: a server asking for more (or a proxy's
mistake) is read as this, so that a client never waits for ever."""


def _retry_after(status: dict[str, Any], headers: Any) -> float | None:
    """The wait a refusal asks for, in seconds: the Status' `details.retryAfterSeconds`,
    else the `Retry-After` header in seconds (an HTTP date is not read); None when
    neither says a whole number of seconds from 1 up (the API server's own 0 means
    "none said"). At most `RETRY_AFTER_MAX_S`."""
    details = status.get("details")
    value: Any = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    if (value is None or value == 0) and headers is not None:  # 0: none said
        try:
            value = headers.get("Retry-After")
        except AttributeError:  # not a mapping
            value = None
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        digits = value.strip()
        if not (digits.isascii() and digits.isdigit()):
            value = None
        else:  # a number past the cap needs no reading (int() refuses 4,301 digits)
            value = int(digits) if len(digits) <= 6 else int(RETRY_AFTER_MAX_S)
    if not isinstance(value, int) or value < 1:
        return None
    return float(min(value, RETRY_AFTER_MAX_S))


def retry_wait(error: BaseException, least: float) -> float:
    """How long to wait before trying again after `error`: `least`, or longer where
    the API server asked for a longer wait (`ApiError.retry_after`: API Priority and
    Fairness' 429, a 503)."""
    asked = error.retry_after if isinstance(error, ApiError) else None
    return least if asked is None else max(least, asked)


class NotLeaderError(Exception):
    """A write was attempted by a replica that does not hold the leader Lease."""


class WatchEvent(TypedDict):
    """One line of a watch stream."""

    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
    object: Obj


class KubeApi(Protocol):
    """What gangops asks of the API server; see `Kube` for each call's contract."""

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None: ...

    def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> tuple[list[Obj], str]: ...

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 300,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[WatchEvent]: ...

    def apply(
        self,
        obj: Obj,
        *,
        field_manager: str,
        dry_run: bool = False,
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj: ...

    def create(self, obj: Obj, *, field_manager: str) -> Obj: ...

    def replace(self, obj: Obj, *, field_manager: str) -> Obj: ...

    def merge_patch(
        self,
        res: Resource,
        name: str,
        patch: Obj,
        *,
        field_manager: str,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj: ...

    def bind(self, namespace: str, pod: str, node: str, *, field_manager: str) -> None: ...

    def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
    ) -> bool: ...


def connect(kubeconfig: str | None = None, *, pool_size: int = 32) -> Kube:
    """A client from, in order: `kubeconfig`, `$KUBECONFIG`, the in-cluster service
    account, `~/.kube/config` (controller-runtime's order)."""
    cfg = k8s.Configuration()
    try:
        if kubeconfig is None and not os.environ.get("KUBECONFIG"):
            if os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s_config.load_incluster_config(client_configuration=cfg)
                return Kube(_api_client(cfg, pool_size))
            kubeconfig = str(Path.home() / ".kube" / "config")
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (k8s_config.ConfigException, OSError, yaml.YAMLError, ValueError, LookupError) as e:
        # YAMLError: not YAML; ValueError: not UTF-8 (UnicodeDecodeError) or a bad
        # value; LookupError (and TypeError, AttributeError, below): YAML of another
        # shape than a kubeconfig's, which the loader indexes without looking
        where = kubeconfig or os.environ.get("KUBECONFIG") or "the in-cluster service account"
        raise ApiError(0, "BadConfig", f"no usable credentials in {where}: {e}") from None
    except (TypeError, AttributeError) as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "the in-cluster service account"
        raise ApiError(0, "BadConfig", f"{where} is not a kubeconfig: {e}") from None
    return Kube(_api_client(cfg, pool_size))


def _api_client(cfg: k8s.Configuration, pool_size: int) -> k8s.ApiClient:
    cfg.connection_pool_maxsize = pool_size
    # urllib3 would otherwise send a request up to four times, each after a full
    # timeout, below `Kube._call`: a write past the fence, long after it was
    # checked, and a Lease read answered three timeouts after it was asked.
    cfg.retries = False
    return k8s.ApiClient(cfg)


_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})


def _dropped(error: urllib3.exceptions.HTTPError, method: str) -> bool:
    """Whether `error` is a pooled connection found dead when used, so the request is
    sent once more on a new one (as urllib3's own retries did, for the same methods):
    no connection was made (nothing was sent), or an idempotent request's connection
    was reset or closed under it (a load balancer that forgot an idle flow answers
    its next packet with a reset). Never a timeout: a request that timed out may
    still land, and sent again it would land late."""
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        return True
    if not isinstance(error, urllib3.exceptions.ProtocolError) or method not in _IDEMPOTENT:
        return False
    # urllib3 reports a send that timed out (a server that stopped reading) as a
    # ProtocolError too: its cause is the TimeoutError
    return not any(isinstance(a, TimeoutError) for a in error.args)


class Kube:
    """Raw-JSON access to the API server. Thread-safe; cheap to copy with `fenced`."""

    def __init__(
        self, api: k8s.ApiClient, *, fence: Fence | None = None, timeout_s: float = 30.0
    ) -> None:
        self._api = api
        self._fence = fence
        self._timeout = timeout_s

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    def fenced(self, fence: Fence) -> Kube:
        """The same connection, whose writes fail with NotLeaderError unless `fence()`."""
        return Kube(self._api, fence=fence, timeout_s=self._timeout)

    def with_timeout(self, timeout_s: float) -> Kube:
        """The same connection, whose requests give up after `timeout_s`."""
        return Kube(self._api, fence=self._fence, timeout_s=timeout_s)

    # -- transport

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        for resend in (False, True):
            if method != "GET":
                if self._fence is not None and not self._fence():
                    raise NotLeaderError(
                        f"refusing {method} {path}: this replica is not the leader"
                    )
                log.debug("api write method=%s path=%s", method, path)
            try:
                resp = self._api.call_api(
                    path,
                    method,
                    query_params=list(query),
                    header_params={"Content-Type": content_type, "Accept": "application/json"},
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout if timeout is not None else self._timeout,
                )
                break
            except ApiException as e:
                raise ApiError.from_exception(e) from None
            except (AttributeError, UnicodeDecodeError) as e:
                # The client decodes every ApiException's body as UTF-8 before it is
                # raised: a refusal whose body is not UTF-8 (a proxy's Latin-1 503
                # page) fails that, and so does the one it makes of a TLS failure (a
                # connection reset while the request was sent), which has no body.
                # Either way the ApiException is this error's context.
                lost = e.__context__
                if not isinstance(lost, ApiException):
                    raise
                if isinstance(lost.body, bytes):
                    lost.body = lost.body.decode("utf-8", "replace")
                if lost.status != 0:
                    raise ApiError.from_exception(lost) from None
                if resend or method not in _IDEMPOTENT:
                    reason = str(lost.reason).replace("\n", ": ")
                    raise ApiError(0, "Unreachable", f"{method} {path}: {reason}") from None
            except urllib3.exceptions.HTTPError as e:
                if resend or not _dropped(e, method):
                    raise ApiError(0, "Unreachable", f"{method} {path}: {e}") from None
            log.debug("api connection dropped; sending again method=%s path=%s", method, path)
        if stream:
            return resp
        try:
            data = resp.data
        except urllib3.exceptions.HTTPError as e:  # the answer cut short
            raise ApiError(0, "Unreachable", f"{method} {path}: {e}") from None
        finally:
            resp.release_conn()
        try:
            return json.loads(data) if data else None
        except ValueError as e:  # UnicodeDecodeError too
            raise ApiError(0, "BadResponse", f"{method} {path}: not JSON: {e}") from None

    # -- reads

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None if it does not exist."""
        try:
            return cast(Obj, self._call("GET", res.path(name=name, namespace=namespace)))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """Every object (following `continue` tokens), and the list's resourceVersion.

        Items of a list carry no `apiVersion`/`kind`; they are filled in.
        """
        items: list[Obj] = []
        query: list[tuple[str, str]] = [("limit", "500")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        token = ""
        while True:
            page = self._call(
                "GET",
                res.path(namespace=namespace),
                query=[*query, ("continue", token)] if token else query,
            )
            for item in page.get("items", []):
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            meta = page.get("metadata", {})
            token = meta.get("continue", "")
            if not token:
                return items, str(meta.get("resourceVersion", ""))

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_s: int = 300,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[WatchEvent]:
        """The events after `resource_version`, with bookmarks, until the server ends the
        stream (after about `timeout_s`) or it stays silent past that (a read timeout).

        `on_open` receives the HTTP response, so another thread can shut it down.
        """
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        resp = self._call(
            "GET",
            res.path(namespace=namespace),
            query=query,
            timeout=(10.0, timeout_s + 30.0),
            stream=True,
        )
        if on_open is not None:
            on_open(resp)
        pending = b""
        try:
            for chunk in resp.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        event = cast(WatchEvent, json.loads(line))
                        obj = event["object"]
                        if event["type"] != "ERROR":
                            obj.setdefault("apiVersion", res.api_version)
                            obj.setdefault("kind", res.kind)
                        yield event
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise ApiError(0, "WatchBroken", f"watch {res.plural}: {e}") from None
        finally:
            resp.release_conn()

    # -- writes

    def apply(
        self,
        obj: Obj,
        *,
        field_manager: str,
        dry_run: bool = False,
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply `obj` (or its `subresource`, such as `status`); returns the
        object as the server stored it (or would, with `dry_run`). `field_manager` is
        required and must not be empty."""
        if not field_manager:
            raise ValueError("server-side apply needs a field manager")
        res = resource_for(obj)
        meta = obj["metadata"]
        query = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        return cast(
            Obj,
            self._call(
                "PATCH",
                res.path(name=meta["name"], namespace=meta.get("namespace"), sub=subresource),
                query=query,
                body=obj,
                content_type="application/apply-patch+yaml",
            ),
        )

    def create(self, obj: Obj, *, field_manager: str) -> Obj:
        """Create `obj` (fails with 409 AlreadyExists if it exists)."""
        res = resource_for(obj)
        return cast(
            Obj,
            self._call(
                "POST",
                res.path(namespace=obj["metadata"].get("namespace")),
                query=[("fieldManager", field_manager)],
                body=obj,
            ),
        )

    def replace(self, obj: Obj, *, field_manager: str) -> Obj:
        """Replace `obj`; its `metadata.resourceVersion` makes this a compare-and-swap."""
        res = resource_for(obj)
        meta = obj["metadata"]
        return cast(
            Obj,
            self._call(
                "PUT",
                res.path(name=meta["name"], namespace=meta.get("namespace")),
                query=[("fieldManager", field_manager)],
                body=obj,
            ),
        )

    def merge_patch(
        self,
        res: Resource,
        name: str,
        patch: Obj,
        *,
        field_manager: str,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch (RFC 7386) of one object or of its `status` subresource."""
        return cast(
            Obj,
            self._call(
                "PATCH",
                res.path(name=name, namespace=namespace, sub=subresource),
                query=[("fieldManager", field_manager)],
                body=patch,
                content_type="application/merge-patch+json",
            ),
        )

    def bind(self, namespace: str, pod: str, node: str, *, field_manager: str) -> None:
        """Bind a pod to a node through the `pods/binding` subresource (what a
        scheduler does); a pod already bound answers 409 Conflict."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._call(
            "POST",
            RESOURCES["Pod"].path(name=pod, namespace=namespace, sub="binding"),
            query=[("fieldManager", field_manager)],
            body=body,
        )

    def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete an object (only if it still has `uid`, when given); False if it was gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", res.path(name=name, namespace=namespace), body=body)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True
