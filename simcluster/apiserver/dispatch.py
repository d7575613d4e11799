"""From a request (method, path, query, body, user) to a verb on the core.

``RequestInfo`` parses paths the way upstream's RequestInfoFactory does (``/api/v1/...``,
``/apis/<group>/<version>/...``, ``namespaces/<ns>/<resource>/<name>/<subresource>``), so
flow control and metrics see the same verb/resource labels the real server reports. The same
dispatcher serves HTTP requests and in-process clients (the simulated kubelets).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import yaml

from simcluster.apiserver.apf_objects import AppliedFlowConfig
from simcluster.apiserver.auth import User
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.delete_verbs import delete_answer, delete_code
from simcluster.apiserver.discovery import table
from simcluster.apiserver.faults import ApiFaults
from simcluster.apiserver.flowcontrol import FlowControl, default_flow_control
from simcluster.apiserver.listoptions import ListOptions, validate_list_options
from simcluster.apiserver.metrics import ApiMetrics
from simcluster.apiserver.protobuf import decode_k8s_protobuf
from simcluster.apiserver.rbac import Authorizer, request_attributes
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.reviews import REVIEW_PLURALS, answer_review
from simcluster.apiserver.store import Event, Renderer, Watcher, default_render, line
from simcluster.apiserver.streams import PodStream, is_stream_request, stream_request
from simcluster.errors import ApiError, BadRequest, MethodNotAllowed, NotFound, TooManyRequests

__all__ = [
    "ApiRequest",
    "ApiResponse",
    "Dispatcher",
    "RequestInfo",
    "WatchStream",
    "parse_path",
    "query_bool",
    "response_json",
]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RequestInfo:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str = ""
    namespace: str | None = None
    name: str = ""

    @property
    def mutating(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")


def query_bool(query: Mapping[str, str], key: str) -> bool:
    """A boolean query parameter as upstream decodes one (``Convert_Slice_string_To_bool``):
    absent is false, ``0`` and ``false`` (any case) are false, anything else — ``True``,
    ``yes``, an empty value — is true."""
    value = query.get(key)
    if value is None:
        return False
    return value != "0" and value.lower() != "false"


def parse_path(method: str, path: str, query: Mapping[str, str]) -> RequestInfo | None:
    """None for non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) > 2 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    verb = {
        "GET": "get" if name else ("watch" if query_bool(query, "watch") else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, method.lower())
    return RequestInfo(verb, group, version, resource, sub, namespace, name)


@dataclass(slots=True)
class ApiRequest:
    info: RequestInfo
    user: User
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = "application/json"
    accept: str = "application/json"


@dataclass(slots=True)
class ApiResponse:
    code: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(slots=True)
class WatchStream:
    watcher: Watcher
    rt: ResourceType
    timeout: float | None
    bookmarks: bool
    initial_error: bytes | None = None


def _json(obj: Any) -> bytes:
    return msgspec.json.encode(obj)


def response_json(obj: Any) -> bytes:
    """A JSON response body as upstream's serializer writes one: ending with a newline."""
    return msgspec.json.encode(obj) + b"\n"


def _decode(body: bytes, content_type: str = "application/json") -> Any:
    if not body:
        return None
    if content_type.startswith("application/vnd.kubernetes.protobuf"):
        return decode_k8s_protobuf(body)
    if content_type.startswith("application/apply-patch+yaml"):
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as e:
            raise BadRequest(f"error decoding YAML: {e}")
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as e:
        raise BadRequest(f"the body of the request was not valid JSON: {e}")


def _delete_options(body: Any, q: Mapping[str, str]) -> Obj:
    """DeleteOptions from the body and the query (upstream reads both; the query wins)."""
    options: Obj = dict(body) if isinstance(body, dict) else {}
    if "gracePeriodSeconds" in q:
        try:
            options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        except ValueError:
            raise BadRequest(f"invalid gracePeriodSeconds {q['gracePeriodSeconds']!r}")
    if "propagationPolicy" in q:
        options["propagationPolicy"] = q["propagationPolicy"]
    if "orphanDependents" in q:
        options["orphanDependents"] = query_bool(q, "orphanDependents")
    return options


def _body(req: ApiRequest) -> Any:
    return _decode(req.body, req.content_type)


def _metadata_mode(accept: str) -> bool:
    """``as=PartialObjectMetadata[List]``: metadata-only objects (client-go metadata informers)."""
    return "as=PartialObjectMetadata" in accept


def _partial(obj: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def _table_mode(accept: str) -> bool:
    return "as=Table" in accept


class Dispatcher:
    """Flow control, faults, write latency and metrics around the core's verbs."""

    def __init__(
        self,
        core: ApiCore,
        flow: FlowControl | None = None,
        metrics: ApiMetrics | None = None,
        faults: ApiFaults | None = None,
        write_latency_s: float = 0.0,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.core = core
        self.authorizer = authorizer or Authorizer(core.store)
        self.flow = flow or default_flow_control()
        # FlowSchema/PriorityLevelConfiguration objects reconfigure ``flow`` when written
        self.applied_flow = AppliedFlowConfig(core.store, self.flow)
        self.metrics = metrics or ApiMetrics()
        self.faults = faults or ApiFaults()
        self.write_latency_s = write_latency_s
        # pods/log: (namespace, pod, container) -> output; set by the cluster when its
        # runtime keeps logs (the process runtime), as the kubelet serves them upstream
        self.log_reader: Callable[[str, str, str], bytes] | None = None

    async def handle_async(self, req: ApiRequest) -> ApiResponse | WatchStream | PodStream:
        """The full request path; API errors come back as Status responses."""
        info = req.info
        start = time.monotonic()
        try:
            watch = info.verb == "watch"
            attrs = request_attributes(info, req.user, req.query)
            async with self.flow.admit(req.user, info.mutating, watch, attrs) as admission:
                self.metrics.admitted(admission, self.flow)
                # inside flow control, as upstream's filter chain orders them
                self.authorizer.check(attrs)
                if info.verb == "patch" and req.content_type.startswith("application/apply"):
                    self.authorizer.check_create_by_apply(attrs, self._exists(info))
                fault = self.faults.error_for(info.verb, req.user.name)
                if fault is not None:
                    raise fault
                delay = self.faults.extra_latency() + (
                    self.write_latency_s if info.mutating else 0.0
                )
                if delay:
                    await asyncio.sleep(delay)
                result = self.handle(req)
        except ApiError as e:
            if isinstance(e, TooManyRequests) and e.priority_level:
                self.metrics.rejected.labels(e.priority_level, e.flow_schema).inc()
            headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else {}
            result = ApiResponse(e.code, response_json(e.to_status()), headers)
        code = result.code if isinstance(result, ApiResponse) else 200
        self.metrics.requests.labels(
            info.verb, info.resource, info.subresource, req.user.name, str(code)
        ).inc()
        if isinstance(result, ApiResponse):
            self.metrics.latency.labels(info.verb, info.resource).observe(time.monotonic() - start)
        return result

    def _exists(self, info: RequestInfo) -> bool:
        rt = self.core.registry.get(info.group, info.version, info.resource)
        if rt is None or info.subresource:
            return True  # not a create: the request fails or patches a subresource
        ns = info.namespace or "" if rt.namespaced else ""
        return self.core.store.get(rt.key, ns, info.name) is not None

    def resource_type(self, info: RequestInfo) -> ResourceType:
        rt = self.core.registry.get(info.group, info.version, info.resource)
        if rt is None:
            raise NotFound("the server could not find the requested resource")
        return rt

    def handle(self, req: ApiRequest) -> ApiResponse | WatchStream | PodStream:
        info = req.info
        rt = self.resource_type(info)
        if info.verb == "watch":
            return self._watch(rt, req)
        if is_stream_request(rt, info.subresource, req.query):  # served by http.py: streams.py
            return stream_request(self.core, self.authorizer, rt, info, req.user, req.query)
        if info.subresource == "log" and info.verb == "get" and rt.plural == "pods":
            return self._log(rt, req)
        code, obj = self._call(rt, req)
        if _table_mode(req.accept) and info.verb in ("list", "get") and not info.subresource:
            include = req.query.get("includeObject", "Metadata")
            if info.verb == "list":
                obj = table(rt, obj["items"], obj["metadata"], include)
            else:
                obj = table(
                    rt, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}, include
                )
        elif _metadata_mode(req.accept) and info.verb in ("list", "get") and not info.subresource:
            if info.verb == "list":
                items = [_partial(o) for o in obj["items"]]
                obj = {
                    **obj,
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "items": items,
                }
            else:
                obj = _partial(obj)
        return ApiResponse(code, response_json(obj))

    def _opts(self, q: Mapping[str, str]) -> ListOptions:
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise BadRequest(f"invalid limit {q.get('limit')!r}")
        return ListOptions(
            q.get("labelSelector"),
            q.get("fieldSelector"),
            limit,
            q.get("continue"),
            q.get("resourceVersion"),
            q.get("resourceVersionMatch"),
        )

    def _call(self, rt: ResourceType, req: ApiRequest) -> tuple[int, Obj]:
        info, core, q = req.info, self.core, req.query
        ns = info.namespace or ""
        dry = bool(q.get("dryRun"))
        if rt.namespaced and info.namespace is None and info.verb == "deletecollection":
            # upstream serves no cluster-wide deletecollection of a namespaced resource
            raise MethodNotAllowed(
                "the server does not allow this method on the requested resource"
            )
        if rt.namespaced and info.namespace is None and info.verb != "list":
            raise NotFound("the server could not find the requested resource")
        if info.subresource:
            return self._subresource(rt, req)
        if info.verb == "get":
            return 200, core.get(rt, ns, info.name, q.get("resourceVersion"))
        if info.verb == "list":
            validate_list_options(q, watch=False)
            return 200, core.list(rt, info.namespace, self._opts(q))
        if info.verb == "create":
            if rt.plural in REVIEW_PLURALS:
                body = _body(req) or {}
                return 201, answer_review(self.authorizer, rt, req.user, ns, body, self.core.auth)
            if rt.plural == "bindings":
                body = _body(req) or {}
                name = (body.get("metadata") or {}).get("name", "")
                pods = core.registry.get("", "v1", "pods")
                assert pods is not None
                return 201, core.create_subresource(pods, "binding", ns, name, body)
            if info.name:
                raise MethodNotAllowed(
                    "the server does not allow this method on the requested resource"
                )
            obj = core.create(rt, ns, _body(req), dry_run=dry)
            return 201, obj
        manager = q.get("fieldManager") or req.user.name  # upstream: the User-Agent's program
        if info.verb == "update":
            return 200, core.update(rt, ns, info.name, _body(req), dry_run=dry, manager=manager)
        if info.verb == "patch" and req.content_type.startswith("application/apply-patch"):
            created, obj = core.apply(
                rt, ns, info.name, _body(req), manager=q.get("fieldManager", ""),
                force=query_bool(q, "force"), dry_run=dry,
            )  # fmt: skip
            return (201 if created else 200), obj
        if info.verb == "patch":
            body = _body(req)
            return 200, core.patch(
                rt, ns, info.name, req.content_type, body, dry_run=dry, manager=manager
            )
        if info.verb == "delete":
            options = _delete_options(_body(req), q)
            if dry:
                options["dryRun"] = ["All"]
            done = core.deletion(rt, ns, info.name, options)
            return delete_code(done, options), delete_answer(rt, done)
        if info.verb == "deletecollection":
            options = _delete_options(_body(req), q)
            if dry:
                options["dryRun"] = ["All"]
            return 200, core.delete_collection(rt, info.namespace, self._opts(q), options)
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    def _log(self, rt: ResourceType, req: ApiRequest) -> ApiResponse:
        """pods/log: the container's output as text (process runtime), as the kubelet serves it."""
        info, q = req.info, req.query
        pod = self.core.get(rt, info.namespace or "", info.name)
        containers = [c["name"] for c in pod["spec"].get("containers") or []]
        container = q.get("container") or (containers[0] if len(containers) == 1 else "")
        if container not in containers:
            raise BadRequest(
                f"a container name must be specified for pod {info.name}, "
                f"choose one of: {containers}"
            )
        reader = self.log_reader
        data = reader(info.namespace or "", info.name, container) if reader else b""
        if q.get("tailLines"):
            data = b"".join(data.splitlines(keepends=True)[-int(q["tailLines"]) :])
        if q.get("limitBytes"):
            data = data[: int(q["limitBytes"])]
        return ApiResponse(200, data, content_type="text/plain")

    def _subresource(self, rt: ResourceType, req: ApiRequest) -> tuple[int, Obj]:
        info, core = req.info, self.core
        ns, sub = info.namespace or "", info.subresource
        if sub not in rt.subresources:
            raise NotFound("the server could not find the requested resource")
        if sub in ("binding", "token") and info.verb == "create":
            return 201, core.create_subresource(rt, sub, ns, info.name, _body(req) or {})
        if sub == "eviction" and info.verb == "create":
            body = _body(req) or {}
            core.delete(rt, ns, info.name, body.get("deleteOptions") or {})
            return 201, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }
        if sub in ("status", "finalize"):
            if info.verb == "get":
                return 200, core.get(rt, ns, info.name)
            if info.verb == "update":
                return 200, core.update(rt, ns, info.name, _body(req), subresource="status")
            if info.verb == "patch":
                obj = core.patch(
                    rt, ns, info.name, req.content_type, _body(req), subresource="status"
                )
                return 200, obj
        raise MethodNotAllowed("the server does not allow this method on the requested resource")

    def _watch(self, rt: ResourceType, req: ApiRequest) -> WatchStream:
        q = req.query
        validate_list_options(q, watch=True)
        bookmarks = query_bool(q, "allowWatchBookmarks")
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        render: Renderer = default_render
        if _metadata_mode(req.accept):

            def render(kind: str, event: Event) -> bytes:
                return line(kind, _json(_partial(event.obj)))

        if _table_mode(req.accept):
            include = q.get("includeObject", "Metadata")

            def render(kind: str, event: Event) -> bytes:
                return line(
                    kind, _json(table(rt, [event.obj], {"resourceVersion": str(event.rv)}, include))
                )

        try:
            w = self.core.watch(
                rt,
                req.info.namespace,
                self._opts(q),
                bookmarks=bookmarks,
                render=render,
                send_initial_events=query_bool(q, "sendInitialEvents"),
            )
        except ApiError as e:
            if e.code != 410:
                raise
            from simcluster.apiserver.selectors import FieldSelector, LabelSelector

            dead = Watcher(rt.key, None, LabelSelector(), FieldSelector(), False)
            return WatchStream(
                dead, rt, 0, False, b'{"type":"ERROR","object":' + _json(e.to_status()) + b"}\n"
            )
        return WatchStream(w, rt, timeout, bookmarks)
