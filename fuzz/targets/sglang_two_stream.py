"""The fused q-side and v-side of SGLang's TRT-LLM-style kv_b path, as the DeepSeek MLA forward runs them: two streams.

Note [The two-stream kv_b correction]
-------------------------------------
From 0.5.13 ``sglang/srt/lora/trtllm_lora_temp/deepseek_mla_correction.py`` composes the TRT-LLM-style kv_b
steps for the MLA forward, which calls it when ``SGLANG_EXPERIMENTAL_LORA_OPTI`` is on:
``kv_b_lora_q_prepare(attn, q_nope)`` makes the side stream wait for the current one and runs
``step_a_q_fwd`` on it (its output is allocated there); the forward's base BMM runs meanwhile on the current
stream; ``kv_b_lora_q_apply(attn, q_nope, q_nope_out, handle)`` makes the current stream wait for the side
stream and runs ``step_b_q_fwd``; the same for v. The handle's tensor is read on the current stream and
never ``record_stream``-ed to it, so once the handle is dropped the caching allocator may give its block to
the next allocation on the side stream while ``step_b`` has not read it yet. SGLang's own side-stream users
all wait for the current stream first (read from 0.5.23), which orders that reuse;
``lora_overlap_alloc_stream`` in the same package documents the hazard for its other LoRA ops.

The target ``sglang-trt==X.Y.Z@lora_opti=on`` gets ``q_side_fused`` / ``v_side_fused`` from that
file, executed as shipped (:func:`load_two_stream`: the release's own kv_b file and helpers; the
package's ``get_lora_side_stream`` and ``is_two_stream_active`` get stand-ins: one side stream per
current stream, and the release's gate, a batch of at most ``SGLANG_TWO_STREAM_MAX_TOKENS`` tokens
(its ``environ.py`` default, 256, which that ``_GatedInt`` returns whatever the master switch) on
CUDA).  Where the gate is closed (a CPU, a larger batch) the file's own serial path runs.  Where it
is open each call is :func:`two_stream_call`:

1. ``prepare``; the current stream then sleeps (``torch.cuda._sleep``: the base BMM's time), so the
   side stream's work and anything queued there run before ``apply``'s reads;
2. allocator pressure between prepare and apply: a same-size allocation on the side stream, filled
   with NaN, without a wait (harmless while the handle holds its tensor);
3. ``apply``; the handle is dropped, and the same pressure once more: a block freed while the
   current stream's ``step_b`` still has to read it is refilled with NaN before it does;
4. after a synchronize, a NaN in the output that the release's serial path does not produce from
   the same inputs is a :class:`StreamOrderingHazard` (finding kind ``stream``), naming the tensor.

The record's reason says which path ran.  ``TORCH_CUDA_SANITIZER=1`` (torch's CSAN) sees torch
operators only, not Triton launches: the GPU check runs it once over this schedule and says so.
"""

from __future__ import annotations

import ast
import threading
import types
from typing import Optional

import torch

from .sglang_switches import ReleaseConfiguration
from .sglang_wheel import STAND_INS, LoaderError, ReleaseFiles, helper_file, load_kernel_module, module_name

__all__ = ["SLEEP_CYCLES", "StreamOrderingHazard", "TWO_STREAM_FILE", "TwoStreamCorrections", "load_two_stream",
           "two_stream_call"]

TWO_STREAM_FILE = "sglang/srt/lora/trtllm_lora_temp/deepseek_mla_correction.py"
ENVIRON_FILE = "sglang/srt/lora/trtllm_lora_temp/environ.py"
MAX_TOKENS_SWITCH = "SGLANG_TWO_STREAM_MAX_TOKENS"
SLEEP_CYCLES = 2_000_000  # about a millisecond on an H100: longer than the side stream's step A and fills


class StreamOrderingHazard(RuntimeError):
    """A result read memory another stream reused before the read (Note [The two-stream kv_b correction])."""


def _max_tokens(release: ReleaseFiles) -> int:
    """The release's default of ``SGLANG_TWO_STREAM_MAX_TOKENS`` (``_GatedInt(NAME, default)``); 0 without one."""
    if ENVIRON_FILE not in release.names:
        return 0
    for node in ast.walk(ast.parse(release.read(ENVIRON_FILE))):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_GatedInt" and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == MAX_TOKENS_SWITCH
                and isinstance(node.args[1], ast.Constant)):
            return int(node.args[1].value)
    return 0


_SIDE_STREAMS: dict = {}
_SIDE_LOCK = threading.Lock()


def _side_stream(release, config, module):
    def get_lora_side_stream() -> torch.cuda.Stream:
        """One side stream per current stream, as the package's own function keeps them."""
        consumer = torch.cuda.current_stream()
        with _SIDE_LOCK:
            if consumer not in _SIDE_STREAMS:
                _SIDE_STREAMS[consumer] = torch.cuda.Stream()
            return _SIDE_STREAMS[consumer]
    return get_lora_side_stream


def _gate(release, config, module):
    limit = _max_tokens(release)

    def is_two_stream_active(x: torch.Tensor) -> bool:
        """The release's gate (a batch of at most its token limit); CUDA only."""
        return bool(x.is_cuda and x.shape[0] <= limit)
    return is_two_stream_active


