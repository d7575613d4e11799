"""The burst benchmark: the reference burst (docs/load.md) on simcluster, end to end.

simcluster (``paper-burst``), the controller and the facade run as separate processes;
the benchmark fires N sandbox requests within T seconds, stamps every sandbox's
requested → created → bound → running → ready on its own clock from a pod watch, reads the
API server's request counters, releases everything, runs a one-bind-at-a-time QPS-50
baseline on a sample, and writes a Markdown report, a CSV per sandbox and a timeline plot.
See docs/load.md.
"""
