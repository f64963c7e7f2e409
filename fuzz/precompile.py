"""Compile a Triton target's kernel variants in parallel child processes, beside a campaign.

Note [Parallel precompilation]
------------------------------
On a GPU a campaign of our Triton LoRA kernels is bound by compilations: the fuzzer meets about one
new kernel variant per four cases at small shapes (dtypes x rank bucket x path x permutation x
alignment family; Note [Specialization] in ``kernels/lora``), each costs about half a second of
LLVM and ptxas on one core (cProfile on the H200, 2026-11-30: 16 compilations took 9 of 12.7 s,
6.2 cases/s), and the campaign process compiles one at a time.  A GPU host has cores to spare (16 on
the H200 machine), so :func:`start` runs ``processes`` children that draw cases from the campaign's
own strategy (:func:`fuzz.strategies.cases`, same family, dtypes, categories and size preset, each
child its own seed) and only *execute* the target: nothing is judged, nothing is reported.  Every
kernel they compile lands in Triton's on-disk cache (``TRITON_CACHE_DIR``, shared through the
environment), where the campaign's worker finds it: its first call of that variant loads a binary
instead of compiling.  The children stop at their deadline or when the campaign ends
(:meth:`Precompile.stop`).  The campaign's results cannot depend on them: they only warm a cache
whose entries Triton keys by source, signature and options.

Measured on the H200 (2026-11-30, 12 children, on for every ``triton`` campaign on CUDA): it made
things *worse*.  ``kernel-oracle run --device cuda --time-budget 120`` ran 3,780 fuzz cases with it
(triton lora 53, triton vision 25) against 5,209 without it minutes later on the same machine (100
and 736; that run had a warmer Triton cache, so part of the gap is the cache), and ``kernel-oracle
bench`` measured triton lora at 9.2 cases/s (8.4 cold, 15.0 warm without it, last session).  The
children execute cases on the GPU and start a CUDA context each, so they contend with the campaign
for the GPU and the host; they also need seconds of imports before they compile anything.  So
``run_campaign(precompile=...)`` is off by default.  ``precompile=True`` now starts *compile-only*
children (``compile_only=True``, the default of :func:`start`): the wrappers run as usual (validation,
output allocation, launch geometry) but every kernel launch becomes ``JITFunction.warmup`` with the
same arguments, which compiles the variant into the disk cache under the key a real launch computes
and runs nothing on the GPU.  Not yet measured on the GPU: until it is, it stays off by default
(``bash scripts/h200_session.sh`` has no phase for it yet; ``kernel-oracle bench`` with
``precompile=True`` in ``run_campaign`` is the measurement to take).

What did work is the other use of the same children, :func:`start_variants`: before the campaign's
clock starts, not beside it, each child compiles (only) its share of a fixed list with one case per
compiled LoRA variant (Note [Variant warm-up] in :mod:`harness.warmup`) and exits.  On the H200
(2026-11-30): 624 variants in 67 s with 12 children on a cold cache, after which ``kernel-oracle
bench`` ran triton lora at 96 cases/s.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

__all__ = ["Precompile", "default_processes", "start"]

# children beyond this gain little: the variants a campaign meets are a few hundred
MAX_PROCESSES = 12
# cores left to the campaign's own process and worker
SPARE_CORES = 3


def default_processes() -> int:
    """Children to start: the host's cores less :data:`SPARE_CORES`, at most :data:`MAX_PROCESSES`
    (0 on a machine with too few cores to spare)."""
    return max(0, min(MAX_PROCESSES, (os.cpu_count() or 1) - SPARE_CORES))


@dataclass
class Precompile:
    """Running children (``procs``) compiling for ``target`` x ``family`` until ``deadline``."""

    target: str
    family: str
    procs: list = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def stop(self) -> dict:
        """Stop every child (those still running are terminated); returns ``{"processes": n,
        "cases": executed by all, "seconds": since the start}`` for the campaign's record."""
        cases = 0
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            cases += sum(int(ln.split()[1]) for ln in (out or "").splitlines() if ln.startswith("executed "))
        return {"processes": len(self.procs), "cases": cases, "seconds": round(time.monotonic() - self.started, 2)}


    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for every child to finish on its own; True when all have."""
        deadline = time.monotonic() + seconds
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True


def _spawn(handle: Precompile, args: list, env: dict) -> None:
    handle.procs.append(subprocess.Popen([sys.executable, "-m", "kernel_oracle.fuzz.precompile", *args], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                         text=True))


def start_variants(target: str, device: str, *, seconds: float, dtypes: Sequence[str], ops: Sequence[str],
                   processes: Optional[int] = None) -> Precompile:
    """Start children that compile (only) the LoRA variant cases of :func:`harness.warmup.variant_cases`,
    child ``i`` of ``n`` the cases ``i, i+n, ...``, each exiting when its share is done or after
    ``seconds`` (Note [Variant warm-up] in :mod:`harness.warmup`)."""
    from kernel_oracle.harness.device import worker_env

    n = default_processes() if processes is None else int(processes)
    env = worker_env(device)
    handle = Precompile(target, "lora")
    for i in range(n):
        _spawn(handle, ["--target", target, "--family", "lora", "--device", device, "--seconds", f"{seconds:.1f}",
                        "--limits", "gpu", "--dtypes", ",".join(dtypes), "--categories", "valid",
                        "--ops", ",".join(ops), "--compile-only", "--variants", f"{i}/{n}"], env)
    return handle


# children need seconds of imports before they compile anything: a shorter warm-up starts none
MIN_PARALLEL_S = 20.0
# the share of a warm-up's time the children may take; the rest loads (or compiles) in the worker
# (the H200 suite of 2026-11-30, 16 test workers beside a soak: children that took all of a 60 s
# warm-up left the worker no case at all)
CHILDREN_SHARE = 0.75


def warm_up_target(target, spec: str, device, *, time_s: Optional[float], processes: Optional[int] = None) -> dict:
    """A worker's warm-up of ``target`` (resolved from ``spec``) for up to ``time_s`` seconds: for our
    kernels (``spec == "triton"``) on CUDA, children compile every LoRA variant in parallel first
    (:func:`start_variants`, at most :data:`CHILDREN_SHARE` of the time), then
    :func:`harness.warmup.warm_up` runs the fixed cases and the variants in this process, loading what
    the children compiled (Note [Variant warm-up]).  Returns warm_up's record plus ``"parallel"``
    (the children's ``{"processes", "cases", "seconds"}``, or None) and the total ``"seconds"``."""
    from kernel_oracle.harness.warmup import warm_up, warm_up_dtypes

    t0 = time.monotonic()
    lora_ops = tuple(op for op in sorted(getattr(target, "entries", ())) if op != "vision")
    variants = (spec == "triton" and str(device).startswith("cuda") and bool(lora_ops)
                and getattr(target, "available", True))
    parallel = None
    n = default_processes() if processes is None else int(processes)
    if variants and n > 0 and (time_s is None or time_s >= MIN_PARALLEL_S):
        children = start_variants(spec, str(device), seconds=time_s or 600.0, dtypes=warm_up_dtypes(target),
                                  ops=lora_ops, processes=n)
        children.wait(CHILDREN_SHARE * time_s if time_s is not None else 600.0)
        parallel = children.stop()
    left = None if time_s is None else max(1.0, time_s - (time.monotonic() - t0))
    result = warm_up(target, device, time_s=left, variants=variants)
    return {**result, "seconds": round(time.monotonic() - t0, 3), "parallel": parallel}


def start(target: str, family: str, device: str, *, seconds: float, limits: str, dtypes: Sequence[str],
          categories: Sequence[str], ops: Optional[Sequence[str]] = None, processes: Optional[int] = None,
          seed: int = 0, compile_only: bool = True) -> Precompile:
    """Start ``processes`` (default :func:`default_processes`) children for ``seconds`` (Note [Parallel
    precompilation]); their output is read by :meth:`Precompile.stop`.  ``compile_only``: launches
    compile and run nothing (else the children execute every case, the mode measured slower)."""
    from kernel_oracle.harness.device import worker_env

    n = default_processes() if processes is None else int(processes)
    env = worker_env(device)
    handle = Precompile(target, family)
    for i in range(n):
        cmd = ["--target", target, "--family", family,
               "--device", device, "--seconds", f"{seconds:.1f}", "--limits", limits, "--seed", str(seed * 1000 + i),
               "--dtypes", ",".join(dtypes), "--categories", ",".join(categories)]
        if ops:
            cmd += ["--ops", ",".join(ops)]
        if compile_only:
            cmd.append("--compile-only")
        _spawn(handle, cmd, env)
    return handle


class _Done(Exception):
    pass


class _CompileOnly:
    """A Triton kernel whose launches ``kernel[grid](*args, **kwargs)`` compile and run nothing."""

    def __init__(self, kernel) -> None:
        self._kernel = kernel

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self._kernel.warmup(*args, grid=grid, **kwargs)

    def __getattr__(self, name):
        attr = getattr(self._kernel, name)
        return _CompileOnly(attr) if name == "generic" else attr  # the LoRA kernels' twin family


def compile_only() -> list[str]:
    """Make every launch of our Triton kernels in this process a compilation only; returns their names."""
    from kernel_oracle.kernels.lora import _kernels as lora_kernels
    from kernel_oracle.kernels.vision import _kernel as vision_kernel

    patched = []
    for module, names in ((lora_kernels, [n for n in dir(lora_kernels) if n.endswith("_kernel")]),
                          (vision_kernel, ["_vision_attn_fwd"])):
        for name in names:
            setattr(module, name, _CompileOnly(getattr(module, name)))
            patched.append(name)
    return patched


def _child(args) -> int:
    """One child: execute the target on cases drawn from the campaign's strategy until the deadline."""
    deadline = time.monotonic() + args.seconds
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

    from kernel_oracle.fuzz.strategies import cases
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import execute
    from kernel_oracle.harness.device import configure_process

    configure_process(args.device)
    if args.compile_only:
        compile_only()
    target = resolve_target(args.target, args.device)
    ops = tuple(args.ops.split(",")) if args.ops else None
    if args.variants:
        return _child_variants(args, target, ops, deadline)
    strategy = cases(args.family, categories=tuple(args.categories.split(",")), dtypes=tuple(args.dtypes.split(",")),
                     ops=ops, limits=args.limits)
    executed = [0]
    stopping = [False]
    # Precompile.stop terminates: finish the case at hand, then report the count (a flag, not an
    # exception thrown into Hypothesis's engine)
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))

    @seed(args.seed)
    @settings(max_examples=10**9, database=None, deadline=None, phases=[Phase.generate], derandomize=False,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    @given(strategy)
    def run(case):
        if stopping[0] or time.monotonic() >= deadline:
            raise _Done
        try:
            execute(target, case, args.device, to_host=False)
        except Exception as exc:  # noqa: BLE001 - nothing is judged here: the campaign meets the case and judges it
            if "CUDA error" in str(exc):  # this child's context is gone: it can compile no more
                raise _Done from None
        executed[0] += 1

    try:
        run()
    except _Done:
        pass
    print(f"executed {executed[0]}", flush=True)
    return 0


def _child_variants(args, target, ops, deadline: float) -> int:
    """One child of :func:`start_variants`: its share ``i/n`` of the variant cases, then exit."""
    from kernel_oracle.harness.check import execute
    from kernel_oracle.harness.warmup import variant_cases

    i, n = (int(v) for v in args.variants.split("/"))
    executed = 0
    for case in variant_cases(ops, tuple(args.dtypes.split(",")))[i::n]:
        if time.monotonic() >= deadline:
            break
        try:
            execute(target, case, args.device, to_host=False)
        except Exception as exc:  # noqa: BLE001 - nothing is judged here (see _child)
            if "CUDA error" in str(exc):
                break
        executed += 1
    print(f"executed {executed}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="one precompilation child (Note [Parallel precompilation])")
    for name in ("target", "family", "device", "limits", "dtypes", "categories"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--ops", default="")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile-only", action="store_true", help="launches compile and run nothing")
    ap.add_argument("--variants", default="", metavar="I/N",
                    help="compile share I of N of the LoRA variant cases (harness.warmup.variant_cases), then exit")
    return _child(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
