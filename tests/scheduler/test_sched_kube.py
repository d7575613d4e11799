"""Decoding Kubernetes JSON: pod requests like PodRequests, nodes, images."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import Decoder, Resources, normalize_image, pod_requests
from tests.support.pods import node_json, pod_json

Mi = 2**20


def c(cpu: str, mem: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "image": "i",
        "resources": {"requests": {"cpu": cpu, "memory": mem}},
        **extra,
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [c("250m", "512Mi")]}, Resources(250, 512 * Mi)),
        ({"containers": [c("250m", "512Mi"), c("100m", "64Mi")]}, Resources(350, 576 * Mi)),
        # An init container bigger than the app sets the pod's request.
        ({"containers": [c("250m", "512Mi")], "initContainers": [c("1", "64Mi")]},
         Resources(1000, 512 * Mi)),
        # Init containers run one at a time: max, not sum.
        ({"containers": [c("100m", "1Mi")], "initContainers": [c("500m", "1Mi"), c("400m", "1Mi")]},
         Resources(500, 1 * Mi)),
        # A sidecar (restartable init container) runs alongside the app: it adds.
        ({"containers": [c("250m", "512Mi")],
          "initContainers": [c("50m", "32Mi", restartPolicy="Always")]},
         Resources(300, 544 * Mi)),
        # A plain init container after a sidecar runs next to it: init + sidecar.
        ({"containers": [c("100m", "1Mi")],
          "initContainers": [c("50m", "1Mi", restartPolicy="Always"), c("500m", "1Mi")]},
         Resources(550, 2 * Mi)),
        # Pod overhead (RuntimeClass) is added on top.
        ({"containers": [c("250m", "512Mi")], "overhead": {"cpu": "10m", "memory": "16Mi"}},
         Resources(260, 528 * Mi)),
        ({"containers": [{"name": "x", "image": "i"}]}, Resources()),
        ({"containers": [{"name": "x", "image": "i", "resources": {"requests": {
            "cpu": "1", "nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}}}]},
         Resources(1000, 0, 2**30, (("nvidia.com/gpu", 1),))),
    ],
)  # fmt: skip
def test_pod_requests(spec: dict[str, Any], expected: Resources) -> None:
    assert pod_requests(spec) == expected


@pytest.mark.parametrize(
    ("ref", "normal"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.25", "docker.io/library/nginx:1.25"),
        ("user/app", "docker.io/user/app:latest"),
        ("ghcr.io/org/app:v1", "ghcr.io/org/app:v1"),
        ("localhost/app", "localhost/app:latest"),
        ("127.0.0.1:5000/task:7", "127.0.0.1:5000/task:7"),
        ("registry:5000/task", "registry:5000/task:latest"),
        ("repo@sha256:abc", "docker.io/library/repo@sha256:abc"),
    ],
)
def test_normalize_image(ref: str, normal: str) -> None:
    assert normalize_image(ref) == normal


def test_node_decoding() -> None:
    obj = node_json(
        "n1",
        "15800m",
        "62Gi",
        "110",
        taints=[{"key": "dedicated", "value": "rl", "effect": "NoSchedule"}],
        conditions={"Ready": "False", "MemoryPressure": "True", "DiskPressure": "False"},
        images=["nginx", "registry.local/task:1"],
        unschedulable=True,
    )
    node = Decoder().node(obj)
    assert node.allocatable == Resources(15800, 62 * 2**30)
    assert node.max_pods == 110
    assert node.ready == "False"
    assert node.pressure == frozenset({"MemoryPressure"})
    assert node.unschedulable
    assert node.taints[0].key == "dedicated"
    assert node.images == {"docker.io/library/nginx:latest", "registry.local/task:1"}


def test_identical_pods_share_one_shape() -> None:
    decoder = Decoder()
    a, b = decoder.pod(pod_json("a")), decoder.pod(pod_json("b"))
    assert a.shape is b.shape
    assert decoder.pod(pod_json("c", cpu="500m")).shape != a.shape


def test_bound_fast_path_agrees_with_full_decoding() -> None:
    decoder = Decoder()
    for obj in [
        pod_json("a", node="n1", phase="Running"),
        pod_json("b", node="n1", phase="Pending"),
        pod_json("c", node="n1", phase="Succeeded"),
        pod_json("d", node="n1", phase="Running", deleting=True),
        pod_json("e", node="n1", phase="Running", deleting=True, stopped=True),
        pod_json("f"),
    ]:
        pod = decoder.pod(obj)
        uid, node, req, counts, starting = decoder.bound(obj)
        assert (uid, node, counts, starting) == (pod.uid, pod.node_name, pod.counts, pod.starting)
        if counts:
            assert req == pod.shape.requests
