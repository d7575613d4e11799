"""A KWOK-style simulated Kubernetes cluster that speaks the real API (issue 4).

A test bed and the embedded default, never a production path.
"""
