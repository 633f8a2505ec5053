"""A local job's output, made safe before anything forwards it: bounded lines, valid UTF-8, no line breaks
but newline.

``lines(stream)`` reads a binary pipe and yields text lines: invalid UTF-8 replaced (U+FFFD), every
character another reader could take for a line break (``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``,
``\\x85``, U+2028, U+2029) replaced too, a line longer than ``MAX_LINE`` bytes split into pieces ending in
``CONTINUED``, and past ``MAX_PIECES`` pieces the rest of the line dropped (counted, never held), so memory
stays bounded whatever a worker prints and no worker text can start a line of its own.

Run as a script, it is the shim a Horovod rank runs under (``python -I -S .../local/output.py CMD...``):
horovodrun's own forwarder dies on one invalid UTF-8 byte and buffers whole lines, so each rank's stdout
and stderr pass through ``lines`` first. The shim forwards SIGTERM/SIGINT to its command and ends the way
the command did (its exit code, or the same signal), so horovodrun's per-rank reports stay true. It uses
the standard library only: it runs with the launcher's interpreter in isolated mode, in any environment.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO

MAX_LINE = 64 * 1024  # bytes of one line read at a time; a longer line is split into pieces
MAX_PIECES = 16  # pieces of one line kept (1 MiB); the rest is dropped and counted
CONTINUED = " [line continues]"
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
_BREAKS = str.maketrans({c: "\ufffd" for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def lines(stream: BinaryIO, max_line: int = MAX_LINE, max_pieces: int = MAX_PIECES) -> Iterator[str]:
    """The stream's lines as safe text (see the module docstring), without their newline."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pieces = 0
    while raw := stream.readline(max_line):
        whole = raw.endswith(b"\n")
        text = decoder.decode(raw[:-1] if whole else raw, final=whole).translate(_BREAKS)
        if whole:
            yield text
            pieces = 0
            continue
        if len(raw) < max_line:  # the stream ended without a newline
            yield text + decoder.decode(b"", final=True)
            return
        pieces += 1
        yield text + CONTINUED
        if pieces == max_pieces:
            dropped, ended = _skip_line(stream, max_line)
            decoder.reset()
            pieces = 0
            yield f"[{dropped} more bytes of this line dropped: a line is kept up to {max_line * max_pieces} bytes]"
            if not ended:
                return


def _skip_line(stream: BinaryIO, max_line: int) -> tuple[int, bool]:
    """Read past the rest of the current line: (bytes skipped, whether a newline ended it)."""
    skipped = 0
    while raw := stream.readline(max_line):
        if raw.endswith(b"\n"):
            return skipped + len(raw) - 1, True
        skipped += len(raw)
    return skipped, False


def _forward(source: BinaryIO, target: BinaryIO) -> None:
    for line in lines(source):
        try:
            target.write(line.encode() + b"\n")
            target.flush()
        except OSError:  # nobody reads any more (horovodrun is gone): keep draining, so the command never blocks
            pass


def _die_with_shim() -> None:
    """In the rank, before its exec: SIGKILL it when the shim dies (a shim killed from outside must not
    leave its rank running unseen by horovodrun: killing either is killing the rank)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def shim(argv: list[str]) -> int:
    """Run ``argv`` with its stdout and stderr passed through ``lines``; end as it ended."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_die_with_shim)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda sig, _frame: proc.poll() is None and proc.send_signal(sig))
    pumps = [threading.Thread(target=_forward, args=(proc.stdout, sys.stdout.buffer)),
             threading.Thread(target=_forward, args=(proc.stderr, sys.stderr.buffer))]
    for pump in pumps:
        pump.start()
    code = proc.wait()
    for pump in pumps:
        pump.join()
    if code < 0:  # killed by a signal: die of the same one, so horovodrun reports what really happened
        if -code in (signal.SIGTERM, signal.SIGINT):
            signal.signal(-code, signal.SIG_DFL)  # (the shim's own forwarding handlers)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(shim(sys.argv[1:]))
