"""--crash-at STEP[:N]: a plugin that dies in the middle of one protocol step.

The process exits at once from inside the N-th call (default the first) of the
named step, without answering and without removing its sockets, as a plugin
that segfaults or is OOM-killed does. It prints "CRASH <step>" first.
"""
import os
import threading

_step = None
_nth = 1
_seen = {}
_lock = threading.Lock()


def add_argument(parser, steps):
    parser.add_argument("--crash-at", metavar="STEP[:N]", default=None,
                        help="exit inside the N-th call of STEP, one of: " + ", ".join(steps))


def configure(value, steps):
    global _step, _nth
    if value is None:
        return
    step, _, nth = value.partition(":")
    if step not in steps:
        raise SystemExit(f"--crash-at: unknown step {step!r}; known: {', '.join(steps)}")
    _step, _nth = step, int(nth or "1")


def point(step):
    """Called at the start of each step; exits there if it is the chosen one."""
    with _lock:
        _seen[step] = _seen.get(step, 0) + 1
        hit = step == _step and _seen[step] == _nth
    if hit:
        print("CRASH " + step, flush=True)
        os._exit(3)
