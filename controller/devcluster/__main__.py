"""`python -m controller.devcluster up|down|env`: the dev-cluster subcommand on its own.

The same as `gangops dev-cluster ...`; usable without the full CLI (and by the
launcher's own tests, which run it in a subprocess).
"""

from __future__ import annotations

import argparse
import logging
import sys

from controller.devcluster.cli import add_subcommand


def main(argv: list[str] | None = None) -> int:
    """Parse `dev-cluster` arguments and run the chosen action."""
    parser = argparse.ArgumentParser(prog="python -m controller.devcluster")
    add_subcommand(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(["dev-cluster", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
