"""The trainer SDK: async first (``AsyncSandman``), with a blocking twin (``Sandman``).

Modules, bottom up: ``errors`` (typed exceptions), ``settings`` (timeouts, limits, retry
policy), ``transport`` (the facade connection with retries), ``results`` (what tool calls
return), ``tools`` (sessions, files, processes), ``sandbox`` (``AsyncSandbox``), ``client``
(``AsyncSandman``: create, batches, list, owner lease, ``prepare``), ``preparation``
(``AsyncPreparation``: an announcement's progress), ``sync_portal`` (how a blocking wrapper
calls its async twin), ``sync_tools`` (the blocking sessions, files, processes), ``sync``
(the blocking client, sandbox and preparation).
Public names are re-exported from :mod:`sandman`.
"""

from .client import AsyncSandman, new_owner
from .errors import (
    AdmissionFailed,
    CommandFailed,
    Conflict,
    ConnectionFailed,
    DaemonTimeout,
    DaemonUnreachable,
    ImagePullFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    PreparationFailed,
    PreparationTimeout,
    QuotaExceeded,
    RateLimited,
    RetriableError,
    SandboxFailed,
    SandboxNotFound,
    SandboxNotReady,
    SandboxStartError,
    SandboxTerminated,
    SandboxTimeout,
    SandmanError,
    ServerError,
    ServiceUnavailable,
    TerminalError,
    Unauthenticated,
    Unschedulable,
)
from .preparation import AsyncPreparation
from .results import CommandResult, ProcessLogs, SessionResult, StreamEvent
from .sandbox import AsyncSandbox
from .settings import Limits, RetryPolicy, Timeouts
from .sync import Preparation, Sandbox, Sandman
from .sync_tools import Files, Processes, Session
from .tools import AsyncFiles, AsyncProcesses, AsyncSession

__all__ = [
    "AdmissionFailed",
    "AsyncFiles",
    "AsyncPreparation",
    "AsyncProcesses",
    "AsyncSandbox",
    "AsyncSandman",
    "AsyncSession",
    "CommandFailed",
    "CommandResult",
    "Conflict",
    "ConnectionFailed",
    "DaemonTimeout",
    "DaemonUnreachable",
    "Files",
    "ImagePullFailed",
    "InvalidRequest",
    "Limits",
    "NotFound",
    "PermissionDenied",
    "Preparation",
    "PreparationFailed",
    "PreparationTimeout",
    "ProcessLogs",
    "Processes",
    "QuotaExceeded",
    "RateLimited",
    "RetriableError",
    "RetryPolicy",
    "Sandbox",
    "SandboxFailed",
    "SandboxNotFound",
    "SandboxNotReady",
    "SandboxStartError",
    "SandboxTerminated",
    "SandboxTimeout",
    "Sandman",
    "SandmanError",
    "ServerError",
    "ServiceUnavailable",
    "Session",
    "SessionResult",
    "StreamEvent",
    "TerminalError",
    "Timeouts",
    "Unauthenticated",
    "Unschedulable",
    "new_owner",
]
