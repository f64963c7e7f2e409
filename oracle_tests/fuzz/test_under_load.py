"""The suite's verdicts about waits hold on a busy machine (Note [Busy machines] in fuzz/cpu_wait.py).

The tests marked ``timing`` (a verdict that rests on a wait, a timeout or a time budget: a case judged by
its retry, a hang without time for one, a first call's warm-up, real CPU work against a timeout) run again here
in a pytest process of their own, beside busy processes: twice as many plain Python loops as the cores
this process may use, started here and ended here by their pid.  They must pass as they do alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kernel_oracle.fuzz.cpu_wait import cpu_waits

from oracle_tests._scripts import ROOT
from oracle_tests.conftest import HAS_CUDA


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _marked_files() -> list:
    """The test files with a ``timing`` test (this one aside): collecting only them keeps the run short."""
    return sorted(str(f) for f in (ROOT / "oracle_tests").rglob("test_*.py")
                  if f.name != os.path.basename(__file__) and "@pytest.mark.timing" in f.read_text())


@pytest.mark.skipif(HAS_CUDA, reason="a CPU machine's check: on a GPU machine the suite's xdist workers keep every "
                                     "core busy already, and loops beside them would slow every GPU test")
def test_the_timing_tests_pass_beside_twice_as_many_busy_processes_as_cores(tmp_path):
    if cpu_waits(os.getpid()) is None:
        pytest.skip("this kernel gives no per-thread scheduler statistics (/proc/PID/task/TID/schedstat): a "
                    "worker's waits for a core cannot be measured here, and a retry is all a slow case gets")
    files = _marked_files()
    assert len(files) >= 2, files  # the marker is in use: a rename would leave this check with nothing to run
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * _cores())]
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "timing", "-p", "no:xdist", "-p",
                               "no:cacheprovider", "-q", "--basetemp", str(tmp_path / "tests"), *files],
                              cwd=ROOT, capture_output=True, text=True, timeout=1200)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, out
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 4 and "skipped" not in proc.stdout.splitlines()[-1], out
