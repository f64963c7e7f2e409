"""Compile our LoRA kernels' variants in parallel child processes: before a campaign's clock, or beside
the main job's campaigns.

Note [Parallel precompilation]
------------------------------
On a GPU a campaign of our Triton LoRA kernels that compiles as it goes is bound by compilations:
the fuzzer meets about one new kernel variant per four cases at small shapes (Note [Specialization]
in ``kernels/lora``), each costs about half a second of LLVM and ptxas on one core (most of a short
campaign's time, in cProfile), and a process compiles one at a time.  A GPU host has
cores to spare (16 on the H200 machine), so :func:`warm_up_target`, the worker's warm-up, has
:func:`start_variants` run children that each compile their share of a fixed list with one case per
variant (:func:`harness.warmup.variant_cases`, Note [Variant warm-up] there) and exit; the worker
then runs the list itself and only loads the binaries from Triton's disk cache (``TRITON_CACHE_DIR``,
shared through the environment).  The children are *compile-only* (:func:`compile_only`): the
wrappers run as usual (validation, output allocation, launch geometry) but every kernel launch becomes
``JITFunction.warmup`` with the same arguments, which compiles the variant under the key a real launch
computes and runs nothing on the GPU.  Results cannot depend on them: they only fill a cache whose
entries Triton keys by source, signature and options.

For one campaign (``fuzz``) the children run before the clock, never beside it: a campaign alone
keeps a core busy and its cases would wait for the compilers.  The main job on a GPU host runs its
campaigns side by side and starts no warm-up in them: :func:`kernel_oracle.jobs.main_job_campaigns.
precompile_beside` starts one child per core at the job's start and lets them run through the whole
window at the lowest CPU priority (:data:`BESIDE_NICE`), so they take only the cycles the campaigns
leave.  They first compile the cases our LoRA campaign is about to run, child ``i`` of ``n`` its runs
``i+1, i+1+n, ...`` (Note [The campaign's own stream] in :mod:`fuzz.stream`: while no case fails, a
campaign's cases are known before it draws them), then the variant list; the campaign compiles a
variant itself only where it reaches it before a child did, and loads every other one.  What they compiled is the job record's
``summary.precompile``; the cases per second with a cold and a warm cache are in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

__all__ = ["BESIDE_NICE", "CHILDREN_SHARE", "CompileOnly", "DEFAULT_WARM_UP_S", "MIN_PARALLEL_S", "Precompile", "compile_only", "default_processes",
           "start_variants", "warm_up_target"]

# the default warm-up of ``fuzz --device cuda`` without ``--warm-up`` (seconds, before the clock; it ends
# as soon as every variant is compiled or loaded, a few seconds on a warm cache)
DEFAULT_WARM_UP_S = 120.0


def default_processes(variants: Optional[int] = None) -> int:
    """Children to start: one per core (``os.cpu_count()``), at most one per variant (``variants``, when
    given); 0 on a single core, where the worker compiles faster than a child that must import first.
    The worker only waits while they compile (they run before the clock), so no core is kept back."""
    cores = os.cpu_count() or 1
    if cores < 2:
        return 0
    return cores if variants is None else max(0, min(cores, int(variants)))


@dataclass
class Precompile:
    """Running children (``procs``) compiling for ``target``."""

    target: str
    procs: list = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def stop(self) -> dict:
        """Stop every child (those still running are terminated); returns ``{"processes": n,
        "cases": compiled by all, "seconds": since the start}`` for the warm-up's record."""
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
            counts = [int(ln.split()[1]) for ln in (out or "").splitlines() if ln.startswith("executed ")]
            cases += counts[-1] if counts else 0  # a child prints its running count: one terminated still says
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


