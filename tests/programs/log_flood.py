"""A user's program that floods its stderr (a warning printed in a loop), then fails: MIB mebibytes
written in 256 KiB chunks (one every 20 ms, each a numbered line block), then one warning line every
20 ms until the orchestrator has cut its log (its stderr file shrank; at most 60 s), then an uncaught
exception, whose traceback is the last thing in the log: the cut happens while the task is alive
however fast the machine is, and the traceback comes just after it.

    python tests/programs/log_flood.py MIB
"""

import os
import sys
import time


def main() -> None:
    mib = int(sys.argv[1])
    sys.stderr.write("flood: the first line of the log\n")
    line = "W1204 warning: this is printed on every step of training, over and over again ......\n"
    per_chunk = (256 * 1024) // len(line)
    for chunk in range(mib * 4):
        sys.stderr.write(f"chunk {chunk}\n" + line * per_chunk)
        sys.stderr.flush()
        time.sleep(0.02)
    written = os.fstat(2).st_size
    for _ in range(3000):  # the orchestrator looks at logs once a second
        if os.fstat(2).st_size < written:
            break
        sys.stderr.write(line)
        sys.stderr.flush()
        written += len(line)
        time.sleep(0.02)
    raise RuntimeError("the input pipeline broke after the flood")


if __name__ == "__main__":
    main()
