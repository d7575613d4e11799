"""mini-swe-agent's own agent loop (``DefaultAgent`` with its shipped ``default.yaml``), driven
by its deterministic test model, on a Sandman sandbox selected the way a trainer selects it:
``get_environment({"environment_class": "sandman.integrations.mini_swe_agent...."})``.

``task`` mode solves a small task (write a sum into a file, check it, submit); ``lost`` mode
releases the sandbox behind the environment's back and takes one more step. Prints JSON:
the agent's result, each observation, the environment's serialization and template vars.
Run with the harness venv's Python: argv is the mode, the owner and the image.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_path
from minisweagent.environments import get_environment
from minisweagent.models.test_models import DeterministicModel, make_output

ENVIRONMENT_CLASS = "sandman.integrations.mini_swe_agent.SandmanEnvironment"
WORK = "/tmp/mswea-task"

TASK_ACTIONS = [
    # Each action runs in a fresh shell (the docker environment's semantics): `cd` is lost.
    f"mkdir -p {WORK} && cd {WORK} && printf '2 3\\n' > in.txt && echo made",
    f"cd {WORK} && awk '{{print $1+$2}}' in.txt > answer.txt && cat answer.txt && echo oops >&2",
    "pwd && echo $TASK_NAME",
    "sleep 30",
    "exit 3",
    f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat {WORK}/answer.txt",
]


def _agent(env: Any, actions: list[str]) -> DefaultAgent:
    config = yaml.safe_load(get_config_path("default").read_text())
    outputs = [make_output(f"step {i}", [{"command": a}]) for i, a in enumerate(actions)]
    model_config = {k: v for k, v in config["model"].items() if k == "observation_template"}
    model = DeterministicModel(outputs=outputs, **model_config)
    return DefaultAgent(model, env, **config["agent"])


def _observations(agent: DefaultAgent) -> list[str]:
    return [m["content"] for m in agent.messages[2:] if m.get("role") == "user"]


def main(mode: str, owner: str, image: str) -> dict[str, Any]:
    env = get_environment(
        {
            "environment_class": ENVIRONMENT_CLASS,
            "image": image,
            "owner": owner,
            "cwd": "/tmp",
            "timeout": 2,
            "env": {"TASK_NAME": "sum"},
            "labels": {"harness": "mini-swe-agent"},
        }
    )
    try:
        sandbox_id = env.sandbox.id
        if mode == "lost":
            env.sandbox.release()
            agent = _agent(env, ["echo still-there"])
        else:
            agent = _agent(env, TASK_ACTIONS)
        result = agent.run("Write the sum of the two numbers in in.txt into answer.txt.")
        return {
            "result": result,
            "observations": _observations(agent),
            "sandbox_id": sandbox_id,
            "serialized": env.serialize(),
            "template_vars": env.get_template_vars() if mode == "task" else {},
        }
    finally:
        env.cleanup()


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