def start_variants(target: str, device: str, *, seconds: float, dtypes: Sequence[str], ops: Sequence[str],
                   processes: Optional[int] = None, nice: int = 0, stream=None) -> Precompile:
    """Start children that compile (only) the LoRA variant cases of :func:`harness.warmup.variant_cases`,
    child ``i`` of ``n`` the cases ``i, i+n, ...``, each exiting when its share is done or after
    ``seconds`` (Note [Parallel precompilation]); ``nice``: their CPU priority, added to this process's;
    ``stream``: a :class:`~kernel_oracle.fuzz.stream.CampaignStream` whose runs ``i+1, i+1+n, ...`` child
    ``i`` compiles first (Note [The campaign's own stream])."""
    from kernel_oracle.harness.device import worker_env

    from kernel_oracle.harness.warmup import variant_cases

    n = default_processes(len(variant_cases(ops, dtypes))) if processes is None else int(processes)
    env = worker_env(device)
    handle = Precompile(target)
    for i in range(n):
        cmd = [sys.executable, "-m", "kernel_oracle.fuzz.precompile", "--target", target, "--device", device,
               "--seconds", f"{seconds:.1f}", "--dtypes", ",".join(dtypes), "--ops", ",".join(ops),
               "--share", f"{i}/{n}", "--nice", str(int(nice))]
        if stream is not None:
            cmd += ["--stream-seed", str(stream.seed), "--stream-limits", stream.limits,
                    "--stream-runs", str(stream.runs)] + (["--upstream-only"] if stream.upstream_contracts_only else [])
        handle.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                             stdin=subprocess.DEVNULL, text=True))
    return handle


# the CPU priority of the children compiling beside the main job's campaigns (the lowest): they take
# only the cycles the campaigns leave
BESIDE_NICE = 19
# children need seconds of imports before they compile anything: a shorter warm-up starts none
MIN_PARALLEL_S = 20.0
# the share of a warm-up's time the children may take; the rest loads (or compiles) in the worker (on a
# loaded host, children that take all of the warm-up leave the worker no case at all)
CHILDREN_SHARE = 0.75


def warm_up_target(target, spec, device, *, time_s: Optional[float], processes: Optional[int] = None) -> dict:
    """A worker's warm-up of ``target`` (resolved from ``spec``, a spec string or TargetSpec) for up to
    ``time_s`` seconds: for our kernels (spec name ``triton``) on CUDA, children compile every LoRA
    variant in parallel first
    (:func:`start_variants`, at most :data:`CHILDREN_SHARE` of the time), then
    :func:`harness.warmup.warm_up` runs the fixed cases and the variants in this process, loading what
    the children compiled (Note [Variant warm-up]).  Returns warm_up's record plus ``"parallel"``
    (the children's ``{"processes", "cases", "seconds"}``, or None) and the total ``"seconds"``."""
    from kernel_oracle.harness.targets import TargetSpec
    from kernel_oracle.harness.warmup import variant_cases, variant_ops, warm_up, warm_up_dtypes

    t0 = time.monotonic()
    spec = TargetSpec.parse(spec)
    ops = variant_ops(sorted(getattr(target, "entries", ())))  # those of our kernels with compiled variants
    variants = (spec.name == "triton" and str(device).startswith("cuda") and bool(ops)
                and getattr(target, "available", True))
    parallel = None
    dtypes = warm_up_dtypes(target)
    n = default_processes(len(variant_cases(ops, dtypes))) if processes is None else int(processes)
    if variants and n > 0 and (time_s is None or time_s >= MIN_PARALLEL_S):
        children = start_variants(str(spec), str(device), seconds=time_s or 600.0, dtypes=dtypes,
                                  ops=ops, processes=n)
        children.wait(CHILDREN_SHARE * time_s if time_s is not None else 600.0)
        parallel = children.stop()
    left = None if time_s is None else max(1.0, time_s - (time.monotonic() - t0))
    result = warm_up(target, device, time_s=left, variants=variants)
    return {**result, "seconds": round(time.monotonic() - t0, 3), "parallel": parallel}


