"""--crash-at STEP[:N]: a plugin that dies in the middle of one protocol step.

The process exits at once from inside the N-th call (default the first) of the
named step, without answering and without removing its sockets, as a plugin
that segfaults or is OOM-killed does. It prints "CRASH <step>" first.
--hang-at STEP[:N] instead blocks that call forever (printing "HANG <step>"),
as a deadlocked plugin does, while the process stays up.
"""
import os
import threading

from output import say

_step = None
_nth = 1
_hang_step = None
_hang_nth = 1
_seen = {}
_lock = threading.Lock()


def add_argument(parser, steps):
    parser.add_argument("--crash-at", metavar="STEP[:N]", default=None,
                        help="exit inside the N-th call of STEP, one of: " + ", ".join(steps))
    parser.add_argument("--hang-at", metavar="STEP[:N]", default=None,
                        help="never return from the N-th call of STEP")


def _parse(flag, value, steps):
    step, _, nth = value.partition(":")
    if step not in steps:
        raise SystemExit(f"{flag}: unknown step {step!r}; known: {', '.join(steps)}")
    return step, int(nth or "1")


def configure(args, steps):
    global _step, _nth, _hang_step, _hang_nth
    if args.crash_at is not None:
        _step, _nth = _parse("--crash-at", args.crash_at, steps)
    if args.hang_at is not None:
        _hang_step, _hang_nth = _parse("--hang-at", args.hang_at, steps)


def point(step):
    """Called at the start of each step; exits there if it is the chosen one."""
    with _lock:
        _seen[step] = _seen.get(step, 0) + 1
        hit = step == _step and _seen[step] == _nth
        hang = step == _hang_step and _seen[step] == _hang_nth
    if hit:
        say("CRASH " + step)
        os._exit(3)
    if hang:
        say("HANG " + step)
        threading.Event().wait()
