"""The blocking SDK: ``Sandman``, ``Sandbox``, ``Preparation``, ``Session``, ``Files``,
``Processes``, the async classes driven through an anyio blocking portal.

One module per async module (``client``, ``sandbox``, ``announcement``, ``tools``), each
generated from it by ``codegen.blocking`` (``make generate``), and ``portal``, the plumbing
they stand on, written by hand. The public names are re-exported from :mod:`sandman`.
"""
