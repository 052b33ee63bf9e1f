"""`pip install ARGS...` with progress a person can follow: pip's own lines (what it collects
and installs), and a heartbeat while pip is silent, which it is for minutes while it unpacks
~200 packages (2 GB) into the venv after "Installing collected packages".

    .venv/bin/python infra/pip_install.py -e ".[dev]"

Standard library only: it runs in a venv that has nothing else yet.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time

QUIET_S = 15.0  # say something when pip has printed nothing for this long


def main(argv: list[str]) -> int:
    cmd = [sys.executable, "-m", "pip", "install", "--progress-bar", "off", *argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    collected = 0
    installing = None
    while True:
        try:
            line = lines.get(timeout=QUIET_S)
        except queue.Empty:
            elapsed = time.monotonic() - t0
            what = (f"unpacking {installing} packages into the venv" if installing
                    else "resolving dependencies")
            print(f"  ... still {what} ({elapsed:.0f} s so far)", flush=True)
            continue
        if line is None:
            break
        if line.startswith("Collecting "):
            collected += 1
            line = f"[{collected:>3}] {line}"
        elif line.startswith("Installing collected packages:"):
            names = [n.strip() for n in line.split(":", 1)[1].split(",") if n.strip()]
            installing = len(names)
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            line = (f"Installing {installing} packages ({shown}); the longest step, pip prints "
                    "nothing until it is done\n")
        print(line, end="", flush=True)
    rc = proc.wait()
    print(f"pip install finished in {time.monotonic() - t0:.0f} s (exit status {rc})", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
