"""The CRI ImageService of every simulated node, at the protocol level.

Why the protocol and not a Python interface: Sandman's node agent talks to a real node's
container runtime through ``runtime.v1.ImageService`` over a unix socket (gRPC). Serving the
same service here lets the *same agent code* run against 400 simulated nodes: ListImages,
ImageStatus, PullImage, RemoveImage and ImageFsInfo, each answered from the node's image
cache (``images.py``) — the cache the kubelet's pod starts use — so an image pulled through
CRI is present for the next pod start, a pod start's pull is listed by CRI, and the kubelet's
image GC removes images both see. Pull latency, bandwidth and the node's pull parallelism are
the profile's.

One ``grpc.aio`` server per node on ``<workdir>/cri/<node>.sock`` (or a short temporary
directory when that path would pass the 107-byte limit of a unix socket address);
``<workdir>/cri-sockets.json`` maps node names to socket paths for whoever starts agents.
Errors are what containerd answers: a failed pull is ``UNKNOWN`` with containerd's message,
a malformed request ``INVALID_ARGUMENT``; RemoveImage of an absent image succeeds (CRI says
it must be idempotent).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from simcluster.kubelet.images import ImageCache, PullFailure, normalize_image

__all__ = ["CriServers", "ImageService"]

log = logging.getLogger(__name__)
_SOCKET_MAX = 107


class ImageService(api_pb2_grpc.ImageServiceServicer):
    """``runtime.v1.ImageService`` over one node's image cache."""

    def __init__(self, node: str, images: ImageCache) -> None:
        self.node = node
        self.images = images
        self.calls: dict[str, int] = {}
        #: PullImage calls under way on this node, and the most at once (tests read them).
        self.pulls_in_flight = 0
        self.peak_pulls_in_flight = 0
        # The full listing, rebuilt only when the cache changed: 400 agents listing 742
        # images every 30 s would otherwise build ~300,000 messages per round.
        self._listing: tuple[int, Any] | None = None

    def _count(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1

    def _image(self, key: str) -> api_pb2.Image:
        return api_pb2.Image(
            id=self.images.image_id(key),
            repo_tags=[key],
            size=self.images.present[key],
            spec=api_pb2.ImageSpec(image=key),
        )

    async def ListImages(self, request: Any, context: Any) -> Any:
        self._count("ListImages")
        wanted = request.filter.image.image if request.HasField("filter") else ""
        if wanted:
            key = normalize_image(wanted)
            images = [self._image(key)] if key in self.images.present else []
            return api_pb2.ListImagesResponse(images=images)
        if self._listing is None or self._listing[0] != self.images.version:
            keys = sorted(self.images.present)
            response = api_pb2.ListImagesResponse(images=[self._image(k) for k in keys])
            self._listing = (self.images.version, response)
        return self._listing[1]

    async def ImageStatus(self, request: Any, context: Any) -> Any:
        self._count("ImageStatus")
        ref = request.image.image
        if not ref:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ImageSpec.image is empty")
        key = normalize_image(ref)
        if key not in self.images.present:
            return api_pb2.ImageStatusResponse()
        return api_pb2.ImageStatusResponse(image=self._image(key))

    async def PullImage(self, request: Any, context: Any) -> Any:
        self._count("PullImage")
        ref = request.image.image
        if not ref:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ImageSpec.image is empty")
        self.pulls_in_flight += 1
        self.peak_pulls_in_flight = max(self.peak_pulls_in_flight, self.pulls_in_flight)
        try:
            key = await self.images.pull(ref)
        except PullFailure as e:
            await context.abort(grpc.StatusCode.UNKNOWN, e.message)
        finally:
            self.pulls_in_flight -= 1
        return api_pb2.PullImageResponse(image_ref=self.images.image_id(key))

    async def RemoveImage(self, request: Any, context: Any) -> Any:
        self._count("RemoveImage")
        ref = request.image.image
        if not ref:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ImageSpec.image is empty")
        self.images.remove(ref)
        return api_pb2.RemoveImageResponse()

    async def ImageFsInfo(self, request: Any, context: Any) -> Any:
        self._count("ImageFsInfo")
        usage = api_pb2.FilesystemUsage(
            timestamp=time.time_ns(),
            fs_id=api_pb2.FilesystemIdentifier(mountpoint="/var/lib/containerd"),
            used_bytes=api_pb2.UInt64Value(value=self.images.used_bytes()),
            inodes_used=api_pb2.UInt64Value(value=len(self.images.present)),
        )
        return api_pb2.ImageFsInfoResponse(image_filesystems=[usage])


class CriServers:
    """One ImageService server per node, started and stopped with the cluster."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.sockets: dict[str, Path] = {}
        self.services: dict[str, ImageService] = {}
        self._servers: dict[str, grpc.aio.Server] = {}
        self._dir = workdir / "cri"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if len(str(self._dir / "node-99999.sock")) > _SOCKET_MAX:
            self._tmp = tempfile.TemporaryDirectory(prefix="sc-cri-")
            self._dir = Path(self._tmp.name)
        self._dir.mkdir(parents=True, exist_ok=True)

    async def add(self, node: str, images: ImageCache) -> Path:
        path = self._dir / f"{node}.sock"
        if len(str(path)) > _SOCKET_MAX:
            raise ValueError(f"CRI socket path too long for a unix socket: {path}")
        path.unlink(missing_ok=True)
        server = grpc.aio.server()
        service = ImageService(node, images)
        api_pb2_grpc.add_ImageServiceServicer_to_server(service, server)
        server.add_insecure_port(f"unix:{path}")
        await server.start()
        self._servers[node], self.services[node], self.sockets[node] = server, service, path
        return path

    async def remove(self, node: str) -> None:
        server = self._servers.pop(node, None)
        self.services.pop(node, None)
        path = self.sockets.pop(node, None)
        if server is not None:
            await server.stop(None)
        if path is not None:
            path.unlink(missing_ok=True)
        self.write_index()

    def write_index(self) -> Path:
        """``<workdir>/cri-sockets.json``: node -> socket path."""
        index = self.workdir / "cri-sockets.json"
        tmp = index.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: str(p) for n, p in sorted(self.sockets.items())}))
        tmp.replace(index)
        return index

    async def close(self) -> None:
        for node in list(self._servers):
            await self.remove(node)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
