"""The parser of the scripts whose flags are knobs (harness.config.add_flags): a bad command line is one line.

    from harness.knob_parser import KnobParser
    parser = KnobParser(prog="scripts/01_frozen_trace.py")
    add_flags(parser)                 # harness.config
    parser.parse_args(["--trace-sedds", "2"])
    # stderr: error: scripts/01_frozen_trace.py: --trace-sedds: unknown flag; did you mean --trace-seeds? (...)
    # exit 2

argparse would print the usage of every knob's flag (some 40 lines) above the message, and no suggestion.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Sequence


class KnobParser(argparse.ArgumentParser):
    """The numbered scripts' parser: a bad command line is one line, not the usage of every knob's flag, and a
    mistyped flag names the closest one (exit 2, as argparse). No abbreviations: `--trace-seed 2` would otherwise
    be taken silently as --trace-seeds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def parse_args(self, args=None, namespace=None):  # noqa: D102 (argparse's own)
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unknown_flag_message(extras, list(self._option_string_actions)))
        return namespace

    def error(self, message: str):
        print(f"error: {self.prog}: {message} (--help lists the flags)", file=sys.stderr)
        raise SystemExit(2)


def unknown_flag_message(extras: Sequence[str], known: Sequence[str]) -> str:
    """'--trace-sedds: unknown flag; did you mean --trace-seeds?' for the first unknown flag among `extras`."""
    flags = [word.split("=", 1)[0] for word in extras if word.startswith("-")]
    if not flags:
        return f"unexpected argument {extras[0]!r}: every value follows its flag (--name value)"
    close = difflib.get_close_matches(flags[0], known, n=1, cutoff=0.6)
    return f"{flags[0]}: unknown flag; " + (f"did you mean {close[0]}?" if close else "no flag is close")
