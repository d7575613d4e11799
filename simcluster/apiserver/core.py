"""The verbs of the API server — create, get, list, update, patch, apply, delete,
deletecollection, watch — with the real server's semantics, independent of HTTP.

Both the HTTP front end and in-process clients (the simulated kubelets) call these methods, so
every client sees the same uid/generateName/resourceVersion/optimistic-concurrency/graceful
deletion behaviour. Kind-specific rules (pod defaults, binding, quotas, namespaces, CRDs) live
in one strategy object per kind (``kinds``, chosen by the table in ``strategies``), called
at the hooks ``strategy.Strategy`` defines; the verbs hold what is common to every kind
and never name one. Strategies and the garbage collector write back through the narrow
``writer.Writer`` this class implements, so none of them imports this module.

``ApiCore`` is one object with every verb, as the dispatcher and in-process clients see it,
assembled here from one module per kind of verb: ``read_verbs`` (get, list, watch),
``write_verbs`` (create, update, patch, apply), ``delete_verbs`` (delete, deletecollection,
graceful deletion), over the state and helpers of ``core_base``. The rules of one concern
each live beside them: list/watch options and continue tokens (``listoptions``),
DeleteOptions (``deleteoptions``), server-side apply's field ownership (``apply``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.apiserver.auth import Authenticator
from simcluster.apiserver.core_base import Obj
from simcluster.apiserver.delete_verbs import DeleteVerbs
from simcluster.apiserver.gc import GarbageCollector
from simcluster.apiserver.meta import IdSource
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Store
from simcluster.apiserver.strategies import STRATEGIES, Strategies, StrategyFactory
from simcluster.apiserver.strategy import StrategyContext
from simcluster.apiserver.write_verbs import WriteVerbs
from simcluster.errors import MethodNotAllowed

__all__ = ["ApiCore"]


class ApiCore(WriteVerbs, DeleteVerbs):
    """Kubernetes object semantics over a ``Store``.

    ``strategies`` maps store keys to strategy factories (default: every built-in kind with
    rules); the garbage collector listens to the store, so it sees every put and removal."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        auth: Authenticator | None = None,
        strategies: Mapping[str, StrategyFactory] = STRATEGIES,
        exempt_runtime_classes: tuple[str, ...] = (),
    ) -> None:
        self.registry = registry
        self.store = store
        self.ids = IdSource()
        self.auth = auth or Authenticator()
        self.gc = GarbageCollector(self, registry)
        store.add_listener(self.gc.on_event)
        ctx = StrategyContext(
            writer=self, objects=store, registry=registry, auth=self.auth,
            exempt_runtime_classes=exempt_runtime_classes,
        )  # fmt: skip
        self.strategies = Strategies(ctx, strategies)

    def create_subresource(
        self, rt: ResourceType, subresource: str, namespace: str, name: str, body: Any
    ) -> Obj:
        """POST to a subresource (pods/binding, serviceaccounts/token): the kind's answer."""
        strategy = self.strategies.for_key(rt.key)
        return strategy.create_subresource(rt, subresource, namespace, name, body)

    def require_verb(self, rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise MethodNotAllowed(
                "the server does not allow this method on the requested resource"
            )
