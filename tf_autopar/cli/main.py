"""`tf-autopar` console entry point.

Each subcommand lives in its own module exposing ``add_parser(subparsers)`` (which
registers the parser and sets ``func``) so this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

import tf_autopar_workloads  # noqa: F401  registers the bundled workload names (tf_autopar/graph/named.py)
from tf_autopar import __version__
from tf_autopar.cli.interrupt import sigterm_interrupts
from tf_autopar.cli.notes import say
from tf_autopar.cli.quiet import quiet_tensorflow

SUBCOMMANDS = (
    "inspect",
    "plan",
    "analyze",
    "workloads",
    "trace",
    "characterize",
    "run",
    "validate",
    "bench",
    "tune",
    "calibrate",
)


#: Subcommands whose TensorFlow (in this process or the children they measure in) talks to the
#: user's terminal; `run` is not one: its child is the user's program, whose logs are theirs.
TF_BACKED = frozenset(SUBCOMMANDS) - {"run", "inspect"}
#: Subcommands that measure in TensorFlow child processes: without TensorFlow every child would
#: crash and the table would be empty, so they stop before starting any.
NEEDS_TF = frozenset({"trace", "characterize", "validate", "bench", "tune", "calibrate"})
#: `run` forwards SIGTERM to the program it started (launcher.py); every other command ends its
#: children and removes their files on SIGTERM as on Ctrl-C (cli/interrupt.py).
FORWARDS_SIGNALS = frozenset({"run"})
TF_MODULES = ("tensorflow", "keras", "tf_keras")
#: Subcommands whose ``--json`` once took a file (``--json OUT.json``, ``--json -``). ``--json`` is a
#: flag everywhere now (the JSON on stdout) and ``--json-out PATH`` writes a file; the old spelling
#: still works, with a note (old_json_spelling).
JSON_WAS_A_PATH = frozenset({"bench", "validate"})


def no_tensorflow() -> str:
    return (
        f"TensorFlow is not installed for {sys.executable}: install tf_autopar's tested build with "
        "pip install 'tf_autopar[tensorflow]' (tensorflow-cpu 2.21), or your own TensorFlow build"
    )


def _global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """-v and --version, accepted before or after the subcommand (SUPPRESS below the top, so a
    subcommand's default never resets a -v given before it)."""
    default = False if top else argparse.SUPPRESS
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log the library's decisions and show TensorFlow's own log lines",
    )
    parser.add_argument("--version", action="version", version=f"tf-autopar {__version__}")


def _add_everywhere(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _global_options(child, top=False)
                _add_everywhere(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tf-autopar",
        description="Plan and apply TensorFlow CPU thread settings from the host and the model.",
    )
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"tf_autopar.cli.{name}_cmd").add_parser(sub)
    _add_everywhere(parser)
    return parser


def old_json_spelling(argv: list[str]) -> tuple[list[str], str]:
    """``bench``/``validate`` ``--json OUT.json`` -> ``--json-out OUT.json`` and ``--json -`` ->
    ``--json`` (also ``--json=...``); the rewritten arguments and a note saying so ("" when none).
    A value counts as the old spelling when it is ``-`` or ends in ``.json``: anything else after
    ``--json`` is the next argument, as for every other flag."""
    command = next((a for a in argv if a in SUBCOMMANDS), None)
    if command not in JSON_WAS_A_PATH:
        return argv, ""
    out: list[str] = []
    old = ""
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        if arg.startswith("--json="):
            value = arg.partition("=")[2]
        elif arg == "--json" and i + 1 < len(argv) and (argv[i + 1] == "-" or argv[i + 1].lower().endswith(".json")):
            value = argv[i + 1]
            i += 1
        if value is None:
            out.append(arg)
        else:
            new = ["--json"] if value == "-" else ["--json-out", value]
            out += new
            old = f"'--json {value}' is now spelled '{' '.join(new)}' (the old spelling will be removed)"
        i += 1
    return out, old


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv, old = old_json_spelling(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if old:
        say(args.subcommand, f"note: {old}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="tf-autopar: %(levelname)s: %(message)s",
    )
    if not args.verbose and args.subcommand in TF_BACKED:
        quiet_tensorflow()
    try:
        if args.subcommand in NEEDS_TF and importlib.util.find_spec("tensorflow") is None:
            print(f"tf-autopar {args.subcommand}: error: {no_tensorflow()}", file=sys.stderr)
            return 2
        if args.subcommand in FORWARDS_SIGNALS:
            return int(args.func(args) or 0)
        with sigterm_interrupts():
            return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TF_MODULES:
            raise
        print(f"tf-autopar {args.subcommand}: error: {no_tensorflow()} (needs {exc.name})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, PermissionError, OSError) as exc:
        # Bad input: name the problem, no traceback.
        print(f"tf-autopar {args.subcommand}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
