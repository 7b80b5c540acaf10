"""A search's standard output once its reader is gone: `triton-evolve ... | tee log` stopped with
Ctrl-C sends SIGINT to tee too, and the search's next line raised BrokenPipeError in the middle of
its stop (nothing after ^C, nothing exported, the archive left `running`). What follows goes to
standard error, the terminal, and the stop finishes as it would have."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class StdoutOrStderr:
    """Writes to `out`, each write flushed (a broken pipe then shows on the write that lost its
    text); once `out` is broken, to `err`, after one line that says so."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err, self.gone = out, err, False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                n = self.out.write(text)
                self.out.flush()
                return n
            except BrokenPipeError:
                self._switch()
        return self.err.write(text)

    def flush(self) -> None:
        (self.err if self.gone else self.out).flush()

    def _switch(self) -> None:
        self.gone = True
        if self.out is sys.__stdout__:  # its buffer would fail again at exit ("Exception ignored ...")
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())
        self.err.write("(standard output is closed: the rest goes to standard error)\n")

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding: the stream's own
        return getattr(self.out, name)


@contextmanager
def stdout_outliving_its_reader() -> Iterator[None]:
    """sys.stdout as a StdoutOrStderr for the block's length."""
    before = sys.stdout
    sys.stdout = StdoutOrStderr(before, sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = before
