"""`tf-autopar` console entry point.

Each subcommand lives in its own module exposing ``add_parser(subparsers)`` (which
registers the parser and sets ``func``) so this file only wires them together.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

SUBCOMMANDS = (
    "inspect",
    "plan",
    "analyze",
    "workloads",
    "trace",
    "run",
    "validate",
    "bench",
    "tune",
    "calibrate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tf-autopar",
        description="Plan and apply TensorFlow CPU thread settings from the host and the model.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log the library's decisions")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"tf_autopar.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name != f"tf_autopar.cli.{name}_cmd":
                raise
            continue  # not built yet
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="tf-autopar: %(levelname)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, PermissionError, OSError) as exc:
        # Bad input: name the problem, no traceback.
        print(f"tf-autopar {args.subcommand}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
