"""The command-line parser every entry point uses: a bad flag is one line, not usage plus an error.

argparse prints the whole usage block before its error, so a mistyped value costs the user a screen
to find the one line that names it. Here the error line names the problem and points at `--help`
for the usage; the exit code stays argparse's 2 (fix the command). Subcommand parsers made with
`add_subparsers().add_parser` are of the same class, so they behave the same.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose usage errors are one line: `PROG: error: MESSAGE (see PROG --help)`."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def path_arg(text: str) -> Path:
    """argparse `type` of a file or folder flag: an empty value is refused, since `Path('')` is the current
    folder (`--out ''` wrote a run into wherever the command was started)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (''); give a path (a '.' for the current folder is explicit)")
    return Path(text)


def path_text_arg(text: str) -> str:
    """`path_arg` for flags that keep their value as text (as given: no normalisation)."""
    path_arg(text)
    return text
