"""The alerts and the dashboard name only metrics the code exports, checked against a running
stack: simcluster, the controller, the facade and the node agents as real processes, each
scraped at /metrics. Every expression is parsed by a real PromQL parser (promql-parser, the
Rust parser's bindings), so a typo is a parse error and every vector selector is found,
however deep in functions and binary operators; a selector without a literal metric name
is refused (it could match anything, or nothing).

The same stack takes the simcluster overlay with ``kubectl apply --server-side``: the
objects the devstack will run under are accepted by the API server, and each component's
service account can be given a token (TokenRequest) to run with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest

from devstack.stack import Stack, StackSettings
from tests.support.kubectl import Kubectl
from tests.support.manifests import MANIFESTS, render
from tests.support.stack import RunningStack, running_stack

MONITORING = MANIFESTS / "components" / "monitoring"
#: Sample names a metric family of each type exposes (prometheus_client and the node
#: agent's exposition alike): counters as ``_total`` (and ``_created``).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "untyped": ("",),
}
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Any]:
    settings = StackSettings(
        workdir=Path(tmp_path_factory.mktemp("manifests-stack")), nodes=2, node_agents=True
    )
    with running_stack(settings, pytestconfig) as running:
        yield running


def exported(text: str) -> set[str]:
    """The sample names an exposition can contain, from its TYPE lines and its samples."""
    names: set[str] = set()
    for line in text.splitlines():
        if typed := _TYPE.match(line):
            family, kind = typed.groups()
            base = family.removesuffix("_total") if kind == "counter" else family
            names |= {base + suffix for suffix in SUFFIXES.get(kind, ("",))}
        elif sample := _SAMPLE.match(line):
            names.add(sample.group(1))
    return names


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every alert and every dashboard target."""
    found = []
    for rule_file in render("production").of_kind("PrometheusRule"):
        for group in rule_file["spec"]["groups"]:
            found += [(f"alert {r['alert']}", r["expr"]) for r in group["rules"]]
    dashboard = json.loads((MONITORING / "sandman-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        found += [(f"panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    return found


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr!r}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def test_the_extraction_finds_every_selector() -> None:
    """The parser-based extraction itself, on shapes the rules use."""
    assert metric_names(
        "max(a) > 0 and on() sum(rate(b_total{x='1'}[5m])) == 0"
        " or histogram_quantile(0.9, sum by (le) (rate(c_bucket[2m])))"
    ) == {"a", "b_total", "c_bucket"}
    with pytest.raises(AssertionError, match="without a metric name"):
        metric_names('{__name__=~"sandman_.*"}')
    with pytest.raises(ValueError, match="unclosed left parenthesis"):
        promql_parser.parse("sum(rate(x[5m])")


def test_every_expression_names_only_exported_metrics(stack: RunningStack) -> None:
    s: Stack = stack.stack
    urls = {
        "controller": f"{s.controller_url}/metrics",
        "facade": f"{s.url}/metrics",
        "node agents": s.agents_metrics_url,
    }
    names: set[str] = set()
    with httpx.Client(timeout=10) as http:
        for component, url in urls.items():
            answer = http.get(url)
            assert answer.status_code == 200, component
            from_component = exported(answer.text)
            assert from_component, f"{component} exports nothing"
            names |= from_component
    exprs = expressions()
    assert len(exprs) > 20
    missing = {f"{where}: {name}" for where, expr in exprs for name in metric_names(expr) - names}
    assert not missing, sorted(missing)


def test_the_simcluster_overlay_applies_and_its_accounts_get_tokens(
    stack: RunningStack,
) -> None:
    kubectl = Kubectl(stack.stack.kubeconfig)
    overlay = MANIFESTS / "overlays" / "simcluster"
    # The devstack made the namespace and the CRD already: the apply takes them over.
    kubectl.run("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    rendered = render("simcluster")
    live = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in kubectl.json("get", "-k", str(overlay))["items"]
    }
    for obj in rendered.objects:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key in live, key
        wanted = obj["metadata"].get("labels", {}).items()
        assert wanted <= live[key]["metadata"].get("labels", {}).items(), key
    for account in ("sandman-controller", "sandman-facade", "sandman-node-agent"):
        token = kubectl.run("create", "token", account, "-n", "sandman-system").stdout.strip()
        assert token and not token.isspace(), account
    # Applying again (what an upgrade does) is accepted object by object.
    again = kubectl.run("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    assert again.stdout.count("serverside-applied") == len(rendered.objects)
