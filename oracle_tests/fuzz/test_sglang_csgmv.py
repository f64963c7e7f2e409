"""SGLang's chunked SGMV LoRA kernels (``--lora-backend csgmv``) of every release, loaded standalone from the
published wheels and run (interpreted on the CPU) against the float64 oracle of reference/csgmv.py.

* every release on fresh random ragged batches: 1-3 slices with ragged offsets, per-slot ranks with a rank-0
  slot, scalings, a permutation, a zero-length segment, unrouted rows; shrink outputs NaN-poisoned (a row
  left unwritten is NaN), expand accumulated in place into a base output and into fresh zeros;
* the releases that legitimately differ, each difference asserted exactly as a model of what that code does
  (so a change either way fails): CUDA-graph replay with stale host ints before 0.5.14 (SGLang PR #28371)
  and the expand's contiguous-output assumption in 0.5.10;
* the split-K shrink of 0.5.22+ (explicit ``split_k``, the ``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K`` policy), the
  upstream error contracts, which releases share code, and planted defects the comparison must catch.

float32 only: under the interpreter bf16 arithmetic runs on raw bit patterns (docs/csgmv.md).
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from kernel_oracle.fuzz.targets.sglang_csgmv import (CSGMV_FILES, CsgmvConfiguration, CsgmvEnvs, csgmv_identity,
                                                     load_csgmv, locate_csgmv)
from kernel_oracle.fuzz.targets.sglang_csgmv_smem import recorded_launches
from kernel_oracle.fuzz.targets.sglang_slim import write_slim_wheel
from kernel_oracle.fuzz.targets.sglang_wheel import LoaderError, ReleaseFiles, wheel_release
from kernel_oracle.harness.fresh_outputs import nan_filled_allocations
from kernel_oracle.reference.csgmv import expand_reference, shrink_reference

from oracle_tests._csgmv_cases import CODE_GROUPS, batch_info, random_case
from oracle_tests._sglang_releases import ALL_RELEASES, release_files, wheel_or_skip
from oracle_tests.conftest import DEVICE

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the CPU interpreter run; GPU shapes are another suite")

SHARED_CODE = CODE_GROUPS
# where the files live
LAYOUT_SINCE = {"0.5.10": 2, "0.5.16": 1, "0.5.22": 0}  # release -> index in CSGMV_FILES' tuples from then on
GRAPH_FIX, STRIDE_FIX, SPLIT_K_SINCE = "0.5.14", "0.5.11", "0.5.22"


def before(version: str, fix: str) -> bool:
    return ALL_RELEASES.index(version) < ALL_RELEASES.index(fix)


@functools.lru_cache(maxsize=None)
def kernels(version: str, config: CsgmvConfiguration = CsgmvConfiguration()):
    return load_csgmv(release_files(version), config)


def run_shrink(k, c, **kw):
    with nan_filled_allocations():  # the output is a fresh torch.empty: unwritten entries read NaN
        return k.shrink(c.x, c.a, c.batch_info, c.num_slices, **kw)


def run_expand(k, c, base, **kw):
    return k.expand(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, base, **kw)


def _check(expected, actual, what):
    problem = expected.mismatch(actual)
    assert problem is None, f"{what}: {problem}"


# ---- files and identity --------------------------------------------------------------------------------------

def test_every_release_has_the_files_where_its_layout_says():
    for version in ALL_RELEASES:
        layout = max((i for since, i in LAYOUT_SINCE.items() if not before(version, since)), key=lambda i: -i)
        want = {entry: paths[layout] for entry, paths in CSGMV_FILES.items()}
        assert locate_csgmv(release_files(version)) == want, version


def test_releases_share_code_in_four_groups():
    ids = {v: csgmv_identity(release_files(v)) for v in ALL_RELEASES}
    groups = tuple(tuple(v for v in ALL_RELEASES if ids[v] == ids[first[0]]) for first in SHARED_CODE)
    assert groups == SHARED_CODE
    assert len({ids[g[0]] for g in SHARED_CODE}) == len(SHARED_CODE)


def test_a_slim_wheel_keeps_the_csgmv_code(tmp_path):
    slim = wheel_release(write_slim_wheel(wheel_or_skip("0.5.23"), tmp_path))
    assert csgmv_identity(slim) == csgmv_identity(release_files("0.5.23"))
    assert any("csgmv_configs/" in n for n in slim.names)
    assert load_csgmv(slim).how.startswith("sglang 0.5.23: sglang.kernels.ops.lora.dense.chunked_sgmv_shrink and ")


def test_the_loader_names_what_it_loaded_and_refuses_in_one_line():
    how = kernels("0.5.12").how
    assert how.startswith("sglang 0.5.12: sglang.srt.lora.triton_ops.chunked_sgmv_shrink and "
                          "sglang.srt.lora.triton_ops.chunked_sgmv_expand, loaded standalone from the wheel ")
    assert how.endswith("; SGLANG_ENABLE_LORA_CSGMV_SPLIT_K=0, SGLANG_ENABLE_DETERMINISTIC_INFERENCE=0")
    empty = ReleaseFiles("9.9.9", "nowhere", (), lambda n: "", lambda n: None)
    with pytest.raises(LoaderError) as info:
        load_csgmv(empty)
    assert str(info.value) == ("sglang 9.9.9 has no chunked SGMV LoRA kernels (no chunked_sgmv_lora_shrink_forward / "
                               "chunked_sgmv_lora_expand_forward)")
    envs = CsgmvEnvs(CsgmvConfiguration(split_k=True))
    assert envs.SGLANG_ENABLE_LORA_CSGMV_SPLIT_K.get() and not envs.SGLANG_ENABLE_DETERMINISTIC_INFERENCE.get()
    with pytest.raises(AttributeError, match=r"has no 'SGLANG_OTHER' \(it answers \["):
        envs.SGLANG_OTHER


@pytest.mark.parametrize("version", ("0.5.11", "0.5.23"))
def test_tuned_block_configs_follow_the_device_name(version, monkeypatch):
    """The release's own lora_tuning_config.py reads csgmv_configs/ beside it: an H200 gets its tuned blocks,
    the CPU (no such config) the defaults."""
    monkeypatch.delenv("SGLANG_LORA_CONFIG_DIR", raising=False)
    args = dict(K=1024, R=64, num_slices=1, chunk_size=16)
    h200 = kernels(version, CsgmvConfiguration(device_name="NVIDIA H200")).expand.__globals__["get_lora_expand_config"]
    assert h200(**args) == {"BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 1, "maxnreg": 128}
    assert kernels(version).expand.__globals__["get_lora_expand_config"](**args) == {"BLOCK_N": 64, "BLOCK_K": 16}



def test_a_cpu_target_picks_the_cpu_blocks_on_a_host_with_a_gpu(monkeypatch):
    """The target ``sglang-csgmv==X.Y.Z`` on the CPU answers ``get_device_name()`` with "cpu" even where torch
    sees an H200: its verdicts (and its tile model, which says "cpu" there) are those of a CPU machine."""
    from kernel_oracle.fuzz.targets.sglang_csgmv_target import csgmv_target
    from kernel_oracle.harness.targets import TargetSources, TargetSpec

    monkeypatch.delenv("SGLANG_LORA_CONFIG_DIR", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA H200")
    wheel_or_skip("0.5.23")
    target = csgmv_target(TargetSpec.parse("sglang-csgmv==0.5.23"), "cpu", TargetSources())
    expand = target.entries["csgmv_expand"]
    config = getattr(expand, "__wrapped__", expand).__globals__["get_lora_expand_config"]
    assert config(K=1024, R=64, num_slices=1, chunk_size=16) == {"BLOCK_N": 64, "BLOCK_K": 16}

# ---- every release against the oracle ------------------------------------------------------------------------

@pytest.mark.parametrize("version", ALL_RELEASES)
def test_release_matches_the_oracle_on_ragged_batches(version):
    k = kernels(version)
    for slices in (1, 2, 3):
        c = random_case(ALL_RELEASES.index(version) * 3 + slices, slices)
        tag = f"sglang {version}, {slices} slice(s)"
        _check(shrink_reference(c.x, c.a, c.batch_info, slices), run_shrink(k, c), f"{tag}: shrink")
        base = c.base.clone()
        out = run_expand(k, c, base)
        assert out.data_ptr() == base.data_ptr(), f"{tag}: expand must accumulate into base_output in place"
        _check(expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base), out, f"{tag}: expand")
        if slices == 3:
            fresh = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size)
            _check(fresh, run_expand(k, c, None), f"{tag}: expand into fresh zeros")
        if not before(version, SPLIT_K_SINCE):  # the ragged constexpr slice grid and the split-K shrink
            _check(expand_reference(c.h, c.b, c.batch_info, c.offsets, 0, c.base, c.offsets),
                   run_expand(k, c, c.base.clone(), slice_offsets_cpu=c.offsets), f"{tag}: expand, CPU offsets")
            _check(shrink_reference(c.x, c.a, c.batch_info, slices), run_shrink(k, c, split_k=3),
                   f"{tag}: shrink, split_k=3")


@pytest.mark.parametrize("version", [group[0] for group in SHARED_CODE])
def test_each_code_on_wider_chunks_and_a_rank_above_the_buffer(version):
    """Chunks of 32 rows (BLOCK_M 32, full tiles) and a slot whose rank exceeds the buffers' R (the kernels
    clamp it to R), per distinct code."""
    k = kernels(version)
    for slices in (2, 3):
        c = random_case(40 + slices, slices, tokens=100, chunk=32)
        assert 32 in (c.batch_info.seg_indptr[1:] - c.batch_info.seg_indptr[:-1]).tolist()
        ranks = c.batch_info.lora_ranks
        c.batch_info.lora_ranks = torch.where(ranks == ranks.max(), ranks + 4, ranks)
        tag = f"sglang {version}, {slices} slices, chunk 32, rank {int(ranks.max()) + 4} > R"
        _check(shrink_reference(c.x, c.a, c.batch_info, slices), run_shrink(k, c), f"{tag}: shrink")
        _check(expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base),
               run_expand(k, c, c.base.clone()), f"{tag}: expand")


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_graph_replay_with_stale_host_ints(version):
    """Captured for a 2-request, 1-segment batch, replayed for 4 segments (9 padded).  From 0.5.14 every device
    segment runs; before, the launch covers min(bs, num_segments) = 1 segment and leaves the rest undone
    (SGLang PR #28371): asserted exactly, with the skipped shrink rows unwritten (NaN)."""
    k = kernels(version)
    c = random_case(5, 3, tokens=40, graph_pad_to=9, host_ints=(2, 1))
    assert c.batch_info.seg_indptr.tolist()[:5] == [0, 16, 16, 27, 40]  # segments 1.. hold rows 16..39
    shrink, expand = run_shrink(k, c), run_expand(k, c, c.base.clone())
    want_s = shrink_reference(c.x, c.a, c.batch_info, 3)
    want_e = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base)
    if not before(version, GRAPH_FIX):
        _check(want_s, shrink, f"sglang {version}: shrink at replay")
        _check(want_e, expand, f"sglang {version}: expand at replay")
        if not before(version, SPLIT_K_SINCE):  # the split-K partials and reduce at replay (partials NaN-poisoned)
            _check(want_s, run_shrink(k, c, split_k=2), f"sglang {version}: split-K shrink at replay")
        return
    launched = dataclasses.replace(c.batch_info, use_cuda_graph=False, num_segments=1)  # what the old grid covers
    _check(shrink_reference(c.x, c.a, launched, 3), shrink, f"sglang {version}: shrink as the old grid runs it")
    _check(expand_reference(c.h, c.b, launched, c.offsets, c.max_slice_size, c.base), expand,
           f"sglang {version}: expand as the old grid runs it")
    skipped = c.batch_info.permutation[16:40].long()
    assert bool(shrink[skipped].isnan().all()) and want_s.mismatch(shrink) and want_e.mismatch(expand)


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_expand_into_a_view_of_a_wider_output(version):
    """base_output a column view (columns 4..76 of 84): from 0.5.11 the kernel uses its strides; 0.5.10 indexes
    it as a contiguous (S, OUTPUT_DIM) block from the view's first element: asserted exactly."""
    k = kernels(version)
    c = random_case(11, 3)
    S, out_dim = c.base.shape
    wide = torch.randn(S, out_dim + 8, generator=torch.Generator().manual_seed(3))
    before_call = wide.clone()
    run_expand(k, c, wide[:, 4:4 + out_dim])
    if before(version, STRIDE_FIX):
        block = slice(4, 4 + S * out_dim)  # the flat block 0.5.10 reads and writes: (S, OUTPUT_DIM) from the view
        got = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size,
                               before_call.view(-1)[block].view(S, out_dim))
        want, magnitude = before_call.double(), before_call.double().abs()
        want.view(-1)[block], magnitude.view(-1)[block] = got.value.view(-1), got.magnitude.view(-1)
        modelled = dataclasses.replace(got, value=want, magnitude=magnitude, defined=torch.ones_like(wide, dtype=bool))
        _check(modelled, wide, f"sglang {version}: contiguous indexing of the view")
        assert not torch.equal(wide[:, :4], before_call[:, :4])  # it writes outside the view
        return
    want = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, before_call[:, 4:4 + out_dim])
    _check(want, wide[:, 4:4 + out_dim], f"sglang {version}: expand into a view")
    assert torch.equal(wide[:, :4], before_call[:, :4]) and torch.equal(wide[:, 4 + out_dim:],
                                                                        before_call[:, 4 + out_dim:])


