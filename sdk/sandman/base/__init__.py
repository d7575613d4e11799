"""What the SDK and every server process stand on that is not a wire model.

- :mod:`sandman.base.backoff`: how long every client waits before a retry (what
  ``Retry-After`` means), one rule for the SDK and the servers;
- :mod:`sandman.base.errors`: the one shape of every Sandman error (message, then
  ``reason``, ``status``, ``retriable``, ``retry_after_s``);
- :mod:`sandman.base.settings`, :mod:`sandman.base.settings_cli`: a process's settings
  written once on the fields of a frozen dataclass (name, unit, default, help), and the
  flags, environment names and docs tables generated from them.

Like :mod:`sandman.wire` it sits at the bottom layer and needs nothing beyond the standard
library, so the sandbox daemon and the node agent may import it without the SDK.
"""
