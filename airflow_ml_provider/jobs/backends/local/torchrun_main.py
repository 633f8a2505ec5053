"""``torchrun`` for the local launcher, its ranks' lines tailed every 10 ms instead of every 100 ms.

The launcher runs torchrun with ``--tee 3`` so that every line carries its rank (``[<rank>]:``). Tee mode
writes each rank's output to a file that a thread of the agent tails, sleeping ``interval_sec`` (0.1 s in
torch 2.13's ``torch/distributed/elastic/multiprocessing/tail_log.py``) whenever it reaches the end; when
the ranks have exited, the agent stops its stdout tails and then its stderr tails, each stop waiting out
that sleep: up to 0.2 s at the end of every job, a line up to 0.1 s late while it runs. At 10 ms the end
costs at most 20 ms and the tails' wake-ups a few CPU milliseconds a second.

Run with the image's interpreter: ``<image>/bin/python torchrun_main.py <torchrun's arguments>``. It needs
PyTorch and the standard library only (the image need not hold this package).
"""

from __future__ import annotations

import sys

TAIL_INTERVAL_S = 0.01


def tail_sooner() -> None:
    """Make every TailLog torchrun builds (with the default interval) tail every ``TAIL_INTERVAL_S``."""
    from torch.distributed.elastic.multiprocessing import tail_log

    original = tail_log.TailLog.__init__

    def tailed_sooner(self, *args, interval_sec: float = TAIL_INTERVAL_S, **kwargs) -> None:
        original(self, *args, interval_sec=interval_sec, **kwargs)

    tail_log.TailLog.__init__ = tailed_sooner


def main() -> int:
    from torch.distributed.run import main as torchrun

    tail_sooner()
    torchrun(sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
