"""Tries to take the lock the Go DRA helper takes on serialize.lock: an open
file description lock (F_OFD_SETLK) for writing over the whole file, without
waiting. Prints "held" if someone else holds a conflicting lock, "free"
otherwise (and releases it at once).

Usage: ofd_lock.py PATH
"""
import errno
import fcntl
import os
import struct
import sys

# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t),
# l_pid (pid_t, 0 for OFD locks).
request = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
except OSError as e:
    if e.errno in (errno.EAGAIN, errno.EACCES):
        print("held")
        sys.exit(0)
    raise
print("free")
