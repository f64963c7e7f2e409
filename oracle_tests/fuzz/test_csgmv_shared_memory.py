"""The shared memory of SGLang's csgmv shrink (Note [csgmv shrink shared memory] in
fuzz/targets/sglang_csgmv_smem.py), on the CPU: the tiles each release picks, the figure they need, and the
model checked against Triton's own compiler for sm_80, sm_89 and sm_90 (no GPU needed to compile).

test_sglang_csgmv_cuda.py asserts on a GPU that Triton refuses exactly the launches this figure says cannot
fit, with this figure as ``Required``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
import triton

from kernel_oracle.fuzz.targets.sglang_csgmv import CsgmvConfiguration, load_csgmv
from kernel_oracle.fuzz.targets.sglang_csgmv_smem import (DEFAULT_STAGES, SHRINK_KERNELS, ShrinkTiles,
                                                          recorded_launches, shrink_tiles)

from oracle_tests._csgmv_cases import CODE_GROUPS, random_case
from oracle_tests._scripts import ROOT
from oracle_tests._sglang_releases import release_files

HOPPER = (9, 0)
HOPPER_LIMIT = 232_448  # shared_memory_per_block_optin of an H100 and an H200
QKV = (0, 4096, 5120, 6144)
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@functools.lru_cache(maxsize=None)
def _kernels(version: str, device_name: str = H100):
    return load_csgmv(release_files(version), CsgmvConfiguration(device_name=device_name))


def _case(dtype, chunk: int, *, k_in: int = 4096, rank: int = 32, offsets=QKV):
    """A batch the backend cut into ``chunk``-row segments (a few tokens: only the tiles matter here)."""
    return random_case(1, len(offsets) - 1, tokens=70, chunk=chunk, dtype=dtype, k_in=k_in, r_max=rank,
                       offsets=offsets)


def _tiles(k, c) -> ShrinkTiles:
    return shrink_tiles(k.shrink, c.x, c.a, c.batch_info, c.num_slices)


def test_the_0_5_10_fp32_shrink_at_64_rows_needs_more_than_hopper_has():
    """The launch the H100 refused (Required 245760, limit 232448): 64-row chunks, 0.5.10's fixed 16 x 256
    blocks, Triton's 3 stages, all three buffered; in bf16 the same tiles fit."""
    k = _kernels("0.5.10")
    fp32 = _tiles(k, _case(torch.float32, 64))
    assert fp32 == ShrinkTiles(block_m=64, block_n=16, block_k=256, k=4096, num_stages=3, elem_bytes=4)
    assert fp32.shared_memory(HOPPER) == 3 * (64 * 256 + 256 * 16) * 4 == 245_760 > HOPPER_LIMIT
    bf16 = _tiles(k, _case(torch.bfloat16, 64))
    assert bf16.shared_memory(HOPPER) == 122_880 <= HOPPER_LIMIT
    assert _tiles(k, _case(torch.float32, 32)).shared_memory(HOPPER) == 2 * (32 * 256 + 256 * 16) * 4  # 2 buffers


@pytest.mark.parametrize("version", [group[0] for group in CODE_GROUPS])
@pytest.mark.parametrize("device_name", (H100, H200))
def test_every_code_takes_the_default_blocks_at_k_4096(version, device_name):
    """No tuned config covers K 4096: every code on an H100 or an H200 launches the fp32 64-row shrink with
    the 16 x 256 blocks at Triton's default stages."""
    tiles = _tiles(_kernels(version, device_name), _case(torch.float32, 64))
    assert tiles == ShrinkTiles(64, 16, 256, 4096, 3, 4) and tiles.shared_memory(HOPPER) == 245_760


@pytest.mark.parametrize("version", ("0.5.11", "0.5.23"))
def test_a_tuned_h200_config_fits(version, monkeypatch):
    """The tuned H200 shrink config for K 1024, rank 64, 3 slices (csgmv_configs/, 64-row entry: BLOCK_N 64,
    BLOCK_K 64, 3 stages) is read through the release's own lookup and fits in fp32."""
    monkeypatch.delenv("SGLANG_LORA_CONFIG_DIR", raising=False)
    c = _case(torch.float32, 64, k_in=1024, rank=64, offsets=(0, 1024, 1280, 1536))
    tiles = _tiles(_kernels(version, H200), c)
    assert tiles == ShrinkTiles(64, 64, 64, 1024, 3, 4)
    assert tiles.shared_memory(HOPPER) == 3 * (64 * 64 + 64 * 64) * 4 <= HOPPER_LIMIT
    assert _tiles(_kernels(version, H100), c).block_k == 256  # an H100 has no tuned config: the defaults


