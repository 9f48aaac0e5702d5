"""Prometheus metrics in the text exposition format (version 0.0.4), standard library only."""

import math
import threading


def _fmt(v):
    if v == math.inf:
        return "+Inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _labels(names, values, extra=None):
    pairs = list(zip(names, values)) + (extra or [])
    if not pairs:
        return ""
    esc = lambda s: str(s).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')  # noqa: E731
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs) + "}"


class _Metric:
    kind = ""

    def __init__(self, registry, name, help_, labels=()):
        self.name, self.help, self.labelnames = name, help_, tuple(labels)
        self._lock = threading.Lock()
        self._values = {}
        registry.register(self)

    def _key(self, labels):
        if len(labels) != len(self.labelnames):
            raise ValueError(f"metric {self.name} takes labels {self.labelnames}, got {labels}")
        return tuple(str(x) for x in labels)


class Counter(_Metric):
    kind = "counter"

    def inc(self, amount=1.0, *labels):
        k = self._key(labels)
        with self._lock:
            self._values[k] = self._values.get(k, 0.0) + amount

    def value(self, *labels):
        return self._values.get(self._key(labels), 0.0)

    def render(self):
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels(self.labelnames, k)} {_fmt(v)}" for k, v in items]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value, *labels):
        k = self._key(labels)
        with self._lock:
            self._values[k] = float(value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, registry, name, help_, labels=(), buckets=()):
        self.buckets = sorted(buckets) + [math.inf]
        super().__init__(registry, name, help_, labels)

    def observe(self, v, *labels):
        k = self._key(labels)
        with self._lock:
            counts, s = self._values.get(k, ([0] * len(self.buckets), 0.0))
            for i, b in enumerate(self.buckets):
                if v <= b:
                    counts[i] += 1
            self._values[k] = (counts, s + v)

    def render(self):
        out = []
        with self._lock:
            items = sorted((k, (list(c), s)) for k, (c, s) in self._values.items())
        for k, (counts, s) in items:
            for b, c in zip(self.buckets, counts):
                out.append(f"{self.name}_bucket{_labels(self.labelnames, k, [('le', _fmt(b))])} {c}")
            out.append(f"{self.name}_sum{_labels(self.labelnames, k)} {_fmt(s)}")
            out.append(f"{self.name}_count{_labels(self.labelnames, k)} {counts[-1]}")
        return out


class Registry:
    def __init__(self):
        self._metrics = []

    def register(self, m):
        self._metrics.append(m)

    def render(self):
        lines = []
        for m in self._metrics:
            lines.append(f"# HELP {m.name} {m.help}")
            lines.append(f"# TYPE {m.name} {m.kind}")
            lines.extend(m.render())
        return "\n".join(lines) + "\n"


def exponential_buckets(start, factor, count):
    return [start * factor ** i for i in range(count)]