def load_two_stream(release: ReleaseFiles, kernel_path: str,
                    config: ReleaseConfiguration = ReleaseConfiguration()) -> types.ModuleType:
    """The release's ``deepseek_mla_correction`` module (Note), its kv_b steps those of ``kernel_path``;
    :class:`LoaderError` in one line where the release has no such file."""
    if TWO_STREAM_FILE not in release.names:
        raise LoaderError(f"sglang {release.version} has no {TWO_STREAM_FILE} (the two-stream MLA correction "
                          f"ships from 0.5.13)")
    kernels = module_name(kernel_path)

    def own_file(rel: ReleaseFiles, mod: str) -> Optional[str]:
        # the kernels' module, or (0.5.13 - 0.5.15) the package whose __init__ re-exports them
        return kernel_path if mod in (kernels, kernels.rpartition(".")[0]) else helper_file(rel, mod)

    stand_ins = {**STAND_INS, "get_lora_side_stream": _side_stream, "is_two_stream_active": _gate}
    return load_kernel_module(release, TWO_STREAM_FILE, "trt_two_stream", config, own_file=own_file,
                              stand_ins=stand_ins)


PRESSURE_BLOCKS = 4  # same-size allocations per pressure: every free block of that size on the stream is taken


def _pressure(like: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """Same-size allocations on ``stream``, filled with NaN, without waiting for any other stream (several at
    once, so the allocator hands out every free block of that size the stream holds, not only the newest)."""
    with torch.cuda.stream(stream):
        fillers = [torch.empty_like(like) for _ in range(PRESSURE_BLOCKS)]
        for f in fillers:
            f.fill_(float("nan"))
    del fillers


def two_stream_call(prepare, apply, serial, out: torch.Tensor, what: str):
    """One fused side under the schedule of the Note: ``prepare()`` -> handle (None: the gate is closed,
    ``serial()`` runs); ``apply(handle)`` -> the result; ``serial(clone)`` recomputes on a clone of
    ``out`` to tell a stream hazard from a NaN the path makes anyway."""
    before = out.clone()
    handle = prepare()
    if handle is None:
        return apply(None)
    side = handle[-1]
    torch.cuda._sleep(SLEEP_CYCLES)  # the base BMM's time on the current stream
    _pressure(handle[0], side)
    result = apply(handle)
    bridge = handle[0]
    like = torch.empty_like(bridge)  # the size of the freed block, allocated on the current stream
    del handle, bridge
    _pressure(like, side)
    torch.cuda.synchronize()
    bad = torch.isnan(result)
    if bool(bad.any()):
        again = serial(before.clone())
        torch.cuda.synchronize()
        new = bad & ~torch.isnan(again)
        if bool(new.any()):
            index = tuple(int(i) for i in torch.nonzero(new)[0])
            raise StreamOrderingHazard(
                f"{what}: {int(new.sum())} output elements (first at {index}) are NaN under the two-stream schedule "
                f"but not on the serial path: step B read its step-A input after the caching allocator gave that "
                f"block to a side-stream allocation (the input was allocated on the side stream and read on the "
                f"current one without record_stream)")
    return result


class TwoStreamCorrections:
    """``q_side_fused`` / ``v_side_fused`` over a release's ``deepseek_mla_correction`` (Note)."""

    def __init__(self, module: types.ModuleType):
        self.module = module

    @staticmethod
    def _attn(A_buf, B_buf, batch_info, qk: int, vd: int, heads: int):
        backend = types.SimpleNamespace(batch_info=batch_info)
        layer = types.SimpleNamespace(set_lora=True, A_buffer=A_buf, B_buffer=B_buf, lora_backend=backend)
        return types.SimpleNamespace(kv_b_proj=layer, qk_nope_head_dim=qk, v_head_dim=vd, num_local_heads=heads)

    def q_side_fused_fwd(self, q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head):
        m, qk = self.module, q_nope.shape[-1]
        attn = self._attn(A_buf, B_buf, batch_info, qk, full_K_per_head - qk, q_nope.shape[1])
        prepare = lambda: m.kv_b_lora_q_prepare(attn, q_nope)  # noqa: E731
        apply = lambda handle: m.kv_b_lora_q_apply(attn, q_nope, base_output, handle)  # noqa: E731
        if not q_nope.is_cuda:  # the gate is closed off CUDA: the file's serial path
            return apply(prepare())
        return two_stream_call(prepare, apply, lambda out: m.apply_q_correction(attn, q_nope, out), base_output,
                               "q_side_fused (kv_b_lora_q_prepare / kv_b_lora_q_apply)")

    def v_side_fused_fwd(self, attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim):
        m = self.module
        attn = self._attn(A_buf, B_buf, batch_info, qk_nope_head_dim, v_head_dim, attn_output.shape[1])
        prepare = lambda: m.kv_b_lora_v_prepare(attn, attn_output)  # noqa: E731

        def apply(handle):
            return m.kv_b_lora_v_apply(attn, attn_output, base_output, handle)

        def serial(out):
            m.apply_v_correction(attn, attn_output, out)
            return out

        if not attn_output.is_cuda:
            return apply(prepare())
        return two_stream_call(prepare, apply, serial, base_output,
                               "v_side_fused (kv_b_lora_v_prepare / kv_b_lora_v_apply)")