def test_what_the_model_does_not_cover_is_an_error():
    tiles = ShrinkTiles(64, 16, 256, 4096, 3, 4)
    with pytest.raises(ValueError) as info:
        tiles.shared_memory((10, 0))
    assert str(info.value) == ("capability=(10, 0): the csgmv shrink's shared memory is modelled for sm_80 - sm_89 "
                               "and sm_90 only (Note [csgmv shrink shared memory])")
    k = load_csgmv(release_files("0.5.23"), CsgmvConfiguration(split_k=True))
    c = _case(torch.bfloat16, 16)  # bf16, rank 32, K 4096: the switch takes the split-K kernels
    with pytest.raises(LookupError) as info:
        _tiles(k, c)
    assert str(info.value) == ("the shrink launched ['_chunked_lora_shrink_split_k_kernel', '_reduce_shrink_split_k'], "
                               "not _chunked_lora_shrink_kernel once")


def test_recorded_launches_restore_the_kernels():
    k = _kernels("0.5.23")
    before = {name: k.shrink.__globals__[name] for name in SHRINK_KERNELS}
    with pytest.raises(RuntimeError), recorded_launches(k.shrink.__globals__) as seen:
        c = _case(torch.float32, 16)
        k.shrink(c.x, c.a, c.batch_info, c.num_slices)
        assert [name for name, _ in seen] == ["_chunked_lora_shrink_kernel"] and seen[0][1]["BLOCK_M"] == 16
        raise RuntimeError("the block's error")
    assert {name: k.shrink.__globals__[name] for name in SHRINK_KERNELS} == before


# ---- the model against Triton's compiler ------------------------------------------------------------------

# (capability, dtype, chunk, K, overrides of the recorded launch): rows and stages on both sides of the
# warp-group boundary, one step and many, the tuned H200 128-row blocks, the sm_80 and sm_89 rule
MODEL_CASES = [
    ((9, 0), "float32", 64, 4096, {}),
    ((9, 0), "bfloat16", 64, 4096, {}),
    ((9, 0), "float32", 32, 4096, {}),
    ((9, 0), "float32", 16, 4096, {"num_stages": 1}),
    ((9, 0), "float32", 16, 4096, {"num_stages": 4}),
    ((9, 0), "float32", 64, 4096, {"num_stages": 2}),
    ((9, 0), "float32", 64, 256, {}),
    ((9, 0), "float32", 128, 1024, {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_stages": 4}),
    ((8, 0), "float32", 64, 4096, {}),
    ((8, 9), "bfloat16", 128, 4096, {"BLOCK_M": 128}),
]


@pytest.fixture(scope="module")
def compiled():
    """What Triton's compiler allocates for each of :data:`MODEL_CASES` with 0.5.23's shrink: one child process
    without the interpreter (oracle_tests/_csgmv_compiled.py)."""
    if "nvidia" not in triton.backends.backends:
        pytest.skip("compiling for a CUDA target needs Triton's NVIDIA backend")
    release_files("0.5.23")  # the wheel, or the suite's skip
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton's default; set, it stops a warning
    done = subprocess.run([sys.executable, "-m", "oracle_tests._csgmv_compiled", "0.5.23", json.dumps(MODEL_CASES)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("i", range(len(MODEL_CASES)), ids=[
    f"sm{c[0]}{c[1]}-{d}-{o.get('BLOCK_M', m)}rows-K{k}-stages{o.get('num_stages', 3)}" for c, d, m, k, o in MODEL_CASES])
def test_the_model_is_what_tritons_compiler_asks(compiled, i):
    """The figure of the Note equals what Triton allocates for the release's kernel compiled for the target
    (a planted rule, e.g. ``num_stages - 1`` buffers everywhere, fails the sm_90 64-row cases)."""
    bm, bn, bk, k, stages, elem = compiled[i]["tiles"]
    model = ShrinkTiles(bm, bn, bk, k, DEFAULT_STAGES if stages is None else stages, elem)
    assert model.shared_memory(tuple(MODEL_CASES[i][0])) == compiled[i]["shared"], MODEL_CASES[i]