# ---- split-K and the error contracts -------------------------------------------------------------------------

@pytest.mark.parametrize("version", ALL_RELEASES)
def test_split_k_keyword_and_upstream_asserts(version):
    k, c = kernels(version), random_case(0, 2)
    if before(version, SPLIT_K_SINCE):
        with pytest.raises(TypeError) as info:
            k.shrink(c.x, c.a, c.batch_info, 2, split_k=2)
        assert str(info.value) == "chunked_sgmv_lora_shrink_forward() got an unexpected keyword argument 'split_k'"
    else:
        for bad in (0, -3):
            with pytest.raises(ValueError) as info:
                k.shrink(c.x, c.a, c.batch_info, 2, split_k=bad)
            assert type(info.value) is ValueError and str(info.value) == "split_k must be positive"
    strided = c.x.t().contiguous().t()
    for fn, args in ((k.shrink, (strided, c.a, c.batch_info, 2)), (shrink_reference, (strided, c.a, c.batch_info, 2)),
                     (k.expand, (c.h[:, :12].contiguous(), c.b, c.batch_info, c.offsets, c.max_slice_size, None)),
                     (expand_reference, (c.h[:, :12].contiguous(), c.b, c.batch_info, c.offsets, c.max_slice_size))):
        with pytest.raises(AssertionError) as info:
            fn(*args)
        assert type(info.value) is AssertionError and str(info.value) == ""


