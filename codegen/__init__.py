"""Sandman's code generators: source and docs written from the one definition of a contract.

Some things must be spelled out in files — a signature type checkers read, a class ``help()``
shows, a table in a guide — although their content is defined elsewhere. Rather than a copy
kept equal by a test, each is *written* from its definition by a generator here, and the test
suite checks that every file equals what its generator writes now (tests/test_generated.py):

- ``sandman/sdk/create_options.py``: the ``CreateOptions`` TypedDict, the keywords of a
  create, from the create request ``sandman.wire.facade.CreateSandbox``
  (``codegen.create_options``);
- the trainer guide's table of create fields, from the same Struct and the ``sandman create``
  flags built from it (``codegen.create_options``);
- ``sandman/sdk/blocking/{client,sandbox,announcement,tools}.py``: the blocking SDK, one
  module per async module, from the async classes (``codegen.blocking``).

Run ``make generate`` (``python -m codegen``) after changing a definition, and commit what it
writes; ``python -m codegen --check`` lists the stale files without writing. The package is a
development tool (the ``sandman-devtools`` distribution): the SDK's wheel ships what it
generated, never the generator.
"""
