"""Whole output lines from any thread.

print() writes its text and the newline separately, so two threads printing
at once can merge their lines ("HANG list-and-watchREGISTERED"), and a test
waiting for either line never sees it. say() writes each line in one piece.
"""
import sys
import threading

_lock = threading.Lock()


def say(line):
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