@pytest.mark.parametrize("version", ("0.5.22", "0.5.23"))
def test_split_k_switch_policy(version):
    """SGLANG_ENABLE_LORA_CSGMV_SPLIT_K picks split 8 (K 4096) or 16 (K 12288) for bf16 rank-32 adapters at
    the default blocks; off, in deterministic mode, for fp32 or another rank it keeps the one-pass kernel."""
    bi = batch_info([1], [0], [32], [1.0], permutation=[0])
    plain = [("_chunked_lora_shrink_kernel", None)]
    split = lambda n: [("_chunked_lora_shrink_split_k_kernel", n), ("_reduce_shrink_split_k", n)]  # noqa: E731
    cases = [(True, False, 4096, 32, torch.bfloat16, split(8)), (True, False, 12288, 32, torch.bfloat16, split(16)),
             (False, False, 4096, 32, torch.bfloat16, plain), (True, True, 4096, 32, torch.bfloat16, plain),
             (True, False, 4096, 32, torch.float32, plain), (True, False, 4096, 16, torch.bfloat16, plain),
             (True, False, 2048, 32, torch.bfloat16, plain)]
    for on, deterministic, K, rank, dtype, want in cases:
        k = kernels(version, CsgmvConfiguration(split_k=on, deterministic=deterministic))
        with recorded_launches(k.shrink.__globals__) as seen:
            k.shrink(torch.zeros(1, K, dtype=dtype), torch.zeros(1, rank, K, dtype=dtype), bi, 1)
        assert [(name, kw.get("SPLIT_K")) for name, kw in seen] == want, (on, deterministic, K, rank, dtype)


