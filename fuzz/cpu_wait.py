"""How long a worker waited for a core: on a busy machine that time is not the case's.

Note [Busy machines]
--------------------
A case's timeout (``case_timeout_s``) is the time the target may take, and a hang is a case that takes
longer.  Measured on the wall clock, a busy machine would make a correct case a hang: on a 2-core host
with eight busy processes each process gets a quarter of a core, so a case of 0.5 s takes 2 s, past the
main job's 1.5-s timeout, with no time left in its short campaign for a retry (Note [Confirmed hangs] in
:mod:`fuzz.hangs`).  So the wait for an answer does not count the time the worker spent ready to run
but waiting for a core: Linux measures it per thread (``/proc/PID/task/TID/schedstat``, its second
field: nanoseconds on a run queue), and :meth:`fuzz.worker.Worker.check` waits until the wall-clock time
less the most any thread of the worker waited meanwhile reaches the timeout.  A worker sleeping or stuck
in a lock (a real hang) waits for no core, so its wait is the timeout; a worker in an endless loop on a
busy machine is a hang once it has run for the timeout; a correct case is never one because the machine
was busy, whatever the load and however it changes during the case.

The most any one thread waited, not their sum: a CPU worker runs on one thread (``OMP_NUM_THREADS=1``,
:func:`harness.device.worker_env`), and where several wait at once they wait side by side.  A worker that
keeps its own cores busy (a target's spinning threads beside its stuck main thread) looks like a busy
machine; :data:`MAX_STRETCH` bounds how far any wait stretches, so such a hang is still found.  Where the
counters cannot be read (not Linux, a kernel without scheduler statistics) nothing is discounted: the
wait is the wall-clock timeout, as before, and a retry confirms a hang.

This module imports only the standard library (the worker module imports it before its environment is set).
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["MAX_STRETCH", "cpu_waits", "waited_s"]

# a wait for an answer lasts at most this many times its timeout on the wall clock, however long the
# worker waited for a core: a machine twenty times slower than its cores allow is not one a timeout can
# serve, and a target that starves its own stuck thread is still a hang
MAX_STRETCH = 20.0


def cpu_waits(pid: Optional[int]) -> Optional[dict]:
    """``{thread id: seconds it has waited for a core}`` of every thread of process ``pid`` (Note [Busy
    machines]), or None when they cannot be read (no such process, not Linux, no scheduler statistics)."""
    if pid is None:
        return None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    waits = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                waits[tid] = int(fh.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile, or no such counter
            continue
    return waits or None


def waited_s(before: Optional[dict], after: Optional[dict]) -> float:
    """Seconds the worker waited for a core between two :func:`cpu_waits` readings: the most any one
    thread waited (a thread that started meanwhile: all of its wait); 0 when either reading is missing."""
    if not before or not after:
        return 0.0
    return max(0.0, max(total - before.get(tid, 0.0) for tid, total in after.items()))
