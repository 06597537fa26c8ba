"""A user's program that starts a helper in a session of its own (a data-loader daemon, a tf.data
service dispatcher), as ``subprocess.Popen(..., start_new_session=True)`` does, and never ends it.

    python tests/programs/user_daemon.py [succeed|wait|stubborn]

The daemon's pid goes to ``$ORCH_TASK_DIR/daemon.pid``. ``succeed`` (default): the program then
exits 0 at once, leaving the daemon behind (its parent gone, its own session). ``wait``: the
program waits (bounded: 120 s) until it is stopped. ``stubborn``: the same, ignoring SIGTERM (only
a SIGKILL ends it). No TensorFlow.
"""

import os
import signal
import subprocess
import sys
import time


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "succeed"
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                              stdin=subprocess.DEVNULL)
    if mode == "stubborn":  # before the pid file says the program is up: a stop that follows finds it stubborn
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    path = os.path.join(os.environ["ORCH_TASK_DIR"], "daemon.pid")
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        out.write(f"{daemon.pid}\n")
    os.replace(path + ".tmp", path)
    print(f"started daemon pid {daemon.pid}", flush=True)
    if mode in ("wait", "stubborn"):
        time.sleep(120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
