"""Relaunch a compiled Triton kernel without the JIT's per-call work (the warm call's host cost).

Note [Direct launch]
--------------------
``kernel[grid](...)`` costs tens of microseconds of host time per call with triton 3.6 (binding the ~40
arguments, computing each one's specialization, hashing the cache key, building the launch metadata):
several times the kernel on small images.  A warm vision call (a launch-cache hit, Note [Launch cache]
in :mod:`kernels.vision.attention`) changes nothing between calls but the four tensors' addresses, so
:class:`DirectLaunch` keeps what the JIT found the first time (the compiled kernel's launcher, its
function handle and packed metadata, every other argument in signature order) and calls the launcher
with the new addresses.

What the JIT would decide differently, it checks per call and then declines (returns False; the
caller takes the JIT path): a pointer that is not 16-byte aligned (the launcher is built only from
an aligned first launch, and the JIT specializes pointers on that alignment), another current
device, a launch hook installed (profilers such as Proton use them; Triton's knobs hold an empty
``HookChain`` when none is, which the JIT calls for nothing, so the direct launch passes None).
Nothing else can change under a cache hit: shapes, strides, dtypes, the config, the scale and the
launch options are part of the launch-cache key (Note [Launch cache]).

:attr:`DirectLaunch.launch` is a function built with the launcher (the warm call calls it directly,
one layer fewer than ``__call__``; four pointers, the vision kernel's, are written out).  It passes
the launcher its ~60 arguments as one tuple, ``(gx, gy, gz, stream) + head + addresses + tail``:
unpacking three tuples into a call builds the arguments element by element, which costs more.

Triton's launcher signature is internal (``run(gx, gy, gz, stream, function, packed_metadata,
launch_metadata, enter_hook, exit_hook, *args)`` from 3.2 to at least 3.9, constexprs included).
On triton 3.6 (read from its ``backends/nvidia/driver.py``) the launcher's Python ``__call__`` only
builds two closures and finds no scratch memory before calling its compiled C ``launch``; with no
scratch in the kernel's metadata, :class:`DirectLaunch` calls that C ``launch`` itself.  Other
versions take the ``run`` call.  The first direct launch of every compiled kernel is checked bit
for bit against the JIT's (:func:`verified`, NaN-poisoned outputs on the same inputs; the kernel is
deterministic).  A mismatch or an exception disables direct launches for the process with a
warning, and :func:`direct_launch_info` says why.  ``VisionOptions(direct_launch=False)``
(:mod:`kernels.options`) plans launches that never build one.

On the H200's hosts a warm call with a direct launch takes about a quarter of the host time of the
same call through the JIT (``bench_vision --host``; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import threading
import warnings
from typing import Callable, Optional

import torch

__all__ = ["DirectLaunch", "direct_launch_info", "verified"]

_STATE = {"disabled_because": None, "verified": 0, "launches": 0, "declined": 0}
_VERIFIED: set[int] = set()  # id() of compiled kernels checked bit for bit (the JIT cache keeps them alive)
_LOCK = threading.Lock()


def direct_launch_info() -> dict:
    """``{"enabled", "disabled_because", "verified", "launches", "declined"}``: whether direct launches
    are still on in this process (a failed check turns them off), why not, how many compiled kernels
    passed the check, direct launches made and declined."""
    return {"enabled": _STATE["disabled_because"] is None, **_STATE}


class DirectLaunch:
    """One compiled kernel and one grid, relaunched on new addresses of its first ``n_ptr`` arguments.

    ``args``: every argument of the kernel by name (tensors included) as the JIT launch received
    them; ``names``: the kernel's parameter names in signature order (``JITFunction.arg_names``).
    The first ``n_ptr`` must be 16-byte aligned at construction (the usual case; otherwise
    :class:`Unaligned` is raised and the caller keeps the JIT path).
    """

    # launch: the function; the rest, what it was built from, read once here: the per-call path reads its
    # closure's cells
    __slots__ = ("launch", "raw", "_call", "_grid", "_head", "_tail", "_device", "_get_stream")

    def __init__(self, kernel, grid: tuple, args: dict, names: list, n_ptr: int, runtime=None,
                 triton_version: Optional[str] = None):
        """``runtime``: (get_current_device, get_current_stream, hooks) where ``hooks`` has
        ``launch_enter_hook`` and ``launch_exit_hook``, and ``triton_version``: Triton's own by
        default (tests pass fakes)."""
        if runtime is None:
            import triton
            from triton import knobs
            from triton.runtime import driver

            get_device = driver.active.get_current_device
            if get_device is torch.cuda.current_device:  # its lazy-init check is done (the kernel compiled)
                get_device = torch._C._cuda_getDevice
            runtime = (get_device, driver.active.get_current_stream, knobs.runtime)
            triton_version = triton.__version__
        kernel._init_handles()  # loads the module: function handle, registers checked
        values = [args[n] for n in names]
        if any(t.data_ptr() % 16 for t in values[:n_ptr]):
            raise Unaligned("a pointer argument is not 16-byte aligned")
        # the remaining arguments as the launcher takes them: tensors by address (a fixed one, e.g. a
        # block table, is held by its owner), the rest as given (constexprs are passed and ignored)
        self._tail = tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v for v in values[n_ptr:])
        self._grid = tuple(grid) + (1,) * (3 - len(grid))
        run = kernel.run
        self.raw = _raw_launch_ok(run, triton_version)
        # what follows the grid and the stream
        if self.raw:  # triton 3.6's CudaLauncher.__call__ minus its per-call closures (no scratch here)
            self._call = run.launch
            self._head = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                          kernel.packed_metadata, None, None, None)
        else:  # the launcher as JITFunction.run calls it (launch metadata and hooks: None)
            self._call = run
            self._head = (kernel.function, kernel.packed_metadata, None, None, None)
        get_device, self._get_stream, hooks = runtime
        self._device = get_device()
        #: ``launch(*tensors) -> bool``: what ``__call__`` does, one call layer fewer (the warm call's)
        self.launch = _launcher(self._call, self._grid, self._head, self._tail, n_ptr, self._device, get_device,
                                self._get_stream, hooks)

    def __call__(self, *tensors: torch.Tensor) -> bool:
        """Launch on ``tensors`` (the first ``n_ptr`` arguments) on the current stream; False (nothing
        launched) where the JIT could decide differently (Note [Direct launch])."""
        return self.launch(*tensors)


def _launcher(call, grid: tuple, head: tuple, tail: tuple, n_ptr: int, device0, get_device, get_stream, hooks):
    """The launch function of a :class:`DirectLaunch`: the per-call checks of Note [Direct launch], then
    ``call(gx, gy, gz, stream, *head, *addresses, *tail)`` as one tuple built by concatenation (unpacking
    three tuples into a call costs more, Note [Direct launch])."""
    gx, gy, gz = grid
    state = _STATE

    if n_ptr == 4:  # the vision kernel's q, k, v, out, written out
        def launch(q, k, v, o):
            a, b, c, d = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
            device = get_device()
            enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
            if ((a | b | c | d) & 15 or device != device0 or (enter is not None and getattr(enter, "calls", 1))
                    or (leave is not None and getattr(leave, "calls", 1))):
                state["declined"] += 1
                return False
            state["launches"] += 1
            call(*((gx, gy, gz, get_stream(device)) + head + (a, b, c, d) + tail))
            return True
        return launch

    def launch_any(*tensors):  # the same for any number of pointers
        ptrs = tuple(t.data_ptr() for t in tensors)
        bits = 0
        for p in ptrs:
            bits |= p
        device = get_device()
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        if (bits & 15 or device != device0 or (enter is not None and getattr(enter, "calls", 1))
                or (leave is not None and getattr(leave, "calls", 1))):
            state["declined"] += 1
            return False
        state["launches"] += 1
        call(*((gx, gy, gz, get_stream(device)) + head + ptrs + tail))
        return True
    return launch_any


class Unaligned(ValueError):
    """The first launch's pointers were not all 16-byte aligned: no direct launcher for it."""


