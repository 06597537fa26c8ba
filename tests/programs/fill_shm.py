"""A user's program that fills its shared memory as multi-process data loading or NCCL does: it
maps a MIB-mebibyte file in /dev/shm and touches every page. Past the size of /dev/shm (Docker's
default is 64 MB) the kernel sends SIGBUS on the first page it cannot back.

    python tests/programs/fill_shm.py MIB [--sigbus]

``--sigbus``: die of SIGBUS at once, as the full /dev/shm of a container makes it (for a machine
whose /dev/shm cannot be filled by a test: the orchestrator sees the same end).
"""

import mmap
import os
import signal
import sys


def main() -> None:
    size = int(sys.argv[1]) << 20
    if "--sigbus" in sys.argv:
        print("touching a page of a full /dev/shm", flush=True)
        os.kill(os.getpid(), signal.SIGBUS)
    path = f"/dev/shm/fill-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as m:
            for offset in range(0, size, mmap.PAGESIZE):
                m[offset] = 1
        print(f"filled {size >> 20} MiB of /dev/shm", flush=True)
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
