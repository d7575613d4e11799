"""A standing pool end to end, as real processes (simcluster's process runtime: every pool
pod runs a real pool daemon; two facade replicas that both apply the tenant's pools; the
leading controller fills them): a tenant configured with a standing pool gets a create
served from it, an announced pool of the same image is claimed before it, the standing pool
refills what it gave, and nothing claimed returns to it."""

from __future__ import annotations

from typing import Any

import pytest

from facade.standing import standing_name
from facade.tenancy import StandingPool
from kube import PODS, KubeClient
from kube.pool_contract import LABEL_POOL, LABEL_STANDING, pool_slot
from kube.preparation_contract import IMAGE_PREPARATIONS
from sandman import AsyncSandman
from sandman.wire.facade import DEFAULT_CLASS
from tests.support.kube import FAST
from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

IMAGE = "registry.example/tasks/standing:1"
STACK = {
    "profile": "dev",
    "tenant_config": {"dev": {"pools": [{"image": IMAGE, "class": DEFAULT_CLASS, "min": 2}]}},
}
NAME = standing_name(StandingPool(IMAGE, DEFAULT_CLASS, 2, 600))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def _standing_pods(client: KubeClient, namespace: str) -> dict[str, dict[str, Any]]:
    listed = await client.list(PODS, namespace, label_selector=f"{LABEL_POOL}={NAME}")
    return {
        p["metadata"]["name"]: p
        for p in listed["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


async def test_a_create_is_served_from_the_standing_pool_which_refills(
    stack: RunningStack, owner: str
) -> None:
    running = stack.stack
    namespace = running.namespace()
    async with (
        await KubeClient.connect(FAST, kubeconfig=str(running.kubeconfig)) as kube,
        AsyncSandman(stack.urls[0], stack.token, owner=owner) as trainer,
    ):

        async def unclaimed(n: int, claimed: set[str]) -> set[str] | None:
            pods = await _standing_pods(kube, namespace)
            ready = {name for name, p in pods.items() if _ready(p)} - claimed
            return ready if len(ready) == n else None

        await wait_until_async(lambda: unclaimed(2, set()), timeout_s=90)
        # Both facade replicas applied the pool: one object, under the pool's fixed name.
        objects = await kube.list(IMAGE_PREPARATIONS, namespace, label_selector=LABEL_STANDING)
        assert [o["metadata"]["name"] for o in objects["items"]] == [NAME]
        # An announced sandbox of the same image: claimed first (it expires with its
        # announcement; the standing pool refills what it gives).
        prep = await trainer.prepare([(IMAGE, 1)], sandboxes=True, class_=DEFAULT_CLASS)

        async def announced_ready() -> Any:
            view = await prep.refresh()
            return view.pool if view.pool is not None and view.pool.ready == 1 else None

        await wait_until_async(announced_ready, timeout_s=60)
        selector = f"{LABEL_POOL}={prep.id}"
        (announced,) = [
            p["metadata"]["name"]
            for p in (await kube.list(PODS, namespace, label_selector=selector))["items"]
        ]
        boxes = await trainer.create_many(2, IMAGE, env={"STEP": "3"}, timeout_s=60)
        ids = [b.id for b in boxes]
        # Announced, then standing (a pod of the pool: which one may differ from those seen
        # above, should one have failed and been replaced in between on a loaded machine).
        claimed = pool_slot(NAME, ids[1])
        assert ids[0] == announced and claimed is not None
        for box in boxes:
            assert (await box.exec("echo $STEP")).stdout.strip() == "3"
        # The pool refills to two unclaimed, above the claimed one's slot (slots only grow);
        # the claimed one stays the trainer's.
        refilled = await wait_until_async(lambda: unclaimed(2, {ids[1]}), timeout_s=60)
        slots = [s[1] for n in refilled if (s := pool_slot(NAME, n))]
        assert ids[1] not in refilled and len(slots) == 2 and max(slots) > claimed[1]
        await trainer.release_owner()

        async def released() -> bool:
            pods = await _standing_pods(kube, namespace)
            return ids[1] not in pods and len(pods) == 2

        await wait_until_async(released, timeout_s=60)  # it never returns to the pool
        # The pool's object gone (what a facade does when the file no longer names it; the
        # replicas would apply it again at their next resync): its unclaimed pods go, and
        # with them this test's sandbox processes.
        await kube.delete(IMAGE_PREPARATIONS, NAME, namespace)

        async def gone() -> bool:  # deleted, not only being deleted
            selector = f"{LABEL_POOL}={NAME}"
            return not (await kube.list(PODS, namespace, label_selector=selector))["items"]

        await wait_until_async(gone, timeout_s=60)
