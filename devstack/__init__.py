"""The local development stack: Sandman's processes started on this machine.

A development tool, never shipped in a wheel and never imported by product code (an
import-linter contract): :mod:`devstack.stack` starts simcluster, the controller and the
facade as separate processes (``sandman-dev up``, the end-to-end tests, the burst benchmark);
:mod:`devstack.demo_stack` and :mod:`devstack.demo` are ``sandman-dev demo``;
:mod:`devstack.launcher` starts one sandbox daemon as a local process; :mod:`devstack.rootfs`
runs the daemon bundle as PID 1 of a busybox rootfs under bubblewrap; :mod:`devstack.ports`
picks ports for servers another process binds.
"""