def _raw_launch_ok(run, triton_version: Optional[str]) -> bool:
    """Whether ``run`` is triton 3.6's CudaLauncher, whose C ``launch`` can be called directly:
    the version whose argument order was read from its source (backends/nvidia/driver.py), and no
    scratch memory or tensor-descriptor wrapper in play."""
    return (triton_version is not None and triton_version.startswith("3.6.")
            and type(run).__name__ == "CudaLauncher"
            and getattr(getattr(run, "launch", None), "__name__", None) == "launch"  # not the tensordesc wrapper
            and getattr(run, "global_scratch_size", 1) == 0 and getattr(run, "profile_scratch_size", 1) == 0
            and getattr(run, "num_ctas", 1) == 1)


def verified(kernel, make: Callable[[], DirectLaunch], run_both: Callable[[DirectLaunch], tuple]) -> Optional[DirectLaunch]:
    """``make()``'s launcher, once its kernel has passed the bit-for-bit check, else None.

    ``run_both(direct)`` launches the JIT path and ``direct`` on the same inputs into NaN-poisoned
    outputs and returns them (jit_out, direct_out); it runs once per compiled kernel.
    """
    if _STATE["disabled_because"] is not None or kernel is None:
        return None
    try:
        try:
            direct = make()
        except Unaligned:  # not a failure: this launch keeps the JIT path
            return None
        if id(kernel) in _VERIFIED:
            return direct
        jit_out, direct_out = run_both(direct)
        if direct_out is None:  # declined (e.g. unaligned inputs): not a failure, just no direct path here
            return None
        same = _bitwise_equal(jit_out, direct_out)
    except Exception as exc:  # noqa: BLE001 - Triton's internals moved: keep the JIT path, say why
        _disable(f"{type(exc).__name__}: {exc}")
        return None
    if not same:
        _disable("the direct launch's output differed from the JIT launch's on the same inputs")
        return None
    with _LOCK:
        _VERIFIED.add(id(kernel))
        _STATE["verified"] += 1
    return direct


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _disable(reason: str) -> None:
    with _LOCK:
        _STATE["disabled_because"] = reason
    warnings.warn(f"kernel_oracle: direct kernel launches disabled ({reason}); using Triton's JIT launch",
                  RuntimeWarning, stacklevel=3)


def _reset_for_tests() -> None:
    with _LOCK:
        _STATE.update(disabled_because=None, verified=0, launches=0, declined=0)
        _VERIFIED.clear()
