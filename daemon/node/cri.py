"""The node's container runtime, as the agent sees it: the CRI ImageService over gRPC.

Why CRI and not containerd's own API: CRI is what the kubelet uses, so the agent sees the
same images the kubelet does (the same namespace, ``k8s.io``, the same names), whatever the
runtime (containerd, CRI-O). The stubs are ``cri_api.v1`` (the maintained package
``container-runtime-interface-api``), over grpcio's asyncio API on the runtime's unix socket.

Every RPC has a deadline; a failure is a :class:`CriError` with the gRPC status code and
the runtime's message (``UNKNOWN: failed to pull and unpack image ...`` for a missing
image), chained to the gRPC error.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

__all__ = ["CriError", "ImageClient", "RuntimeImage"]


class CriError(Exception):
    """A CRI call failed. ``code`` is the gRPC status name (``UNKNOWN``, ``UNAVAILABLE``...)."""

    def __init__(self, method: str, code: str, details: str) -> None:
        super().__init__(f"{method}: {code}: {details}")
        self.method, self.code, self.details = method, code, details

    @property
    def reason(self) -> str:
        """A short machine-readable cause for Events and the published failures."""
        if self.code == "UNAVAILABLE":
            return "RuntimeUnavailable"
        if self.code == "DEADLINE_EXCEEDED":
            return "PullTimeout"
        return "ErrImagePull"


@dataclass(frozen=True, slots=True)
class RuntimeImage:
    id: str
    tags: tuple[str, ...]
    size: int


class ImageClient:
    """``runtime.v1.ImageService`` on one unix socket."""

    def __init__(self, socket: str, *, timeout_s: float = 10.0) -> None:
        target = socket if socket.startswith("unix:") else f"unix:{socket}"
        self._channel = grpc.aio.insecure_channel(target)
        self._stub = api_pb2_grpc.ImageServiceStub(self._channel)
        self._timeout = timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def list_images(self) -> list[RuntimeImage]:
        try:
            resp = await self._stub.ListImages(api_pb2.ListImagesRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as e:
            raise _error("ListImages", e) from e
        return [RuntimeImage(i.id, tuple(i.repo_tags), int(i.size)) for i in resp.images]

    async def pull(self, image: str, timeout_s: float) -> str:
        """Pull ``image``; the runtime's image reference (id)."""
        request = api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=image))
        try:
            resp = await self._stub.PullImage(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise _error("PullImage", e) from e
        return str(resp.image_ref)

    async def remove(self, image: str) -> None:
        request = api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=image))
        try:
            await self._stub.RemoveImage(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as e:
            raise _error("RemoveImage", e) from e

    async def fs_used_bytes(self) -> int:
        try:
            resp = await self._stub.ImageFsInfo(api_pb2.ImageFsInfoRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as e:
            raise _error("ImageFsInfo", e) from e
        return sum(int(fs.used_bytes.value) for fs in resp.image_filesystems)


def _error(method: str, e: grpc.aio.AioRpcError) -> CriError:
    code = e.code()
    return CriError(method, code.name if code is not None else "UNKNOWN", e.details() or "")
