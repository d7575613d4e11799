"""SWE-ReX's ``AbstractDeployment`` as a Sandman sandbox: ``start`` creates it and waits until
it is ready, ``runtime`` is a :class:`~sandman.integrations.swerex.runtime.SandmanRuntime` on
it, ``stop`` releases it.

Where SWE-ReX's Docker or Modal deployments start a container and then its server inside,
a Sandman sandbox is ready with its daemon already serving, so ``start`` is one create (a
pooled sandbox's claim, when the facade has one warm). The connection is the trainer's
:class:`~sandman.AsyncSandman` with its owner lease: if the process dies without ``stop``,
the sandbox is collected one lease later. A sandbox that cannot start (its image cannot be
pulled, no node has room in time) raises SWE-ReX's ``DeploymentStartupError`` from the SDK's
typed exception.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.hooks.abstract import CombinedDeploymentHook, DeploymentHook
from swerex.exceptions import DeploymentNotStartedError, DeploymentStartupError
from swerex.runtime.abstract import IsAliveResponse

from sandman.sdk import AsyncSandbox, AsyncSandman, SandboxStartError

from .runtime import SandmanRuntime

__all__ = ["SandmanDeployment", "SandmanDeploymentConfig"]


class SandmanDeploymentConfig(BaseModel):
    """The deployment's settings (SWE-ReX's config convention: ``get_deployment()``)."""

    image: str
    """The task image of the sandbox."""
    url: str | None = None
    """The facade (None: ``SANDMAN_URL``)."""
    token: str | None = None
    """The tenant's token (None: ``SANDMAN_TOKEN``)."""
    ca_file: str | None = None
    """PEM CA bundle of an ``https://`` facade."""
    owner: str | None = None
    """The run id the sandbox is labelled with (None: a new one)."""
    lease_s: int | None = 60
    """The owner lease: the sandbox is collected this long after the process died."""
    sandbox_class: str | None = None
    ttl_s: int | None = None
    idle_timeout_s: int | None = None
    labels: dict[str, str] = {}
    env: dict[str, str] = {}
    """Environment variables of every command in the sandbox."""
    startup_timeout: float | None = None
    """Seconds to wait for the sandbox to be ready (None: the SDK's default)."""
    check_syntax: bool = True
    """``bash -n`` before each session command, as SWE-ReX does (one more exec per action)."""

    type: Literal["sandman"] = "sandman"
    """Discriminator, as SWE-ReX's deployment configs have."""

    model_config = ConfigDict(extra="forbid")

    def get_deployment(self) -> SandmanDeployment:
        return SandmanDeployment(**self.model_dump(exclude={"type"}))

    def create_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"labels": self.labels, "env": self.env}
        for key in ("sandbox_class", "ttl_s", "idle_timeout_s"):
            if (value := getattr(self, key)) is not None:
                options[key] = value
        return options


class SandmanDeployment(AbstractDeployment):
    """One sandbox per deployment; ``await start()``, use ``runtime``, ``await stop()``."""

    def __init__(self, *, logger: logging.Logger | None = None, **kwargs: Any) -> None:
        """See :class:`SandmanDeploymentConfig` for the keyword arguments."""
        self.logger = logger or logging.getLogger("rex-deploy")
        self._config = SandmanDeploymentConfig(**kwargs)
        self._hooks = CombinedDeploymentHook()
        self._client: AsyncSandman | None = None
        self._sandbox: AsyncSandbox | None = None
        self._runtime: SandmanRuntime | None = None

    @classmethod
    def from_config(cls, config: SandmanDeploymentConfig) -> SandmanDeployment:
        return config.get_deployment()

    def add_hook(self, hook: DeploymentHook) -> None:
        self._hooks.add_hook(hook)

    @property
    def sandbox(self) -> AsyncSandbox:
        if self._sandbox is None:
            raise DeploymentNotStartedError()
        return self._sandbox

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:  # noqa: ASYNC109 (SWE-ReX's signature)
        if self._runtime is None:
            return IsAliveResponse(is_alive=False, message="Runtime is None.")
        return await self._runtime.is_alive(timeout=timeout)

    async def start(self) -> None:
        """Create the sandbox and wait until it is ready."""
        if self._runtime is not None:
            return
        config = self._config
        client = AsyncSandman(
            config.url,
            config.token,
            owner=config.owner,
            lease_s=config.lease_s,
            release_on_exit=False,  # an owner shared by many deployments: release ours only
            ca_file=config.ca_file,
        )
        await client.__aenter__()
        self._hooks.on_custom_step(f"Starting Sandman sandbox of {config.image}")
        try:
            sandbox = await client.create(
                config.image, timeout_s=config.startup_timeout, **config.create_options()
            )
        except SandboxStartError as e:
            await client.aclose()
            raise DeploymentStartupError(f"sandbox of {config.image} did not start: {e}") from e
        except BaseException:
            await client.aclose()
            raise
        self._client, self._sandbox = client, sandbox
        self._runtime = SandmanRuntime(
            sandbox, check_syntax=config.check_syntax, logger=self.logger
        )
        self.logger.info("Sandbox %s of %s is ready", sandbox.id, config.image)

    async def stop(self) -> None:
        """Close the runtime's sessions, release the sandbox, close the connection."""
        runtime, self._runtime = self._runtime, None
        sandbox, self._sandbox = self._sandbox, None
        client, self._client = self._client, None
        try:
            if runtime is not None:
                await runtime.close()
        finally:
            if sandbox is not None:
                await sandbox.release_quietly()
            if client is not None:
                await client.aclose()

    @property
    def runtime(self) -> SandmanRuntime:
        if self._runtime is None:
            raise DeploymentNotStartedError()
        return self._runtime

    def __del__(self) -> None:
        # SWE-ReX's base class runs stop() on whatever event loop it finds; the connection
        # belongs to the loop that started it. The owner lease collects a forgotten sandbox.
        if getattr(self, "_runtime", None) is not None:
            self.logger.warning("SandmanDeployment deleted while started: call stop()")
