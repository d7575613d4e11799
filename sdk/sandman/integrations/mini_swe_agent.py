"""mini-swe-agent's ``Environment`` on a Sandman sandbox.

A trainer selects it in the agent's configuration, with nothing else changed::

    environment:
      environment_class: sandman.integrations.mini_swe_agent.SandmanEnvironment
      image: registry.example/swe/task-123:latest
      cwd: /testbed
      timeout: 60

It follows the protocol of mini-swe-agent's own environments (``DockerEnvironment``,
``SwerexDockerEnvironment``, version 2.x): keyword arguments validated into ``self.config``,
the sandbox created in ``__init__``, ``execute(action, cwd="", *, timeout=None)`` answering
``{"output", "returncode", "exception_info"}`` with stdout and stderr merged in the order they
were written, a failed or timed-out command as ``returncode`` -1 with ``exception_info`` (a
command's trouble is an observation for the model, not an exception), ``Submitted`` raised on
the completion marker, ``get_template_vars``/``serialize`` for the templates and the
trajectory, and ``cleanup`` to release the sandbox.

What is Sandman's own: every ``execute`` is one exec (the command runs once even if the
connection breaks: the SDK re-attaches by the exec's id), its timeout is the daemon's (the
command's whole process group is killed), ``max_output_bytes`` caps what the daemon keeps.
A sandbox that is gone (released, expired, its node lost) cannot answer any later action, so
instead of feeding the model errors until a step limit the environment ends the agent's run
the way mini-swe-agent's limits do: an ``InterruptAgentFlow`` carrying an ``exit`` message
whose ``exit_status`` names the SDK's exception.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any

from sandman.sdk import (
    CommandResult,
    Sandbox,
    SandboxNotFound,
    SandboxTerminated,
    Sandman,
    SandmanError,
)

from . import require

__all__ = ["SandmanEnvironment", "SandmanEnvironmentConfig"]

_INTEGRATION = "sandman.integrations.mini_swe_agent"
_SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: Redirects the interpreter's stderr into its stdout, as ``docker exec`` with
#: ``stderr=STDOUT`` does: one pipe, so the merged output keeps the order of the writes.
_MERGE_STDERR = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh"]
#: The fields of ``platform.uname()``, which mini-swe-agent's templates use (``{{system}}``).
_UNAME_FIELDS = ("system", "node", "release", "version", "machine", "processor")
_UNAME_COMMAND = "uname -s; uname -n; uname -r; uname -v; uname -m; uname -p 2>/dev/null || true"
#: Config fields never written into templates or trajectories.
_SECRET_FIELDS = frozenset({"token"})


@dataclass
class SandmanEnvironmentConfig:
    """The environment's keyword arguments (the ``environment:`` section of a config)."""

    image: str
    """The task image of the sandbox."""
    cwd: str = "/"
    """Working directory of every command (an action's own ``cwd`` wins)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of every command."""
    forward_env: list[str] = field(default_factory=list)
    """Variables passed on from the trainer's environment if set there (``env`` wins)."""
    timeout: int = 30
    """Seconds a command may run before its process group is killed."""
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-lc"])
    """The command is appended to this argv (as in ``DockerEnvironment``)."""
    max_output_bytes: int | None = None
    """Output the daemon keeps per command (None: its default, 1 MiB)."""
    url: str | None = None
    """The facade (None: ``SANDMAN_URL``)."""
    token: str | None = None
    """The tenant's token (None: ``SANDMAN_TOKEN``); never serialized."""
    ca_file: str | None = None
    """PEM CA bundle of an ``https://`` facade (None: ``SANDMAN_CA_FILE`` or the system's)."""
    owner: str | None = None
    """The run id the sandbox is labelled with (None: a new one per environment)."""
    lease_s: int | None = 60
    """The owner lease: the sandbox is collected this long after the trainer died."""
    sandbox_class: str | None = None
    """The sandbox class (CPU, memory; None: the facade's default)."""
    ttl_s: int | None = None
    """Seconds after which the sandbox is deleted whatever happens (None: the default)."""
    idle_timeout_s: int | None = None
    """Seconds without a command after which the sandbox ends itself."""
    labels: dict[str, str] = field(default_factory=dict)
    """Labels to find the sandbox by (``sandman ls -l task=...``)."""
    startup_timeout: float | None = None
    """Seconds to wait for the sandbox to be ready (None: the SDK's default)."""

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, not {self.timeout}")
        if not self.interpreter:
            raise ValueError("interpreter must name a program")

    def public(self) -> dict[str, Any]:
        """The fields as JSON-able data, the token left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _SECRET_FIELDS}

    def create_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"labels": self.labels}
        for key in ("sandbox_class", "ttl_s", "idle_timeout_s"):
            if (value := getattr(self, key)) is not None:
                options[key] = value
        return options


class SandmanEnvironment:
    """Executes mini-swe-agent's actions in one Sandman sandbox, created on construction."""

    config: SandmanEnvironmentConfig

    def __init__(
        self,
        *,
        config_class: type[SandmanEnvironmentConfig] = SandmanEnvironmentConfig,
        logger: logging.Logger | None = None,
        **kwargs: Any,
    ) -> None:
        """See :class:`SandmanEnvironmentConfig` for the keyword arguments."""
        self._exceptions = _harness("minisweagent.exceptions")
        self._serialize = _harness("minisweagent.utils.serialize")
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config = config_class(**kwargs)
        self.client: Sandman | None = None
        self.sandbox: Sandbox | None = None
        self._uname: dict[str, str] = {}
        self._start()

    def _start(self) -> None:
        config = self.config
        client = Sandman(
            config.url,
            config.token,
            owner=config.owner,
            lease_s=config.lease_s,
            # The owner may be shared by many environments of one run: this one releases
            # its own sandbox only.
            release_on_exit=False,
            ca_file=config.ca_file,
        )
        sandbox: Sandbox | None = None
        try:
            client.__enter__()
            sandbox = client.create(
                config.image, timeout_s=config.startup_timeout, **config.create_options()
            )
            self._uname = self._read_uname(sandbox)
        except BaseException:
            if sandbox is not None:
                sandbox.release_quietly()
            client.close()
            raise
        self.client, self.sandbox = client, sandbox
        self.logger.info("Started sandbox %s of %s", sandbox.id, config.image)

    # --- the protocol ---------------------------------------------------------------------
    def execute(
        self, action: dict[str, Any] | str, cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        """Run the action's command; the observation as mini-swe-agent's environments give it."""
        command = action.get("command", "") if isinstance(action, dict) else action
        limit = timeout or self.config.timeout
        try:
            result = self._live_sandbox().exec(
                [*_MERGE_STDERR, *self.config.interpreter, command],
                cwd=cwd or self.config.cwd or None,
                env=self._command_env(),
                timeout_s=limit,
                max_output_bytes=self.config.max_output_bytes,
            )
        except (SandboxTerminated, SandboxNotFound) as e:
            raise self._sandbox_lost(e) from e
        except SandmanError as e:
            output = _error_observation("", str(e), type(e).__name__)
        else:
            output = _observation(command, limit, result)
        self._check_finished(output)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        merged: dict[str, Any] = self._serialize.recursive_merge(
            self.config.public(), self._uname, kwargs
        )
        return merged

    def serialize(self) -> dict[str, Any]:
        cls = type(self)
        return {
            "info": {
                "config": {
                    "environment": self.config.public(),
                    "environment_type": f"{cls.__module__}.{cls.__name__}",
                },
                "sandman": {
                    "sandbox_id": self.sandbox.id if self.sandbox else None,
                    "owner": self.client.owner if self.client else None,
                },
            }
        }

    def cleanup(self) -> None:
        """Release the sandbox and close the connection; calling it again does nothing."""
        sandbox, self.sandbox = self.sandbox, None
        client, self.client = self.client, None
        if client is None:
            return
        try:
            if sandbox is not None:
                self._release(sandbox)
        finally:
            client.close()

    def _release(self, sandbox: Sandbox) -> None:
        try:
            sandbox.release()
        except SandmanError as e:
            self.logger.warning("Could not release sandbox %s: %s", sandbox.id, e)
        else:
            self.logger.info("Released sandbox %s", sandbox.id)

    def __enter__(self) -> SandmanEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def __del__(self) -> None:
        # As mini-swe-agent's own environments do: a forgotten environment still releases
        # its sandbox (and the owner lease would collect it anyway).
        if getattr(self, "client", None) is not None:
            try:
                self.cleanup()
            except Exception as e:  # interpreter shutdown: the portal may be gone
                logging.getLogger("sandman.integrations").debug("cleanup in __del__: %s", e)

    # --- helpers --------------------------------------------------------------------------
    def _live_sandbox(self) -> Sandbox:
        if self.sandbox is None:
            raise RuntimeError(f"{type(self).__name__} was cleaned up: it has no sandbox")
        return self.sandbox

    def _command_env(self) -> dict[str, str]:
        forwarded = {k: v for k in self.config.forward_env if (v := os.environ.get(k)) is not None}
        return forwarded | self.config.env

    def _read_uname(self, sandbox: Sandbox) -> dict[str, str]:
        """``platform.uname()``'s fields, of the sandbox (read once, at the start, so that
        rendering a template never waits on the sandbox): the templates describe the system
        the model's commands run on, not the trainer's. Empty if the image has no ``uname``."""
        result = sandbox.exec(_UNAME_COMMAND, timeout_s=self.config.timeout)
        lines = result.stdout.splitlines() if result.exit_code == 0 else []
        values = [*lines, *[""] * len(_UNAME_FIELDS)][: len(_UNAME_FIELDS)]
        uname = dict(zip(_UNAME_FIELDS, values, strict=True))
        if uname["processor"] == "unknown":
            uname["processor"] = ""
        return uname

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raise ``Submitted`` if the output starts with the completion marker (as upstream)."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == _SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise self._exceptions.Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def _sandbox_lost(self, error: SandmanError) -> BaseException:
        exception: BaseException = self._exceptions.InterruptAgentFlow(
            {
                "role": "exit",
                "content": f"The sandbox is gone: {error}",
                "extra": {
                    "exit_status": type(error).__name__,
                    "submission": "",
                    "reason": error.reason,
                    "sandbox_id": self.sandbox.id if self.sandbox else None,
                },
            }
        )
        return exception


def _harness(module: str) -> ModuleType:
    return require(module, extra="mini-swe-agent", integration=_INTEGRATION)


def _observation(command: str, limit: float, result: CommandResult) -> dict[str, Any]:
    if result.timed_out:
        message = f"Command '{command}' timed out after {limit:g} seconds"
        return _error_observation(result.stdout, message, "TimeoutExpired")
    spawn_error = result.raw.spawn_error
    output: dict[str, Any] = {
        "output": result.stdout,
        "returncode": _returncode(result),
        "exception_info": f"The command could not be started: {spawn_error}" if spawn_error else "",
    }
    if result.truncated:
        output["extra"] = {"output_truncated": True, "output_bytes": result.raw.stdout.total_bytes}
    return output


def _returncode(result: CommandResult) -> int:
    """The exit code, or a shell's ``128 + n`` for a command killed by signal n."""
    if result.exit_code is not None:
        return result.exit_code
    try:
        return 128 + signal.Signals[result.signal or ""].value
    except KeyError:
        return -1


def _error_observation(output: str, message: str, exception_type: str) -> dict[str, Any]:
    return {
        "output": output,
        "returncode": -1,
        "exception_info": f"An error occurred while executing the command: {message}",
        "extra": {"exception_type": exception_type, "exception": message},
    }
