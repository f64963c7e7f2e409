"""No process a target starts outlives its campaign: a guardian that reaps the worker's whole tree.

Note [Worker processes]
-----------------------
A target may start processes (a compiler daemon, a helper server, a hostile ``setsid`` child with an
empty environment), and none may outlive the campaign: a GPU kept busy or a port kept open after the run
ends is a defect of the run.  (With ``--no-isolate`` the target runs in the campaign's own process, which
is their subreaper while it runs and kills those started meanwhile at its end: :class:`InProcess`.)  A process group does not hold them (a child's ``setsid`` leaves it), nor
does anything inherited (an environment variable is gone with ``env={}``, a file descriptor with
``close_fds``), and after its parent exits a daemonised grandchild belongs to init.  So the worker
process that the campaign starts is a *guardian* (:func:`guard`): it asks Linux to make it the
subreaper of everything below it (``PR_SET_CHILD_SUBREAPER``: an orphan below it is reparented to it,
not to init), forks the process that serves the campaign, and waits.  Every process the target starts,
in whatever session and with whatever environment, stays a descendant of the guardian, which ends all of
them (SIGKILL until none is left, :func:`end_tree`) and then itself when:

* the serving process exits (the campaign closed the worker, or it crashed: the guardian then exits with
  the same status, so the campaign reads the crash as before);
* the campaign asks (SIGTERM: :meth:`fuzz.worker.Worker.kill` sends it, then waits);
* the campaign dies, ``kill -9`` included: Linux sends the guardian SIGTERM then
  (``PR_SET_PDEATHSIG``), and the serving process dies with the guardian the same way.

The guardian is a few kilobytes of Python that imports nothing heavy and waits in ``waitpid``, so it
answers while the serving process is stuck in a kernel.  No token is passed to the target (an
environment variable a target could read to behave only when tested).  Where Linux's process controls
are missing the worker serves without a guardian and its process group is all that ends with it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Optional

__all__ = ["InProcess", "become_subreaper", "descendants", "end_tree", "guard", "now_ticks"]

# seconds the guardian spends ending a tree before it gives up on stragglers (unkillable: uninterruptible I/O)
END_TREE_S = 5.0
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def become_subreaper(on: bool = True) -> bool:
    """Make orphans below this process its children (True when Linux did)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0)


def _stat(pid: int) -> Optional[tuple]:
    """``(state, ppid, start time in clock ticks)`` of ``pid`` from ``/proc``, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) ": the comm may hold anything
    try:
        return fields[0], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _table() -> dict:
    """pid -> (state, ppid, start) of every process."""
    out = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            out[pid] = st
    return out


def descendants(root: int, table: Optional[dict] = None) -> list[int]:
    """Every live (not zombie) process below ``root``, found through ``/proc``'s parent links."""
    table = _table() if table is None else table
    children: dict = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if table[pid][0] != "Z":
            out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def now_ticks() -> int:
    """This moment in ``/proc``'s start-time unit (clock ticks since boot); 0 where unknown."""
    st = _stat(os.getpid())
    return st[2] if st else 0


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_tree(root: int, *, only=None, seconds: float = END_TREE_S) -> int:
    """SIGKILL every process below ``root`` (``only``: a predicate of the pid) until none is left (one
    that forks meanwhile leaves its child below ``root``, a subreaper, for the next round); reaps the
    ones that are this process's children.  Returns how many were killed."""
    killed: set = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pids = [p for p in descendants(root) if only is None or only(p)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()
        time.sleep(0.01)
    _reap()
    return len(killed)


class InProcess:
    """The processes a target started in this process (``--no-isolate``): this process becomes their
    subreaper while the campaign runs, and :meth:`end` kills every descendant started since (nothing
    when not ``active``: the target runs in a worker)."""

    def __init__(self, active: bool = True) -> None:
        self.active = active
        self.since = now_ticks() if active else 0
        self.reaping = become_subreaper() if active else False

    def end(self) -> int:
        if not self.active:
            return 0
        def started_since(pid: int) -> bool:
            st = _stat(pid)
            return st is not None and st[2] >= self.since
        killed = end_tree(os.getpid(), only=started_since, seconds=2.0)
        if self.reaping:
            become_subreaper(False)
        return killed


class _Stop(Exception):
    """SIGTERM reached the guardian (the campaign asks, or it died)."""


def guard(serving_only=()) -> bool:
    """Become the guardian of the worker's tree (Note [Worker processes]) and fork the serving process:
    returns True in the serving process; the guardian itself never returns (it exits when the tree is
    over).  False, and nothing forked, where the controls are missing.  ``serving_only``: connections the
    guardian closes (the campaign's pipe: its end of it stays with the serving process alone, so the
    campaign sees the serving process's death at once)."""
    if not hasattr(os, "fork") or not become_subreaper():
        return False

    def stop(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # the campaign died (kill -9): end the tree
    if os.getppid() == 1:  # it died before the request took: nothing to guard for
        os._exit(1)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        become_subreaper(False)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the guardian is gone: so is the serving process
        return True
    for conn in serving_only:
        conn.close()
    os._exit(_watch(child))


def _watch(child: int) -> int:
    """The guardian's life: wait for the serving process (reaping adopted orphans), or for SIGTERM; end
    the tree; the exit status to leave (the serving process's, a signal re-raised)."""
    status = None
    try:
        while status is None:
            pid, code = os.waitpid(-1, 0)
            if pid == child:
                status = code
    except (_Stop, ChildProcessError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not cut short
    end_tree(os.getpid())
    if status is None:
        return 128 + signal.SIGTERM
    if os.WIFSIGNALED(status):  # mirror a crash: the campaign reads the same death
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):  # SIGKILL / SIGSTOP keep their default
            pass
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
