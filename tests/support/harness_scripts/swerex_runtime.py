"""SWE-ReX's protocol on Sandman, as SWE-agent drives it: ``SandmanDeployment`` started from its
config (``get_deployment()``), every runtime call SWE-agent makes, with SWE-ReX's exception
types where SWE-ReX raises, then ``stop``. Prints JSON: each step's outcome (the observation,
or the exception's class name) and the sandbox id.
Run with the harness venv's Python: argv is the owner, the image and a local scratch dir.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)

from sandman.integrations.swerex import SandmanDeploymentConfig


async def _outcome(call: Any) -> Any:
    try:
        result = await call
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e)[:300]}
    return result.model_dump() if hasattr(result, "model_dump") else result


async def _sessions(runtime: Any) -> dict[str, Any]:
    def act(command: str, **kwargs: Any) -> Any:
        return _outcome(runtime.run_in_session(BashAction(command=command, **kwargs)))

    steps: dict[str, Any] = {}
    steps["create"] = await _outcome(runtime.create_session(CreateBashSessionRequest()))
    steps["create_again"] = await _outcome(runtime.create_session(CreateBashSessionRequest()))
    steps["state"] = [
        await act("cd /tmp && export GREETING=hi && x=42"),
        await act("pwd; echo $GREETING $x"),
    ]
    steps["multiline"] = await act("\n echo 'test1' \n\n echo 'test2' \n")
    steps["heredoc"] = await act("cat <<EOF\nline one\nline two\nEOF")
    steps["stderr"] = await act("echo out; echo err >&2")
    steps["check_raise"] = await act("false")
    steps["check_silent"] = await act("exit_code_is() { return 3; }; exit_code_is", check="silent")
    steps["check_ignore"] = await act("false", check="ignore")
    steps["syntax"] = await act("(a")
    runtime.check_syntax = False
    steps["syntax_unchecked"] = await act("(a", check="silent")
    runtime.check_syntax = True
    steps["timeout"] = await act("sleep 10", timeout=0.5)
    steps["after_timeout"] = await act("echo alive")
    steps["interrupt"] = await _outcome(runtime.run_in_session(BashInterruptAction()))
    steps["interactive"] = await act("python3", is_interactive_command=True, expect=[">>> "])
    steps["no_session"] = await act("echo x", session="nope")
    steps["close"] = await _outcome(runtime.close_session(CloseBashSessionRequest()))
    steps["close_again"] = await _outcome(runtime.close_session(CloseBashSessionRequest()))
    return steps


async def _commands_and_files(runtime: Any, scratch: Path) -> dict[str, Any]:
    def run(**kwargs: Any) -> Any:
        return _outcome(runtime.execute(Command(**kwargs)))

    steps: dict[str, Any] = {
        "shell": await run(command="echo hello; echo oops >&2; exit 4", shell=True),
        "argv": await run(command=["printf", "%s|", "a b", "c"]),
        "merged": await run(
            command=["sh", "-c", "echo out; echo err >&2"], merge_output_streams=True
        ),
        "cwd_env": await run(command="pwd; echo $V", shell=True, cwd="/tmp", env={"V": "v1"}),
        "check": await run(command="exit 2", shell=True, check=True),
        "timeout": await run(command=["sleep", "10"], timeout=0.5),
    }
    target = "/tmp/swerex-files"
    steps["write"] = await _outcome(
        runtime.write_file(WriteFileRequest(path=f"{target}/deep/a.txt", content="héllo\n"))
    )
    steps["read"] = await _outcome(runtime.read_file(ReadFileRequest(path=f"{target}/deep/a.txt")))
    steps["read_missing"] = await _outcome(runtime.read_file(ReadFileRequest(path="/nonexistent")))
    (scratch / "tree" / "sub").mkdir(parents=True)
    (scratch / "tree" / "sub" / "b.txt").write_text("bee")
    (scratch / "one.sh").write_text("#!/bin/sh\necho one\n")
    (scratch / "one.sh").chmod(0o755)
    for name, local in (("upload_dir", "tree"), ("upload_file", "one.sh")):
        request = UploadRequest(source_path=str(scratch / local), target_path=f"{target}/{local}")
        steps[name] = await _outcome(runtime.upload(request))
    uploaded = f"cat {target}/tree/sub/b.txt; {target}/one.sh"
    steps["uploaded"] = await run(command=uploaded, shell=True)
    return steps


async def main(owner: str, image: str, scratch: str) -> dict[str, Any]:
    config = SandmanDeploymentConfig(image=image, owner=owner, labels={"harness": "swe-rex"})
    deployment = config.get_deployment()
    before = await deployment.is_alive()
    await deployment.start()
    try:
        runtime = deployment.runtime
        report: dict[str, Any] = {
            "sandbox_id": deployment.sandbox.id,
            "alive_before_start": before.is_alive,
            "alive": (await deployment.is_alive(timeout=10)).is_alive,
            "sessions": await _sessions(runtime),
            "commands": await _commands_and_files(runtime, Path(scratch)),
        }
    finally:
        await deployment.stop()
    report["alive_after_stop"] = (await deployment.is_alive()).is_alive
    try:
        report["runtime_after_stop"] = repr(deployment.runtime)
    except Exception as e:
        report["runtime_after_stop"] = type(e).__name__
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:]))))
