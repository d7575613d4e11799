"""``python -m codegen``: write every generated file; ``--check``: list the stale ones.

The outputs run in an order that never needs what is being rewritten: the blocking twins
first (read from source alone), then ``CreateOptions`` (from the wire models alone), then
the guide's table (which imports the SDK, by then current).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import blocking, create_options
from .files import Output

__all__ = ["OUTPUTS", "main"]

OUTPUTS: tuple[Output, ...] = (*blocking.OUTPUTS, *create_options.OUTPUTS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = 0
    for output in OUTPUTS:  # one by one: a later one may import what an earlier one wrote
        text = output.render()
        if output.file.is_file() and output.file.read_text() == text:
            continue
        stale += 1
        if not args.check:
            output.write(text)
        print(f"{'stale' if args.check else 'wrote'} {output.path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
