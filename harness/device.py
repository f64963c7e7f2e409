"""The one place that decides where Triton kernels run: compiled on a GPU, or in the interpreter.

Note [Device switch]
--------------------
Triton picks interpreter or compiler when a kernel module is *imported* (``@triton.jit`` reads
``TRITON_INTERPRET`` at decoration time), so the switch must be thrown before the first kernel
import and can never be undone in that process.  Two ways to throw it, and no other:

* :func:`worker_env` -- the environment of a child process (campaign workers, the main job's
  campaigns): the caller's own environment is never touched, so a campaign on ``device="cpu"`` inside
  a GPU test session cannot turn that session's later kernel imports into interpreted ones;
* :func:`configure_process` -- for a process whose whole job is to run kernels on one device (a CLI
  command, a test session): sets the variable if the device needs the interpreter and refuses, with
  the reason, when kernel modules were already imported the other way.

Kernels themselves only *read* the switch (:func:`kernel_oracle.kernels.interpreter.interpreting`).

Note [Kernel cache]
-------------------
A compiled Triton kernel costs about half a second of LLVM and ptxas; a campaign that compiles what it
meets spends its budget compiling.  So every compiling process this package starts or configures (the
main job's and ``fuzz``'s workers, their precompilation children, a ``matrix`` row, a test session under
the pytest plugin) keeps Triton's binaries in ``<cache_root>/triton`` (``$KERNEL_ORACLE_CACHE`` or
``~/.cache/kernel-oracle``), one directory shared by all workers of a campaign and by later runs.  A
``TRITON_CACHE_DIR`` the user set wins, and so does ``--triton-cache DIR`` (it sets that variable in the
command's process, which its workers inherit).  Entries are keyed by Triton on source, signature,
options and target, so a shared directory cannot change a result.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

__all__ = ["CACHE_ENV", "DEVICE_CHOICES", "DeviceLost", "is_device_error", "cache_root", "configure_process", "cuda_available", "default_device", "interpreting",
           "default_triton_cache", "needs_interpreter", "resolve_device", "triton_cache_dir", "use_triton_cache",
           "worker_env", "yield_while_waiting"]

# what ``--device`` takes in every command: auto is the GPU when torch sees one, else the CPU
DEVICE_CHOICES = ("auto", "cpu", "cuda")

_TRUE = ("1", "true", "yes", "on")


class DeviceLost(RuntimeError):
    """The target left the CUDA context broken (an illegal or misaligned address, a device-side assert):
    every later CUDA call of the process fails, so the process that ran it must end (Note [A broken
    device context] in :mod:`fuzz.worker`)."""


def is_device_error(exc: BaseException) -> bool:
    """Whether ``exc`` is CUDA reporting a broken context (``torch.AcceleratorError``, or a
    ``RuntimeError`` whose text starts a CUDA error), not an ordinary error a kernel raised."""
    accelerator = getattr(sys.modules.get("torch"), "AcceleratorError", None)  # torch not imported: none
    if accelerator is not None and isinstance(exc, accelerator):
        return True
    return isinstance(exc, RuntimeError) and str(exc).lstrip().startswith(("CUDA error", "CUDA driver error"))


def interpreting(env: Optional[Mapping[str, str]] = None) -> bool:
    """True when Triton kernels imported under ``env`` (default: this process) run in the interpreter."""
    env = os.environ if env is None else env
    return env.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def resolve_device(requested: str, *, here: bool = True) -> str:
    """``"cpu"`` or ``"cuda"`` for ``--device requested`` (:data:`DEVICE_CHOICES`): ``auto`` is
    :func:`default_device`; ``cuda`` needs a GPU here unless ``here=False`` (work that runs on other
    machines, a Dask cluster's workers).  ``ValueError`` naming the option and what to pass."""
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"--device {requested!r} is invalid; the only valid values are "
                         + ", ".join(DEVICE_CHOICES))
    if requested == "auto":
        return default_device()
    if requested == "cuda" and here and not cuda_available():
        raise ValueError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                         "pass --device cpu or --device auto")
    return requested


def needs_interpreter(device) -> bool:
    """Triton kernels take CPU tensors only in the interpreter; a CUDA device compiles them."""
    return not str(device).startswith("cuda")


# the user's cache directory (SGLang wheels, compiled kernels): ``$KERNEL_ORACLE_CACHE`` or ~/.cache/kernel-oracle
CACHE_ENV = "KERNEL_ORACLE_CACHE"


def cache_root(env: Optional[Mapping[str, str]] = None) -> str:
    """``$KERNEL_ORACLE_CACHE`` of ``env`` (default: this process) or ``~/.cache/kernel-oracle``."""
    env = os.environ if env is None else env
    return os.path.abspath(os.path.expanduser(env.get(CACHE_ENV) or "~/.cache/kernel-oracle"))


