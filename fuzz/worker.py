"""An isolated, long-lived worker process that runs targets, so a crash or a hang costs one case.

Note [Workers]
--------------
A target that segfaults, aborts, hangs or poisons its CUDA context would take the campaign down
with it; here it takes a worker down instead, and a fresh one goes on.  One worker serves one
device for as long as it lives (imports, the CUDA context, Triton's compiled kernels and the
resolved targets are kept between cases and between campaigns that share it).

* **Environment**: the worker's environment is :func:`harness.device.worker_env` of its device,
  applied before anything imports a kernel module, so a ``device="cpu"`` worker interprets Triton
  kernels even when its parent (a GPU test session, the main job) compiles them; the parent's own
  environment is never touched.
* **Protocol** (pickled over a pipe): the worker says ``("ready", pid, time.monotonic())`` once its
  imports are done (start-up is waited for separately, up to ``startup_timeout_s``, and never counted
  against a case); every request is ``(op, spec, device, sources, payload)``, the target named by its spec
  string and :class:`~kernel_oracle.harness.targets.TargetSources` (where an SGLang wheel comes
  from: it travels here, never through the environment).  ``describe`` answers the target's
  ``to_record()`` as the worker sees it (plus whether it interprets, and the result of a one-time
  warm-up of realistic shapes when it compiles kernels); ``check`` answers the case's
  :class:`harness.check.Verdict` with its root-cause bucket, computed in the worker beside the
  target (:func:`harness.check.check_case`, Note [Verdicts beside the target]: data generated
  there, oracle and comparison there, no output tensor pickled back); ``run`` answers the raw
  ``Observed``.  The worker rebuilds each call from the problem's seed (bit-identical to the
  parent's).
* **Faults**: no answer within ``case_timeout_s`` is a ``hang`` observation, a broken pipe a
  ``crash`` one (with the exit status in words); either way the worker is killed and the next case
  starts a fresh one.  Before a campaign reports a new hang it runs the case once more with a longer
  wait (``check(..., wait_s=)``; Note [Confirmed hangs] in :mod:`fuzz.hangs`).
* **Busy machines**: the wait for an answer does not count the time the worker waited for a core
  (Note [Busy machines] in :mod:`fuzz.cpu_wait`), so a busy machine makes a case slower, never a hang.
* **A worker's first call**: the first call of an op on a worker process may load what the target
  loads lazily (SGLang 0.5.23's vision wrapper imports FlashInfer then) and warm up caches and thread
  pools; that warm-up is not the case's time.  So a first call gets :data:`FIRST_CALL_FACTOR` times the
  worker's measured start-up (its imports, on this machine, now) on top of its timeout; an answer within
  it is the case's verdict, counted nowhere as slow, and silence past it is the hang.  A first call of an
  op that was silent through its allowance gets none on the next fresh worker: a target that hangs from
  its first call pays the allowance once, not on every case.
* **Hangs and compilation**: on a GPU the first call of a new kernel specialization compiles it,
  which takes seconds (more on a busy host): measured on the H200, a 120-second main job beside a
  soak reported our vision kernel as hung after 4.8 s.  So a worker that compiles is not killed at
  the case timeout: it gets time for a compilation (``COMPILE_GRACE_MIN_S``, or
  ``COMPILE_GRACE_FACTOR`` times the case timeout, in all); an answer within it is the case's verdict
  (counted in ``slow_answers``; the compiled kernel is kept), silence past it is the hang.  The
  interpreter does not compile, so a CPU worker's case timeout is the hang.
* The worker ignores SIGINT (the campaign decides and ends its worker) and ends with its campaign, even
  on ``kill -9`` (Note [Worker processes]), so no orphan keeps running a hung kernel.

Note [Worker processes] (in :mod:`fuzz.process_tree`): the process a campaign starts is the guardian of
the worker's whole tree; it forks the process that serves, and ends every process below it -- whatever
its session or environment -- when that one exits, when the campaign asks, or when the campaign dies.
Waits on the pipe never exceed :data:`MAX_WAIT_S`, the longest the platform's ``poll`` takes.

Note [A broken device context]
------------------------------
An illegal or misaligned address, or a device-side assert, leaves the process's CUDA context broken:
every later CUDA call fails, the oracle's and the next campaign's included.  The check raises
:class:`harness.device.DeviceLost` when the target's own call reports it (an error of CUDA, not
one the kernel raised), and the worker answers ``device-lost`` for any such error and exits; the
parent ends it and returns a ``crash`` observation for the case whose call broke it (on a malformed
input: the ``out of bounds`` consequence), and the next case starts a fresh worker.  Without this
the broken context would be blamed on kernel-oracle ("harness error") and stop every campaign that
shares the worker.

Note [Target output]
--------------------
A target's prints are not the campaign's output: the worker's file descriptors 1 and 2 (so C
extensions' ``printf`` and Triton's compiler warnings too) are a pipe to the parent, where a thread
copies them to the campaign's log (``out_dir/target-output.log``, :meth:`Worker.log_to`), at most
:data:`OUTPUT_LIMIT` bytes per log and then a note; the rest is read and dropped (counted in
``output_dropped``), so a target that prints without end neither fills the disk nor blocks.
Without a log (a worker used on its own) the same bounded copy goes to the parent's stderr.  The
reader is in the parent, so a target that prints while holding the GIL never stalls it; the last
few kilobytes are kept for the message of a worker that dies while starting.

This module imports only the standard library and :mod:`harness.device` at import time: the worker
process imports it before its environment is set.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Optional

from kernel_oracle.fuzz.cpu_wait import MAX_STRETCH, cpu_waits, waited_s
from kernel_oracle.fuzz.process_tree import END_TREE_S, guard
from kernel_oracle.fuzz.stopping import die_with_parent
from kernel_oracle.harness.device import interpreting, worker_env

__all__ = ["DEFAULT_CASE_TIMEOUT_S", "FIRST_CALL_FACTOR", "MAX_WAIT_S", "OUTPUT_LIMIT", "STARTUP_TIMEOUT_S", "Worker",
           "WorkerError", "verdict_of"]

# seconds a case may take before it counts as a hang (campaigns derive a shorter one from their budget)
DEFAULT_CASE_TIMEOUT_S = 120.0
# seconds for a fresh worker's imports (torch, triton, the target; a CUDA context) before it is given up
STARTUP_TIMEOUT_S = 300.0
# Note [Hangs and compilation]: a compiling worker's case is a hang only after this much time (at least
# COMPILE_GRACE_MIN_S, COMPILE_GRACE_FACTOR x the case timeout)
COMPILE_GRACE_MIN_S = 30.0
COMPILE_GRACE_FACTOR = 4.0
# Note [Workers], a worker's first call: the first call of an op on a worker process gets this many times the
# worker's start-up on top of its timeout (lazy imports as heavy as the worker's own, and caches to fill)
FIRST_CALL_FACTOR = 2.0
# the shortest slice a wait is extended by (Note [Busy machines]): no busy loop of tiny polls at its end
_MIN_POLL_S = 0.02
# the longest wait the platform's poll takes (milliseconds in a C int: about 24.8 days; below
# threading.TIMEOUT_MAX): every wait on the worker's pipe is clamped to it, options refuse more
MAX_WAIT_S = min(threading.TIMEOUT_MAX, (2**31 - 1) / 1000)
# bytes of a target's stdout/stderr kept per log (Note [Target output])
OUTPUT_LIMIT = 8 * 2**20
_TAIL_BYTES = 4096


class WorkerError(RuntimeError):
    """The worker could not start, or could not resolve a target spec (the reason is in the text)."""


def _serve(conn, env: dict, output=None, yield_waits: bool = False) -> None:
    try:
        os.setsid()  # its own session and process group (Note [Worker processes])
    except OSError:  # already a group leader (not from multiprocessing's spawn): its group is its own
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not guard(serving_only=(conn,)):  # from here on, the serving process (Note [Worker processes])
        die_with_parent()
    if output is not None:  # fds 1 and 2 into the parent's bounded copy (Note [Target output])
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        output.close()
    os.environ.clear()
    os.environ.update(env)  # before the first kernel import (Note [Device switch])
    if yield_waits:  # before torch's CUDA context (Note [Shared GPU waits] in harness/device.py)
        from kernel_oracle.harness.device import yield_while_waiting

        yield_while_waiting()
    from kernel_oracle.fuzz.targets import TargetError, resolve_target
    from kernel_oracle.harness import torch_state
    from kernel_oracle.harness.check import case_from_dict, check_case, execute
    from kernel_oracle.harness.device import DeviceLost

    baseline = torch_state.snapshot()  # before any target is imported (Note [Global state])
    warmed: dict = {}
    import time

    conn.send(("ready", os.getpid(), time.monotonic()))  # the clock is system-wide: the parent's holds here
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        op, spec, device, sources, payload = msg
        try:
            target = resolve_target(spec, device, sources=sources)  # cached by the registry
        except (TargetError, ValueError) as exc:
            conn.send(("error", str(exc)))
            continue
        key = (spec, device, sources)
        try:
            if op == "describe":
                warm_s = payload
                if warm_s and key not in warmed and not interpreting():
                    from kernel_oracle.fuzz.precompile import warm_up_target

                    warmed[key] = warm_up_target(target, spec, device, time_s=warm_s)
                conn.send(("info", {**target.to_record(), "precisions": target.precisions(),
                                    "interpreting": interpreting(), "warm_up": warmed.get(key)}))
            elif op == "check":
                drift = _back_to(baseline, torch_state)
                case_dict, call = payload if isinstance(payload, tuple) else (payload, None)  # a saved call, or none
                verdict = check_case(target, case_from_dict(case_dict), device, call=call)
                verdict.state_changes = drift + verdict.state_changes
                conn.send(("verdict", verdict))
            else:
                drift = _back_to(baseline, torch_state)
                observed = execute(target, case_from_dict(payload), device)
                observed.state_changes = drift + observed.state_changes
                conn.send(("obs", observed))
        except Exception as exc:  # noqa: BLE001 - a harness error: reported to the parent, not fatal here
            from kernel_oracle.harness.device import is_device_error

            if isinstance(exc, DeviceLost) or is_device_error(exc):  # Note [A broken device context]
                conn.send(("device-lost", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
                return
            conn.send(("harness-error", f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=6)))


def _back_to(baseline: dict, torch_state) -> list:
    """Restore the worker's start-up settings and what the oracle runs (Note [The oracle's own code]);
    ``(switch, text)`` of those changed since (by a target at import or warm-up: nothing else of the
    target runs outside a checked call), before the next case's oracle runs."""
    from kernel_oracle.harness import oracle_integrity

    now = torch_state.snapshot()
    changed = torch_state.changes(baseline, now)
    if changed:
        torch_state.restore(baseline)
    return [(switch, f"{text} (outside a call: while the target was loaded or warmed up)")
            for switch, text in changed + oracle_integrity.replaced()]


