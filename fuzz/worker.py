"""An isolated worker process that runs one target, so a crash costs one case, not the campaign.

A target that segfaults, aborts, or poisons its CUDA context would take the campaign down with it;
here it takes a worker down instead.  The parent sends plain data (target spec, device, case as a
dict), the worker rebuilds the call from the problem's seed (bit-identical to the parent's) and
answers with a picklable :class:`fuzz.check.Observed`.  When the pipe breaks or the case runs past
its timeout the parent records a ``crash`` observation and starts a fresh worker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from typing import Optional

from kernel_oracle.harness.check import Observed, case_from_dict

__all__ = ["Worker"]


def _serve(conn, spec: str, device: str, env: dict) -> None:
    os.environ.update(env)
    from kernel_oracle.harness.check import execute
    from kernel_oracle.fuzz.targets import resolve_target

    target = resolve_target(spec, device)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            obs = execute(target, case_from_dict(msg), device)
        except Exception as exc:  # noqa: BLE001 - a harness error is reported, not fatal
            obs = Observed("raise", exc_type=type(exc).__name__, message=f"harness error: {exc}\n"
                           + traceback.format_exc(limit=3))
        conn.send(obs)


class Worker:
    """``run(case_dict) -> Observed`` in a child process; restarts after a crash."""

    def __init__(self, spec: str, device: str, *, timeout_s: float = 600.0):
        self.spec, self.device, self.timeout_s = spec, device, timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc: Optional[mp.Process] = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        env = {k: v for k, v in os.environ.items() if k in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")}
        self._proc = self._ctx.Process(target=_serve, args=(child, self.spec, self.device, env), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def run(self, case_dict: dict) -> Observed:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        try:
            self._conn.send(case_dict)
            if not self._conn.poll(self.timeout_s):
                self._kill()
                return Observed("crash", message=f"no answer within {self.timeout_s:g}s (hang); worker killed")
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._proc.exitcode if self._proc is not None else None
            self._proc.join(timeout=5) if self._proc is not None else None
            code = self._proc.exitcode if self._proc is not None else code
            self._kill()
            return Observed("crash", message=f"worker process died (exit code {code})")

    def _kill(self) -> None:
        self.restarts += 1
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        if self._proc is not None:
            self._proc.join(timeout=5)
        self._proc = None
        self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
        self._proc = None
