"""The example in docs/scheduler.md runs and does what the page says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "scheduler.md"


def test_the_first_example_runs_as_documented(capsys: Any) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOC), "exec"), namespace)
    plan = namespace["plan"]
    assert len(plan.assignments) == 48
    assert len(plan.unschedulable) == 12
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0/1 nodes are available: 1 Insufficient cpu."
    # Reserved: planning the same capacity again finds nothing.
    again = namespace["s"].plan(namespace["pending"], now=1001.0)
    assert not again.assignments
