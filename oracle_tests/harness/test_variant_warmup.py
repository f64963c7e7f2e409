"""Which compiled variant of our LoRA kernels a call selects, and the warm-up that covers them all
(Note [Specialization] in kernels.lora._kernels, Note [Variant warm-up] in harness.warmup).

A launch recorder stands in for every LoRA kernel: a launch records the kernel, its family (aligned or
generic), the dtype of every tensor argument, every constexpr and ``num_warps`` -- what Triton's
cache key takes from a call besides the source -- and runs nothing, so these tests are fast on any
device and need no compiler.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings

from kernel_oracle.fuzz.strategies import cases
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, execute
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.warmup import variant_cases
from kernel_oracle.kernels.lora import _kernels as K

from ..conftest import DEVICE

LORA_OPS = FAMILY_OPS["lora"]


class _Recorder:
    """Stands in for one kernel family: ``kernel[grid](*args, **kwargs)`` adds the variant key to ``seen``."""

    def __init__(self, kernel, name: str, family: str, seen: list):
        fn = getattr(kernel, "fn", kernel)
        self.constexprs = {p.name for p in inspect.signature(fn).parameters.values()
                           if "constexpr" in str(p.annotation)}
        self.kernel, self.name, self.family, self.seen = kernel, name, family, seen

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            named = {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
            key = [self.name, self.family]
            for k, v in sorted(named.items()):
                if isinstance(v, torch.Tensor):
                    key.append((k, str(v.dtype)))
                elif k in self.constexprs or k == "num_warps":
                    key.append((k, v))
            self.seen.append(tuple(key))
        return launch

    @property
    def generic(self):
        return _Recorder(self.kernel.generic, self.name, "generic", self.seen)


@pytest.fixture
def recorded(monkeypatch) -> list:
    """Every LoRA kernel launch in the test becomes a recorded variant key (nothing runs)."""
    seen: list = []
    for name in dir(K):
        if name.endswith("_kernel"):
            monkeypatch.setattr(K, name, _Recorder(getattr(K, name), name, "aligned", seen))
    return seen


def _run(target, case: Case) -> None:
    try:
        execute(target, case, DEVICE, to_host=False)
    except Exception:  # noqa: BLE001 - contract and strict errors launch nothing; only launches are counted
        pass


def _problem(op: str, **kw) -> Case:
    fields = dict(op=op, seg_lens=(5, 1, 9), weight_indices=(0, 1, 0), lora_ranks=(16, 8), scalings=(1.0, 0.5),
                  H=2, qk=16, vd=16, C=32, R=16, dtype="bfloat16", seed=1)
    return Case(LoRAProblem(**{**fields, **kw}))


@pytest.mark.parametrize("op", LORA_OPS)
def test_small_ranks_share_a_variant_and_a_permutation_has_its_own(op, recorded):
    """Rank buffers of 16 and 32 share one rank block (``MIN_BLOCK_R``): no new variant.  A permutation
    and another dtype each select another one (the recorder sees what differs)."""
    target = resolve_target("triton", DEVICE)
    _run(target, _problem(op))
    _run(target, _problem(op, R=32, lora_ranks=(32, 8)))
    assert len(recorded) == 2 and len(set(recorded)) == 1, recorded
    _run(target, _problem(op, permute=True))
    _run(target, _problem(op, dtype="float16"))
    assert len(set(recorded)) == 3


@pytest.mark.parametrize("draws", [5, 6])  # seed 6 draws a buffer rank of 129 (a rank block of 256)
def test_variant_cases_are_distinct_variants_that_cover_fuzzed_launches(recorded, draws):
    """Each case of :func:`variant_cases` launches a variant no other case launches, and every launch of
    a GPU campaign's fuzzed cases (the ``gpu`` preset, every category) is one of them: the warm-up
    leaves a campaign nothing to compile."""
    target = resolve_target("triton", DEVICE)
    planned = variant_cases(LORA_OPS)
    for case in planned:
        _run(target, case)
    assert len(recorded) == len(planned) == len(set(recorded)), (len(recorded), len(planned), len(set(recorded)))
    warm = set(recorded)
    recorded.clear()

    @seed(draws)
    @settings(max_examples=300, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases("lora", limits="gpu"))
    def fuzzed(case):
        _run(target, case)

    fuzzed()
    missed = sorted(set(recorded) - warm)
    assert len(recorded) > 50 and missed == [], f"{len(missed)} of {len(set(recorded))} fuzzed variants not warmed: {missed[:3]}"
