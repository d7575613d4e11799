"""One strategy per kind that has rules of its own (see ``simcluster.apiserver.strategy``).

Which kind gets which strategy is the table in ``simcluster.apiserver.strategies``; every
kind not in it is served by the generic ``Strategy``.
"""

__all__: list[str] = []
