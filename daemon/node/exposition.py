"""Counters, gauges and histograms in Prometheus' text format (0.0.4), written out by hand.

Why not prometheus_client, which every other Sandman process uses: the agent runs on every
node under an RSS budget of 50 MiB, and grpc with the CRI stubs already take ~29 MiB of it.
Importing prometheus_client costs 4.2 MiB more on top of them (measured on this machine with
asyncio, msgspec and grpc.aio loaded: its exposition module pulls in urllib.request,
http.server, wsgiref and email), which put the agent at 50.1 MiB. The agent needs three
metric types, no process collectors and one text rendering; that is what this module is.
tests/node/test_exposition.py holds the output to prometheus_client's own parser.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import TypeVar

__all__ = ["Counter", "Gauge", "Histogram", "Registry"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    pairs = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        pairs.append(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Metric(ABC):
    kind = ""

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labelnames)

    def header(self) -> Iterator[str]:
        exposed = f"{self.name}_total" if self.kind == "counter" else self.name
        yield f"# HELP {exposed} {self.doc.replace(chr(92), chr(92) * 2)}"
        yield f"# TYPE {exposed} {self.kind}"

    @abstractmethod
    def lines(self) -> Iterator[str]:
        """The metric's samples, one text line each."""


class _Value:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Counter(_Metric):
    """A counter, exposed as ``<name>_total`` like prometheus_client's."""

    kind = "counter"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, doc, labelnames)
        self._children: dict[tuple[str, ...], _Value] = {} if labelnames else {(): _Value()}

    def labels(self, *values: str) -> _Value:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        return self._children.setdefault(tuple(values), _Value())

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.labels().inc(amount)

    def lines(self) -> Iterator[str]:
        for values, child in sorted(self._children.items()):
            yield f"{self.name}_total{_labels(self.labelnames, values)} {_number(child.value)}"


class _GaugeValue(_Value):
    def set(self, value: float) -> None:
        self.value = float(value)

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, doc, labelnames)
        self._children: dict[tuple[str, ...], _GaugeValue] = (
            {} if labelnames else {(): _GaugeValue()}
        )

    def labels(self, *values: str) -> _GaugeValue:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values}")
        return self._children.setdefault(tuple(values), _GaugeValue())

    @property
    def value(self) -> float:
        return self.labels().value

    def set(self, value: float) -> None:
        self.labels().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.labels().dec(amount)

    def lines(self) -> Iterator[str]:
        for values, child in sorted(self._children.items()):
            yield f"{self.name}{_labels(self.labelnames, values)} {_number(child.value)}"


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, doc: str, buckets: Sequence[float]) -> None:
        super().__init__(name, doc)
        self.bounds = (*sorted(float(b) for b in buckets), math.inf)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def lines(self) -> Iterator[str]:
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            yield f'{self.name}_bucket{{le="{_number(bound)}"}} {cumulative}'
        yield f"{self.name}_count {cumulative}"
        yield f"{self.name}_sum {_number(self.sum)}"


M = TypeVar("M", bound=_Metric)


class Registry:
    def __init__(self) -> None:
        self.metrics: list[_Metric] = []

    def add(self, metric: M) -> M:
        self.metrics.append(metric)
        return metric

    def render(self) -> bytes:
        out = [line for m in self.metrics for line in (*m.header(), *m.lines())]
        return ("\n".join(out) + "\n").encode()
