"""The trainer SDK: async first (``AsyncSandman``), with a blocking twin (``Sandman``).

Modules, bottom up: ``errors`` (typed exceptions), ``settings`` (timeouts, limits, retry
policy), ``transport`` (the facade connection with retries), ``results`` (what tool calls
return), ``tools`` (sessions, files, processes), ``sandbox`` (``AsyncSandbox``), ``client``
(``AsyncSandman``: create, batches, list, owner lease, ``prepare``; the create keywords are
``create_options``, generated from the wire model), ``announcement`` (``AsyncPreparation``:
an announcement's progress), ``ports`` (``AsyncPort``: a server inside a sandbox),
``blocking`` (the blocking twins, generated from the async
classes, and the portal they are driven through).
Public names are re-exported from :mod:`sandman`.
"""

from .announcement import AsyncPreparation
from .blocking.announcement import Preparation
from .blocking.client import Sandman
from .blocking.ports import Port
from .blocking.sandbox import Sandbox
from .blocking.tools import Files, Processes, Session
from .client import AsyncSandman, new_owner
from .create_options import CreateOptions
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
from .ports import AsyncPort, PortResponse
from .results import CommandResult, ProcessLogs, SessionResult, StreamEvent
from .sandbox import AsyncSandbox
from .settings import Limits, RetryPolicy, Timeouts
from .tools import AsyncFiles, AsyncProcesses, AsyncSession

__all__ = [
    "AdmissionFailed",
    "AsyncFiles",
    "AsyncPort",
    "AsyncPreparation",
    "AsyncProcesses",
    "AsyncSandbox",
    "AsyncSandman",
    "AsyncSession",
    "CommandFailed",
    "CommandResult",
    "Conflict",
    "ConnectionFailed",
    "CreateOptions",
    "DaemonTimeout",
    "DaemonUnreachable",
    "Files",
    "ImagePullFailed",
    "InvalidRequest",
    "Limits",
    "NotFound",
    "PermissionDenied",
    "Port",
    "PortResponse",
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
