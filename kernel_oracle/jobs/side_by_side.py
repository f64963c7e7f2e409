"""Run several calls at once, each in a spawned child process, and collect what each returned.

Note [Campaigns side by side]
-----------------------------
One campaign keeps about one core busy: its Hypothesis loop and its target worker take turns (each
case is a request and a verdict), and on a GPU the device idles between the small kernels of a case
(measured on the H200: the main job's six campaigns, run one after another, kept the GPU far from
busy while each ran 3-90 cases/s).  A GPU host has cores to spare (16 on the H200 machine), so the
main job runs up to :func:`slots` campaigns at once, each in a child process of its own with its own
target worker (its own CUDA context), each given the whole window instead of a 1/N share of it: a
campaign that compiles kernels (our Triton LoRA kernels) gets N times the time to amortise them.
The children start while the job's process runs the selfcheck, and each clock runs to the job's
deadline less the time to finish a shrink and write (``CampaignConfig.ends_at``), however long the
child's imports and CUDA context took.  Their workers wait for the GPU without spinning (Note [Shared
GPU waits] in harness/device.py), and the cores they leave compile, at the lowest priority, the cases our
LoRA campaign is about to run and then its kernels' variants
(:func:`kernel_oracle.jobs.main_job_campaigns.precompile_beside`).

Children are started with ``spawn`` (a fork of a process that has touched CUDA is not safe) and each
sends back one pickled ``(result, problem)`` pair; a child that dies without answering is reported
with its exit status, never dropped.  A KeyboardInterrupt in the parent (SIGINT, or the CLI's SIGTERM
handler) sends SIGTERM to every running child, whose campaign saves its state (Note [Stopping a
campaign]), waits for them, and re-raises; a child whose parent dies gets SIGTERM from Linux
(``PR_SET_PDEATHSIG``) and stops the same way.

On the CPU every campaign already keeps a core busy in the Triton interpreter, and a machine of two
cores (CI) has none to spare: there :func:`slots` is 1 and the caller keeps its sequential path.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Callable, Optional

__all__ = ["CORES_PER_CALL", "ChildCall", "Done", "run_side_by_side", "slots"]

# a campaign process and its worker process take turns, but both are busy part of the time
CORES_PER_CALL = 2
# seconds a child gets to save its state after SIGTERM before it is killed
TERM_GRACE_S = 20.0


def slots(device: str, cores: Optional[int] = None) -> int:
    """How many campaigns run at once on ``device``: 1 on the CPU; on CUDA one per
    :data:`CORES_PER_CALL` cores (``cores``: default ``os.cpu_count()``)."""
    if device != "cuda":
        return 1
    return max(1, (cores if cores is not None else os.cpu_count() or 1) // CORES_PER_CALL)


@dataclass(frozen=True)
class ChildCall:
    """``fn(**kwargs)`` to run in a child; ``fn`` must be importable by name (spawn pickles it so).
    ``key`` identifies it in the :class:`Done` it becomes."""

    key: object
    fn: Callable
    kwargs: dict = field(default_factory=dict)


@dataclass
class Done:
    """What a child gave back: ``result`` (``fn``'s return value, or None) and ``problem`` (None, or
    one line: what it raised, or how it died); ``took_s`` from its start to its answer."""

    key: object
    result: object
    problem: Optional[str]
    took_s: float


def _child(conn, fn, kwargs) -> None:
    import signal

    from kernel_oracle.fuzz.stopping import die_with_parent

    die_with_parent(signal.SIGTERM)  # the job killed: its campaign stops and saves, as on the job's own SIGTERM
    try:
        result, problem = fn(**kwargs), None
    except KeyboardInterrupt as exc:  # SIGTERM from the parent: the campaign saved what it had
        result, problem = getattr(exc, "record", None), f"interrupted ({exc})"
    except Exception as exc:  # noqa: BLE001 - sent back as the call's problem, never lost
        from kernel_oracle.jobs.main_job_record import raised

        result, problem = None, raised(exc)
    try:
        conn.send((result, problem))
    finally:
        conn.close()


def run_side_by_side(calls: list, *, at_once: int, before_start: Optional[Callable] = None,
                     on_done: Optional[Callable] = None) -> list:
    """Run ``calls`` (:class:`ChildCall`), at most ``at_once`` at a time, in spawned children; returns
    their :class:`Done` in the order of ``calls``.  ``before_start(call, started, pending)`` may
    return a replacement call (new kwargs: a share of the time still left) just before it starts;
    ``on_done(done)`` is called as each one ends."""
    if at_once < 1:
        raise ValueError(f"Expected at_once >= 1 but got at_once={at_once!r}")
    ctx = mp.get_context("spawn")
    todo, running, done = list(enumerate(calls)), {}, {}
    try:
        while todo or running:
            while todo and len(running) < at_once:
                i, call = todo.pop(0)
                if before_start is not None:
                    call = before_start(call, len(done) + len(running), len(todo) + 1) or call
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(send, call.fn, call.kwargs), daemon=False)
                proc.start()
                send.close()
                running[recv] = (i, call, proc, time.monotonic())
            for conn in wait(list(running)):
                i, call, proc, started = running.pop(conn)
                try:
                    result, problem = conn.recv()
                except (EOFError, OSError):
                    proc.join(5)
                    result, problem = None, f"its process ended without an answer (exit status {proc.exitcode})"
                conn.close()
                proc.join(TERM_GRACE_S)
                d = Done(call.key, result, problem, round(time.monotonic() - started, 1))
                done[i] = d
                if on_done is not None:
                    on_done(d)
    except KeyboardInterrupt:
        _stop([proc for _, _, proc, _ in running.values()])
        raise
    return [done[i] for i in sorted(done)]


def _stop(procs: list) -> None:
    """SIGTERM to each child still running (its campaign saves its state), then a kill after the grace."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + TERM_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)
