"""The wire models: one msgspec Struct per request and per answer of each HTTP API.

- :mod:`sandman.wire.facade`: what the facade serves and the SDK decodes;
- :mod:`sandman.wire.daemon`: what the sandbox daemon serves and the SDK (through the facade's
  tool-call proxy) decodes;
- :mod:`sandman.wire.backoff`: how long every client waits before a retry. Not a wire model,
  but a contract between servers and clients all the same (what ``Retry-After`` means), and
  this is the one package both the SDK and the server side may import.

Each model is defined once, here, and imported by both sides, so a server and its client
cannot disagree about a field. This package depends on msgspec only: the daemon (the bottom
layer, running in every sandbox) imports it without pulling in the SDK or any HTTP client.
"""