class CompileOnly:
    """A Triton kernel whose launches ``kernel[grid](*args, **kwargs)`` compile and run nothing; each
    compiled kernel is appended to ``seen`` (when given) as (grid, num_warps, num_stages, kernel)
    (``tools/hopper_sass.py`` reads them)."""

    def __init__(self, kernel, seen: Optional[list] = None) -> None:
        self._kernel = kernel
        self._seen = seen

    def __getitem__(self, grid):
        def warm(*args, **kwargs):
            compiled = self._kernel.warmup(*args, grid=grid, **kwargs)
            if self._seen is not None:
                self._seen.append((grid, kwargs.get("num_warps"), kwargs.get("num_stages"), compiled))
            return compiled
        return warm

    def __getattr__(self, name):
        attr = getattr(self._kernel, name)
        return CompileOnly(attr, self._seen) if name == "generic" else attr  # the LoRA kernels' twin family


def compile_only() -> list[str]:
    """Make every launch of our Triton kernels in this process a compilation only; returns their names."""
    from kernel_oracle.kernels.lora import _kernels as lora_kernels
    from kernel_oracle.kernels.vision import _kernel as vision_kernel

    patched = []
    for module, names in ((lora_kernels, [n for n in dir(lora_kernels) if n.endswith("_kernel")]),
                          (vision_kernel, ["_vision_attn_fwd"])):
        for name in names:
            setattr(module, name, CompileOnly(getattr(module, name)))
            patched.append(name)
    return patched


def _child(args) -> int:
    """One child of :func:`start_variants`: compile (only) its share ``I/N`` of the variant cases, then exit."""
    import signal

    from kernel_oracle.fuzz.stopping import die_with_parent

    deadline = time.monotonic() + args.seconds
    die_with_parent(signal.SIGTERM)  # a killed job or worker leaves no compiler running
    if args.nice:
        os.nice(args.nice)
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import execute
    from kernel_oracle.harness.device import configure_process

    configure_process(args.device)
    compile_only()
    target = resolve_target(args.target, args.device)
    i, n = (int(v) for v in args.share.split("/"))
    compiled = 0
    for case in _child_cases(args, target, i, n):
        if time.monotonic() >= deadline:
            break
        try:
            execute(target, case, args.device, to_host=False)
        except Exception as exc:  # noqa: BLE001 - nothing is judged here: the campaign meets the case and judges it
            if "CUDA error" in str(exc):  # this child's context is gone: it can compile no more
                break
        compiled += 1
        print(f"executed {compiled}", flush=True)  # the running count: a child stopped at the deadline still says
    print(f"executed {compiled}", flush=True)
    return 0


def _child_cases(args, target, i: int, n: int):
    """Child ``i`` of ``n``'s cases: with ``--stream-seed``, its runs of the campaign's own stream (Note [The
    campaign's own stream]) first; then its share of the variant cases."""
    from kernel_oracle.harness.warmup import variant_cases, variant_families

    ops = tuple(args.ops.split(","))
    if args.stream_seed is not None:
        from kernel_oracle.fuzz.stream import CampaignStream

        stream = CampaignStream(args.stream_seed, args.stream_limits, args.upstream_only, args.stream_runs)
        for family in variant_families(ops):  # the campaign of each family whose variants these are
            yield from stream.cases(target.to_record(), family, range(i + 1, stream.runs + 1, n))
    yield from variant_cases(ops, tuple(args.dtypes.split(",")))[i::n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="one precompilation child (Note [Parallel precompilation])")
    for name in ("target", "device", "dtypes", "ops"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--share", required=True, metavar="I/N",
                    help="compile share I of N of the LoRA variant cases (harness.warmup.variant_cases), then exit")
    ap.add_argument("--nice", type=int, default=0, help="lower this child's CPU priority by N first")
    ap.add_argument("--stream-seed", type=int, default=None,
                    help="first compile this child's runs of the LoRA campaign of this seed (fuzz.stream)")
    ap.add_argument("--stream-limits", default="gpu", help="that campaign's size preset")
    ap.add_argument("--stream-runs", type=int, default=0, help="how many of its runs to predict")
    ap.add_argument("--upstream-only", action="store_true", help="that campaign draws no malformed metadata")
    return _child(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