# ---- the comparison can fail ---------------------------------------------------------------------------------

def test_planted_defects_are_caught():
    """A wrong oracle (permutation ignored, last routed row dropped) and a wrong kernel output (a row left
    unwritten, the scaling applied twice) must each fail against the real 0.5.23 kernels."""
    k, c = kernels("0.5.23"), random_case(7, 3)
    shrink, expand = run_shrink(k, c), run_expand(k, c, c.base.clone())
    right = shrink_reference(c.x, c.a, c.batch_info, 3)
    assert right.mismatch(shrink) is None
    in_order = dataclasses.replace(c.batch_info, permutation=torch.arange(c.x.shape[0], dtype=torch.int32))
    assert shrink_reference(c.x, c.a, in_order, 3).mismatch(shrink) is not None
    last = int(c.batch_info.permutation[int(c.batch_info.seg_indptr[c.batch_info.num_segments]) - 1])
    dropped = dataclasses.replace(right, value=right.value.clone())
    dropped.value[last] = 0.0
    assert f"rows differing: [{last}]" in dropped.mismatch(shrink)
    unwritten = shrink.clone()
    unwritten[last] = float("nan")
    assert right.mismatch(unwritten) is not None
    want_e = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base)
    assert want_e.mismatch(expand) is None
    twice = c.base + 2 * (expand - c.base)
    assert want_e.mismatch(twice) is not None
