"""Reason/status → exception class, and a sandbox's final state → the exception it raises."""

from __future__ import annotations

import pytest

from sandman import (
    AdmissionFailed,
    CommandResult,
    ConnectionFailed,
    DaemonUnreachable,
    ImagePullFailed,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    RateLimited,
    RetriableError,
    SandboxFailed,
    SandboxNotFound,
    SandboxTerminated,
    SandboxTimeout,
    SandmanError,
    ServerError,
    ServiceUnavailable,
    TerminalError,
    Unauthenticated,
    Unschedulable,
)
from sandman.sdk.errors import CommandFailed, error_for
from sandman.sdk.sandbox import _timeout_error, state_error
from sandman.wire.daemon import ExecResult, Output
from sandman.wire.facade import Sandbox as View


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (400, "unknown_class", InvalidRequest),
        (401, "unauthenticated", Unauthenticated),
        (404, "sandbox_not_found", SandboxNotFound),
        (404, "file_not_found", NotFound),
        (410, "sandbox_terminated", SandboxTerminated),
        (410, "sandbox_failed", SandboxFailed),
        (413, "body_too_large", InvalidRequest),
        (429, "quota_exceeded", QuotaExceeded),
        (429, "too_many_execs", RateLimited),
        (502, "daemon_unreachable", DaemonUnreachable),
        (502, "daemon_rejected_token", ServerError),
        (503, "cluster_unavailable", ServiceUnavailable),
        (500, "internal", ServerError),
        (418, "teapot", InvalidRequest),
    ],
)
def test_error_for_maps_reason_then_status(status: int, reason: str, cls: type) -> None:
    error = error_for(status, reason, "m", {"Retry-After": "7"})
    assert type(error) is cls and isinstance(error, SandmanError)
    assert error.retriable == isinstance(error, RetriableError) != isinstance(error, TerminalError)
    assert (error.status, error.reason, error.retry_after_s) == (status, reason, 7.0)
    assert ConnectionFailed("y", reason="x").retriable


def _view(state: str, reason: str | None = None) -> View:
    return View(id="sb-1", owner="o", sandbox_class="tiny", image="i", state=state,  # type: ignore[arg-type]
                reason=reason, message="why")  # fmt: skip


def test_final_states_become_typed_errors_with_the_last_state() -> None:
    cases = [
        (_view("failed", "image_pull_failed"), ImagePullFailed),
        (_view("failed", "admission_failed"), AdmissionFailed),
        (_view("failed", "sandbox_failed"), SandboxFailed),
        (_view("terminated", "ttl_expired"), SandboxTerminated),
        (_view("releasing"), SandboxTerminated),
    ]
    for view, cls in cases:
        error = state_error(view)
        assert type(error) is cls and error.sandbox is view
        assert error.reason == (view.reason or "releasing") and "why" in error.message
    late = _timeout_error(_view("pending", "unschedulable"), 5)
    assert isinstance(late, Unschedulable) and isinstance(late, SandboxTimeout)
    assert type(_timeout_error(_view("starting"), 5)) is SandboxTimeout


def test_command_result_check() -> None:
    def result(code: int | None, timed_out: bool = False) -> CommandResult:
        out = Output(data="aGk=", encoding="base64", truncated=False, total_bytes=2)
        raw = ExecResult(id="e", exit_code=code, signal=None, timed_out=timed_out,
                         interrupted=False, duration_s=0.1, stdout=out, stderr=out)  # fmt: skip
        return CommandResult.from_wire(raw)

    assert result(0).check().stdout == "hi" and result(0).stdout_bytes == b"hi"
    for failed in (result(1), result(None, timed_out=True)):
        with pytest.raises(CommandFailed):
            failed.check()