def _end_group(pid: Optional[int], ask_first: bool = True) -> None:
    """End the worker ``pid`` and its tree: SIGTERM asks its guardian to end every process below it
    (Note [Worker processes]) and is waited for; then SIGKILL to its process group, whatever is left."""
    if pid is None:
        return
    if ask_first:
        import time

        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + END_TREE_S + 2
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.01)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # no such group (yet): the worker's own kill covers it
        pass


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie awaiting its join does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


class _OutputPump:
    """Copies a worker's stdout/stderr pipe to the log of :class:`Worker` (Note [Target output])."""

    def __init__(self, reader, worker: "Worker"):
        self.reader, self.worker = reader, worker
        self.thread = threading.Thread(target=self._run, name="kernel-oracle-worker-output", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        fd = self.reader.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.worker._take_output(chunk)
        try:
            self.reader.close()
        except OSError:
            pass

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)


class Worker:
    """A worker process for ``device``: :meth:`describe` a target, :meth:`run` a case on it.

    ``case_timeout_s``: seconds one case may take before it is a hang; ``startup_timeout_s``: for the
    worker's imports (not counted against any case); ``compile_grace``: give a case past its timeout
    time for a compilation before calling it hung (default: when the device compiles kernels; Note
    [Hangs and compilation]); ``yield_waits``: its CUDA waits give up the core (other processes share
    the GPU and the host: Note [Shared GPU waits] in harness/device.py).  Its process tree ends with it
    (Note [Worker processes]); its output goes to :meth:`log_to`'s file (Note [Target output])."""

    def __init__(self, device: str, *, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, compile_grace: Optional[bool] = None,
                 yield_waits: bool = False):
        self.device = device
        self.yield_waits = bool(yield_waits)
        self.case_timeout_s = float(case_timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self._ctx = mp.get_context("spawn")
        self._proc: Optional[mp.process.BaseProcess] = None
        self._conn = None
        self.restarts = 0
        self.slow_answers = 0  # cases that answered past the case timeout (Note [Hangs and compilation])
        # a worker that compiles kernels (not the CPU interpreter) may spend seconds on a case's first call
        # (``compile_grace``: None = exactly then)
        self.compile_grace = not str(device).startswith("cpu") if compile_grace is None else bool(compile_grace)
        self.startup_s: list[float] = []  # seconds each start took (imports), for the record
        # the longest the last case was waited for: its timeout, a compiling worker's time for a compilation
        # (Note [Hangs and compilation]) and a first call's warm-up; a retry waits at least as long
        self.last_wait_s = 0.0
        self._server_pid: Optional[int] = None  # the process that runs the cases (its waits for a core)
        self._called: set = set()  # (spec, op) this process has answered (Note [Workers], a first call)
        self._silent_first: set = set()  # (spec, op) whose first call was silent through its allowance
        self._ready = False
        self._launched_at = 0.0
        self._pump: Optional[_OutputPump] = None
        self._out_lock = threading.Lock()
        self._log = None  # the open log file (None: the parent's stderr)
        self._log_kept = 0
        self.output_dropped = 0  # bytes of output past OUTPUT_LIMIT since the last log_to
        self._tail = b""

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # ---- output (Note [Target output]) ----------------------------------------------------------
    def log_to(self, path) -> None:
        """Copy the worker's output to ``path`` from now on (appended; None: the parent's stderr),
        at most :data:`OUTPUT_LIMIT` bytes of it; resets :attr:`output_dropped`."""
        with self._out_lock:
            if self._log is not None:
                self._log.close()
            self._log = open(Path(path), "ab") if path is not None else None
            self._log_kept = self._log.tell() if self._log is not None else 0
            self.output_dropped = 0

    def _take_output(self, chunk: bytes) -> None:
        with self._out_lock:
            self._tail = (self._tail + chunk)[-_TAIL_BYTES:]
            room = max(0, OUTPUT_LIMIT - self._log_kept)
            kept, dropped = chunk[:room], len(chunk) - min(room, len(chunk))
            note = b""
            if dropped and not self.output_dropped:
                note = (f"\n[kernel-oracle: the target's output past {OUTPUT_LIMIT} bytes is not kept]\n").encode()
            self._log_kept += len(kept)
            self.output_dropped += dropped
            try:
                if self._log is not None:
                    self._log.write(kept + note)
                    self._log.flush()
                else:
                    sys.stderr.buffer.write(kept + note)
                    sys.stderr.flush()
            except (OSError, ValueError, AttributeError):  # a full disk or a closed stream loses output only
                pass

    def output_tail(self) -> str:
        """The last few kilobytes the worker printed (for the message of a worker that died)."""
        with self._out_lock:
            return self._tail.decode("utf-8", "replace")

    # ---- the process ------------------------------------------------------------------------------
    def launch(self) -> "Worker":
        """Start the process without waiting for its imports (they run while the caller works on)."""
        if self.alive:
            return self
        import time

        self._launched_at = time.monotonic()
        self._ready = False
        self._called = set()
        parent, child = self._ctx.Pipe()
        out_reader, out_writer = self._ctx.Pipe(duplex=False)
        env = worker_env(self.device)  # nothing that tells a target it is under test
        self._proc = self._ctx.Process(target=_serve, args=(child, env, out_writer, self.yield_waits), daemon=True,
                                       name=f"kernel-oracle-worker-{self.device}")
        self._proc.start()
        child.close()
        out_writer.close()
        self._pump = _OutputPump(out_reader, self)
        self._conn = parent
        return self

    def start(self) -> None:
        """Start the process if it is not running and wait until its imports are done."""
        if self.alive and self._ready:
            return
        import time

        if not self.alive:
            self.launch()
        parent = self._conn
        try:
            if not parent.poll(min(self.startup_timeout_s, MAX_WAIT_S)):
                raise WorkerError(f"the {self.device} worker did not start within {self.startup_timeout_s:g}s")
            tag, *ready = parent.recv()
        except (EOFError, OSError) as exc:
            code = self._reap()
            tail = self.output_tail().strip()
            raise WorkerError(f"the {self.device} worker died while starting ({_exit_words(code)})"
                              + (f": {exc}" if str(exc) else "")
                              + (f"; its last output: {tail[-800:]}" if tail else "")) from None
        except BaseException:
            self.kill()
            raise
        if tag != "ready":
            self.kill()
            raise WorkerError(f"the {self.device} worker answered {tag!r} instead of 'ready'")
        self._ready = True
        self._server_pid, ready_at = ready
        self.startup_s.append(max(0.0, ready_at - self._launched_at))  # not the time until someone asked

    def describe(self, spec, *, warm_up_s: Optional[float] = None, sources=None) -> dict:
        """The target's ``to_record()`` as the worker resolves it, plus ``precisions`` (op -> fp32
        precision), ``interpreting`` and ``warm_up`` (the result of :func:`harness.warmup.warm_up`,
        run once per target for up to ``warm_up_s`` seconds when the worker compiles kernels).
        ``spec``: a spec string or :class:`~kernel_oracle.harness.targets.TargetSpec`; ``sources``:
        its :class:`~kernel_oracle.harness.targets.TargetSources` (where an SGLang wheel comes from)."""
        self.start()
        self._send(("describe", str(spec), self.device, sources, warm_up_s))
        limit = self.startup_timeout_s + (warm_up_s or 0.0)  # the warm-up has its own time on top
        if not self._conn.poll(min(limit, MAX_WAIT_S)):
            self.kill()
            raise WorkerError(f"resolving target {spec!r} took over {limit:g}s")
        try:
            tag, payload = self._conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise WorkerError(f"the worker died resolving target {spec!r} ({_exit_words(code)})") from None
        if tag in ("error", "harness-error"):
            raise WorkerError(payload)
        return payload

    def _send(self, msg: tuple) -> None:
        """Send a request; one the pipe cannot carry (an unpicklable argument) is a :class:`WorkerError`."""
        try:
            self._conn.send(msg)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise
        except Exception as exc:  # noqa: BLE001 - pickling: a bug of the caller, reported in one line
            raise WorkerError(f"cannot send {msg[0]!r} to the worker: {type(exc).__name__}: {exc}") from None

    def check(self, spec, case_dict: dict, *, sources=None, wait_s: Optional[float] = None, call=None):
        """The :class:`harness.check.Verdict` of one case, computed in the worker beside the target
        (:func:`harness.check.check_case`: only the verdict and its bucket travel back), or an
        ``Observed`` of kind ``hang`` / ``crash`` (the worker is then gone); a harness error raises
        :class:`WorkerError`.  ``wait_s``: wait this long for the answer instead of the case timeout and
        a compiling worker's time for a compilation (a campaign's retry of a silent case, Note [Confirmed
        hangs] in :mod:`fuzz.hangs`); either way a first call's warm-up comes on top (Note [Workers]) and
        the worker's waits for a core do not count (Note [Busy machines] in :mod:`fuzz.cpu_wait`).
        ``call``: run these tensors (a saved case file's, on the CPU: the worker moves them to its device)
        instead of the case's own."""
        return self._ask("check", spec, case_dict if call is None else (case_dict, call), sources, wait_s)

    def run(self, spec, case_dict: dict, *, sources=None):
        """``Observed`` of one case (the output copied back); a hang or a crash is an observation."""
        return self._ask("run", spec, case_dict, sources)

    def _grace_s(self) -> float:
        return max(COMPILE_GRACE_MIN_S, COMPILE_GRACE_FACTOR * self.case_timeout_s) if self.compile_grace else 0.0

    def _first_call_s(self, key: tuple) -> float:
        """The warm-up allowance of a call of ``key`` (spec, op) (Note [Workers], a first call)."""
        if key in self._called or key in self._silent_first or not self.startup_s:
            return 0.0
        return FIRST_CALL_FACTOR * self.startup_s[-1]

    def _answered_within(self, seconds: float) -> bool:
        """Whether the answer comes within ``seconds`` that the worker could run: the wait goes on for as
        long as the worker waited for a core meanwhile, up to :data:`MAX_STRETCH` times ``seconds`` in all
        (Note [Busy machines] in :mod:`fuzz.cpu_wait`)."""
        import time

        started, before, left = time.monotonic(), cpu_waits(self._server_pid), seconds
        while not self._conn.poll(min(max(left, _MIN_POLL_S), MAX_WAIT_S)):
            wall = time.monotonic() - started
            left = min(seconds - (wall - waited_s(before, cpu_waits(self._server_pid))), MAX_STRETCH * seconds - wall)
            if left <= 0:
                return False
        return True

    def _ask(self, op: str, spec, case_dict: dict, sources, wait_s: Optional[float] = None):
        from kernel_oracle.harness.check import Observed

        # Note [Hangs and compilation]: a compiling worker gets time for a compilation before a hang
        timeout_s, grace_s = (self.case_timeout_s, self._grace_s()) if wait_s is None else (float(wait_s), 0.0)
        self.start()
        case = case_dict[0] if isinstance(case_dict, tuple) else case_dict  # (case, saved call): Worker.check
        key = (str(spec), (case.get("problem") or {}).get("op"))
        first_s = self._first_call_s(key)  # a first call's warm-up is not the case's time
        self.last_wait_s = max(timeout_s, grace_s) + first_s
        try:
            self._send((op, str(spec), self.device, sources, case_dict))
            if not self._answered_within(timeout_s + first_s):
                if not (grace_s > timeout_s and self._answered_within(grace_s - timeout_s)):
                    self.kill()
                    if first_s:
                        self._silent_first.add(key)
                    first = f" (a first call, given {first_s:.1f}s more to warm up)" if first_s else ""
                    extra = f", nor within {grace_s:g}s with time for a compilation" if grace_s else ""
                    return Observed("hang", message=f"no answer within {timeout_s:g}s{first}{extra}; worker "
                                                    f"killed and replaced")
                self.slow_answers += 1
            tag, payload = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._reap()
            return Observed("crash", message=f"worker process died ({_exit_words(code)})")
        except Exception as exc:  # noqa: BLE001 - bytes on the pipe that are no answer: the target wrote there
            self.kill()
            return Observed("crash", message=f"the worker's answer could not be read ({type(exc).__name__}); "
                                             f"worker killed and replaced")
        self._called.add(key)
        if tag == "error":
            return Observed("raise", exc_type="TargetError", message=payload)
        if tag == "device-lost":
            self.kill()
            return Observed("crash", message=f"the target left the CUDA context broken ({payload}); worker "
                                             f"replaced")
        if tag == "harness-error":
            raise WorkerError(f"harness error in the worker (a bug of kernel-oracle, not of the target): {payload}")
        return payload

    def _reap(self) -> Optional[int]:
        code = None
        if self._proc is not None:
            self._proc.join(timeout=5)
            code = self._proc.exitcode
        self.kill()
        return code

    def _forget(self) -> None:
        """After the process is gone: end its group, drain its output, drop the handles."""
        pid = self._proc.pid if self._proc is not None else None
        _end_group(pid, ask_first=False)  # already ended: stragglers of its group, if any
        if self._pump is not None:
            self._pump.join(timeout=2)  # the rest of its output reaches the log
        if self._conn is not None:
            self._conn.close()
        self._proc = None
        self._conn = None
        self._pump = None
        self._ready = False

    def kill(self) -> None:
        """End the process and its group now (a hang, a crash, an interrupt); the next call starts a
        fresh one."""
        if self._proc is not None:
            self.restarts += 1
            _end_group(self._proc.pid)  # its guardian ends the worker's tree (Note [Worker processes])
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=5)
        self._forget()

    def close(self) -> None:
        """Ask the process to exit (kill it if it does not within 5 s), then end its group and
        stop copying its output to the log."""
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        if self._proc is not None and self._proc.is_alive():
            _end_group(self._proc.pid)
            self._proc.kill()
            self._proc.join(timeout=5)
        self._forget()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self.log_to(None)


def verdict_of(case, answer):
    """The verdict of a :meth:`Worker.check` answer for ``case``: the verdict itself, or, for a hang or a
    crash of the worker, the case's finding of that kind (bucketed by the observation)."""
    from kernel_oracle.harness.check import Verdict

    if isinstance(answer, Verdict):
        return answer
    from kernel_oracle.harness.buckets import bucket_of

    what = "hung" if answer.kind == "hang" else "crashed"
    verdict = Verdict(False, answer.kind, f"target {what}: {answer.message}")
    verdict.bucket = bucket_of(case, verdict, observed=answer)
    return verdict


def _exit_words(code: Optional[int]) -> str:
    from kernel_oracle.harness.buckets import describe_exit

    return describe_exit(code)
