"""The trainer-facing HTTP facade (issue 6): thin, stateless, horizontally scalable.

Built so far: the sandbox contract (how a sandbox becomes a Pod), per-sandbox tokens, tenancy
and admission, and the proxy that carries tool calls straight to a sandbox's daemon. The HTTP
API that ties them to the Kubernetes API (create/get/list/wait/release) comes with the
controller's client layer.
"""
