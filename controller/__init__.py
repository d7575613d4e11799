"""Sandman's controller: the Kubernetes client layer, informers, leader election and the
bulk binder (issue 5). See docs/controller.md.

Everything that talks to the API server goes through :mod:`controller.kube`.
"""