def default_triton_cache(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``<cache_root>/triton``, created, for a compiling process whose ``env`` names no ``TRITON_CACHE_DIR``;
    None when one is named (the user's choice, or ``--triton-cache``) or the directory cannot be made
    (a read-only home: Triton's own default applies)."""
    env = os.environ if env is None else env
    if env.get("TRITON_CACHE_DIR"):
        return None
    path = os.path.join(cache_root(env), "triton")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path


def worker_env(device, base: Optional[Mapping[str, str]] = None, *, triton_cache=None) -> dict:
    """The environment for a child process that runs kernels on ``device`` (``base`` untouched).

    ``triton_cache``: a directory for Triton's compiled kernels (``TRITON_CACHE_DIR``), kept between
    runs so a fresh worker loads binaries instead of compiling (``--triton-cache DIR``); created if
    missing, made absolute (the child may run elsewhere).  ``None`` keeps ``base``'s setting, and where
    ``base`` has none a compiling child gets :func:`default_triton_cache` (Note [Kernel cache]).

    A CPU child runs on one intra-op thread (``OMP_NUM_THREADS=1`` unless ``base`` sets it): a case's
    tensors are small, so a second thread only waits (2-core host, 25-s campaigns of seed 3: the reference
    target 3,445 -> 4,004 LoRA and 4,331 -> 4,847 vision cases; our kernels under the interpreter the same
    within 1.5 %), and one campaign keeps one core busy (Note [Campaigns side by side])."""
    env = dict(os.environ if base is None else base)
    if needs_interpreter(device):
        env["TRITON_INTERPRET"] = "1"
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env.pop("TRITON_INTERPRET", None)
    if triton_cache is not None:
        env["TRITON_CACHE_DIR"] = triton_cache_dir(triton_cache)
    elif not needs_interpreter(device):
        default = default_triton_cache(env)
        if default is not None:
            env["TRITON_CACHE_DIR"] = default
    return env


def triton_cache_dir(path) -> str:
    """``path`` as an absolute, existing directory for ``TRITON_CACHE_DIR``; ``ValueError`` naming the
    option when it cannot be one."""
    p = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.path.exists(p) and not os.path.isdir(p):
        raise ValueError(f"--triton-cache {path}: is a file, not a directory; pass a directory")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--triton-cache {path}: cannot create it ({exc.strerror or exc}); pass a writable "
                         "directory") from None
    return p


def _imported_kernel_modules() -> list[str]:
    return sorted(m for m in sys.modules
                  if m.startswith("kernel_oracle.kernels.") and m.rsplit(".", 1)[-1].startswith("_")
                  or m.startswith("kernels_mutant_"))


def configure_process(device) -> None:
    """Make this process run kernels on ``device``; raise ``RuntimeError`` when it is too late.

    Call it before anything imports a kernel module (CLI entry points, the test session)."""
    want = needs_interpreter(device)
    if not want:
        default = default_triton_cache()  # Note [Kernel cache]: compiled kernels persist by default
        if default is not None:
            os.environ["TRITON_CACHE_DIR"] = default
    if want == interpreting():
        return
    early = _imported_kernel_modules()
    if early:
        have = "interpreted" if interpreting() else "compiled"
        raise RuntimeError(f"device={device!s} needs Triton kernels {'interpreted' if want else 'compiled'}, "
                           f"but {early} were already imported {have} in this process; run the {device!s} "
                           "work in a fresh process (a campaign worker does this for you)")
    if want:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)


def use_triton_cache(path) -> str:
    """Point this process's Triton at ``path`` (``--triton-cache DIR``) before anything compiles; its
    workers inherit it through :func:`worker_env` (which copies this environment).  For a process whose
    job is the command that asked (a CLI entry point), like :func:`configure_process`.  Returns the
    absolute directory; ``ValueError`` naming the option when ``path`` cannot be one."""
    directory = triton_cache_dir(path)
    os.environ["TRITON_CACHE_DIR"] = directory
    return directory


def yield_while_waiting() -> bool:
    """Make this process's CUDA waits block and give up the core instead of spinning; call it before
    torch creates its CUDA context.  True when set; False where there is no CUDA driver.

    Note [Shared GPU waits]
    -----------------------
    A process with one CUDA context on a host of many cores spins while it waits for the device
    (CUDA's default schedule).  The main job's campaigns side by side are six such processes
    time-slicing one GPU: each waits most of the time, so about six cores spin for nothing while the
    children compiling our LoRA variants beside them (Note [Parallel precompilation]) get what is
    left.  Their workers therefore ask the driver for blocking waits on every visible device's
    primary context (``CU_CTX_SCHED_BLOCKING_SYNC``, the context torch's runtime calls use); a wait
    then costs a wake-up of microseconds on cases of milliseconds.  The flag only changes how the host
    waits, never what runs on the device.
    """
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        set_flags = cuda.cuDevicePrimaryCtxSetFlags_v2  # CUDA 11 on
    except (OSError, AttributeError):  # no driver, or one too old: CUDA's default waits
        return False
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    ok = count.value > 0
    for i in range(count.value):
        dev = ctypes.c_int(0)
        ok = ok and cuda.cuDeviceGet(ctypes.byref(dev), i) == 0
        ok = ok and set_flags(dev, 0x04) == 0  # CU_CTX_SCHED_BLOCKING_SYNC
    return ok
