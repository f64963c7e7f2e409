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
the next allocation on the side stream while ``step_b`` has not read it yet.  That is no hazard in SGLang:
its side-stream users all wait for the current stream before they queue work there (read from 0.5.23), so a
write into the reused block is ordered after ``step_b``'s read (``lora_overlap_alloc_stream`` in the same
package documents the rule for its other LoRA ops).  The schedules below keep that rule.

The target ``sglang-trt==X.Y.Z@lora_opti=on`` gets ``q_side_fused`` / ``v_side_fused`` from that
file, executed as shipped (:func:`load_two_stream`: the release's own kv_b file and helpers; the
package's ``get_lora_side_stream`` and ``is_two_stream_active`` get stand-ins: one side stream per
current stream, and the release's gate, a batch of at most ``SGLANG_TWO_STREAM_MAX_TOKENS`` tokens
(its ``environ.py`` default, 256, which that ``_GatedInt`` returns whatever the master switch) on
CUDA).  Where the gate is closed (a CPU, a larger batch) the file's own serial path runs.  Where it
is open each call is :func:`two_stream_call`, which runs ``prepare`` / ``apply`` three times, under each
order of the streams that a missing dependency would show in (:data:`SCHEDULES`; ``torch.cuda._sleep``
holds a stream back; ``out`` is restored before each):

1. *current late*: after ``prepare`` the current stream sleeps (the base BMM's time), so the side
   stream's step A runs before ``apply``'s reads, as in a decode step; meanwhile same-size allocations on
   the side stream, filled with NaN, leave NaN in the blocks a later step A is given;
2. *inputs late*: the inputs ``prepare`` reads are NaN until the current stream, after a sleep, writes
   them back, and the current stream sleeps again after ``prepare`` (step B is late, so only step A's
   reads can race): a side stream that does not wait for the current one reads NaN (a missing
   ``side.wait_stream(current)``);
3. *side late*: the side stream sleeps before ``prepare`` queues step A, into a block that holds NaN:
   a current stream that does not wait for the side one reads it before step A writes it (a missing
   ``current.wait_stream(side)``);

after ``apply`` the handle is dropped and its block refilled with NaN by a side-stream user that waits
for the current stream first, as SGLang's do; then, with the device synchronised, a NaN in the output that
the release's serial path does not produce from the same inputs is a :class:`StreamOrderingHazard` (finding
kind ``stream``) naming the schedule and what it shows.

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

__all__ = ["SCHEDULES", "SLEEP_CYCLES", "StreamOrderingHazard", "TWO_STREAM_FILE", "TwoStreamCorrections", "load_two_stream",
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


def _pressure(like: torch.Tensor, stream: torch.cuda.Stream, after: Optional[torch.cuda.Stream] = None) -> None:
    """Same-size allocations on ``stream``, filled with NaN (several at once, so the allocator hands out more
    than the newest free block of that size); ``after``: a stream ``stream`` waits for first, as every
    side-stream user of SGLang's waits for the current stream (Note)."""
    if after is not None:
        stream.wait_stream(after)
    with torch.cuda.stream(stream):
        fillers = [torch.empty_like(like) for _ in range(PRESSURE_BLOCKS)]
        for f in fillers:
            f.fill_(float("nan"))
    del fillers


# the orders of the two streams each fused call runs under (Note): which dependency each one exposes
SCHEDULES = ("current late", "inputs late", "side late")


def _scheduled(prepare, apply, schedule: str, inputs: tuple, side: Optional[torch.cuda.Stream]):
    """``(result, the handle's side stream or None: the gate closed)`` of one ``prepare`` / ``apply`` under
    ``schedule``; ``side``: the side stream an earlier schedule met (None: not yet known)."""
    if schedule == "inputs late":  # the inputs are written on the current stream only after a while
        saved = [t.clone() for t in inputs]
        for t in inputs:
            t.fill_(float("nan"))
        torch.cuda._sleep(SLEEP_CYCLES)
        for t, v in zip(inputs, saved):
            t.copy_(v)
    if schedule == "side late" and side is not None:  # the side stream is busy before step A
        with torch.cuda.stream(side):
            torch.cuda._sleep(3 * SLEEP_CYCLES)
    handle = prepare()
    if handle is None:
        return apply(None), None
    if schedule in ("current late", "inputs late"):
        torch.cuda._sleep(SLEEP_CYCLES)  # the base BMM's time on the current stream: step B is late
    if schedule == "current late":
        _pressure(handle[0], handle[-1])  # NaN into the side stream's other blocks of that size
    result = apply(handle)
    bridge, side = handle[0], handle[-1]
    like = torch.empty_like(bridge)  # the size of the freed block, allocated on the current stream
    del handle, bridge
    # the freed block refilled with NaN by a user that waits for the current stream (Note): also the block
    # the next schedule's step A gets
    _pressure(like, side, after=torch.cuda.current_stream())
    return result, side


def two_stream_call(prepare, apply, serial, out: torch.Tensor, what: str, inputs: tuple = ()):
    """One fused side under each schedule of :data:`SCHEDULES` (Note): ``prepare()`` -> handle (None: the
    gate is closed, ``serial()`` runs); ``apply(handle)`` -> the result, written into ``out`` (restored
    before each schedule); ``serial(clone)`` recomputes on a clone of ``out`` to tell a stream hazard from
    a NaN the path makes anyway; ``inputs``: the tensors ``prepare`` reads (written late by one schedule)."""
    before = out.clone()
    expected, side, result = None, None, out
    for schedule in SCHEDULES:
        out.copy_(before)
        result, side = _scheduled(prepare, apply, schedule, inputs, side)
        if side is None:
            return result
        torch.cuda.synchronize()
        bad = torch.isnan(result)
        if not bool(bad.any()):
            continue
        if expected is None:
            expected = serial(before.clone())
            torch.cuda.synchronize()
        new = bad & ~torch.isnan(expected)
        if bool(new.any()):
            index = tuple(int(i) for i in torch.nonzero(new)[0])
            raise StreamOrderingHazard(f"{what}: {int(new.sum())} output elements (first at {index}) are NaN under "
                                       f"the two-stream schedule '{schedule}' but not on the serial path: "
                                       f"{_EXPOSES[schedule]}")
    return result


_EXPOSES = {
    "current late": "under the overlap of a decode step the fused side's result differs from its serial path",
    "inputs late": "step A on the side stream read its input before the current stream had written it (the side "
                   "stream does not wait for the current one)",
    "side late": "step B on the current stream read step A's output before the side stream had written it (the "
                 "current stream does not wait for the side one)",
}


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
                               "q_side_fused (kv_b_lora_q_prepare / kv_b_lora_q_apply)", inputs=(q_nope,))

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
                               "v_side_fused (kv_b_lora_v_prepare / kv_b_lora_v_apply)", inputs=(attn_output,))
