"""The wire models: one msgspec Struct per request and per answer of each HTTP API.

- :mod:`sandman.wire.facade`: what the facade serves and the SDK decodes;
- :mod:`sandman.wire.daemon`: what the sandbox daemon serves and the SDK (through the facade's
  tool-call proxy) decodes;
- :mod:`sandman.wire.image_preparation`: the ``ImagePreparation`` resource and the trainer's
  image announcements (``POST``/``GET /v1/prepare``);
- :mod:`sandman.wire.create_request`: the create request's fields as a caller offers them
  (the SDK's keywords, the CLI's flags), read from ``CreateSandbox``;
- :mod:`sandman.wire.errors`: every error reason both servers answer (status, whether to
  retry, meaning) and the error body, which the SDK decodes from the same table.

What both sides share that is not a wire model (the backoff rule, the error base, the
settings mechanism) is :mod:`sandman.base`.

Each model is defined once, here, and imported by both sides, so a server and its client
cannot disagree about a field. This package depends on msgspec only: the daemon (the bottom
layer, running in every sandbox) imports it without pulling in the SDK or any HTTP client.
"""
