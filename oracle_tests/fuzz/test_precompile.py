"""Parallel precompilation children (Note [Parallel precompilation] in fuzz.precompile)."""

from __future__ import annotations

import pytest

from kernel_oracle.fuzz import precompile


@pytest.mark.parametrize("cores,variants,expected", [(1, None, 0), (4, None, 4), (16, None, 16), (16, 2172, 16),
                                                     (64, 10, 10), (None, None, 0)])
def test_default_processes_use_every_core_up_to_the_variants(monkeypatch, cores, variants, expected):
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: cores)
    assert precompile.default_processes(variants) == expected


def test_a_cuda_fuzz_campaign_warms_up_unless_told_not_to():
    from kernel_oracle.jobs.fuzz_campaign import warm_up_for

    assert warm_up_for(None, "cuda") == warm_up_for(None, "cuda:1") == precompile.DEFAULT_WARM_UP_S > 0
    assert warm_up_for(None, "cpu") is None and warm_up_for(0.0, "cuda") is None and warm_up_for(30.0, "cuda") == 30.0


def test_compile_only_launches_warm_up_and_run_nothing(monkeypatch):
    """In a compile-only child every launch of our kernels becomes ``warmup(*args, grid=...)``: the same
    arguments (so the same cache key) and no kernel run; the LoRA kernels' generic twin is wrapped too."""
    from kernel_oracle.kernels.lora import _kernels as lora_kernels
    from kernel_oracle.kernels.vision import _kernel as vision_kernel

    calls = []

    class Kernel:
        generic = None

        def warmup(self, *args, grid, **kwargs):
            calls.append((args, grid, kwargs))

        def __getitem__(self, grid):
            raise AssertionError("a compile-only launch ran the kernel")

    fake = Kernel()
    fake.generic = Kernel()
    names = [n for n in dir(lora_kernels) if n.endswith("_kernel")]
    for name in names:
        monkeypatch.setattr(lora_kernels, name, fake)
    monkeypatch.setattr(vision_kernel, "_vision_attn_fwd", fake)
    patched = precompile.compile_only()
    assert sorted(patched) == sorted(names + ["_vision_attn_fwd"]) and len(names) == 6
    lora_kernels.step_a_q_kernel[(3, 2, 1)](1, 2, BT=16)
    lora_kernels.step_a_q_kernel.generic[(4,)](5, num_warps=4)
    vision_kernel._vision_attn_fwd[(7, 1)](8)
    assert calls == [((1, 2), (3, 2, 1), {"BT": 16}), ((5,), (4,), {"num_warps": 4}), ((8,), (7, 1), {})]


def test_variant_children_compile_their_share_and_exit():
    """:func:`precompile.start_variants`: child ``i`` of ``n`` runs the variant cases ``i, i+n, ...``
    (compile-only), then exits by itself; together they run every case once."""
    from kernel_oracle.harness.warmup import variant_cases

    handle = precompile.start_variants("triton", "cpu", seconds=120.0, dtypes=("float16",), ops=("step_a_v",),
                                       processes=2)
    assert handle.wait(110.0), "the children did not finish their share"
    done = handle.stop()
    from kernel_oracle.harness.warmup_lora import _RARE_RANKS, _VARIANT_PATHS, _VARIANT_RANKS

    paths = sum(only is None or "step_a_v" in only for _, _, only, _ in _VARIANT_PATHS)  # 6: four, two flat
    # x rank blocks x layout families x permutation (step_a_v has no base)
    expected = paths * len(_VARIANT_RANKS + _RARE_RANKS) * 2 * 2
    assert done["processes"] == 2 and done["cases"] == len(variant_cases(("step_a_v",), ("float16",))) == expected, done


def test_a_child_stopped_at_the_deadline_still_reports_what_it_compiled():
    """A child prints its running count after each variant; :meth:`Precompile.stop` takes each child's
    last count (a child terminated before its final line still says how many it compiled, and the
    running lines are not added up)."""
    import subprocess
    import sys
    import time

    script = "import time\nfor i in (1, 2): print(f'executed {i}', flush=True)\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    handle = precompile.Precompile("triton", procs=[child])
    time.sleep(3.0)  # the two lines are out long before; the child sleeps on, as one compiling would
    assert handle.stop()["cases"] == 2
