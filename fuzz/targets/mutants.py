"""Mutation testing: realistic bugs planted in *copies* of kernels; the suite must kill them all.

Note [Mutants]
--------------
A :class:`Mutant` is data (:mod:`.mutant_data`): a name, the family it breaks, a one-line description,
and textual :class:`Patch` es (a file of its ``source``, an anchor that must occur, its replacement).
The LoRA and vision mutants patch our kernels (``source="kernels"``, files under ``kernels/``); the
csgmv mutants patch a copy of a release's own csgmv files (Note [csgmv mutants] in
:mod:`.mutants_csgmv`), and :func:`mutant_target` builds each from its source.  Building a kernels
mutant copies the whole ``kernels`` package to a temporary directory under a fresh package name
(``kernels_mutant_<name>``), applies the patches there -- the real kernels are never touched -- and
imports the copy, so relative imports, Triton's source inspection and the interpreter all behave
as for the original.  The copy is then an ordinary target (``mutant:<name>``, see
:mod:`fuzz.targets`), in this process or in a campaign's worker.

When the kernels change and an anchor no longer occurs, building raises :class:`MutantError`
naming the mutant, the file and the missing anchor: update the mutant, never drop it silently.

:func:`kernel_oracle.fuzz.mutant_check.check_mutant` runs the CI-profile property search (derandomized, ``tiny`` problems) on the
mutant and reports whether it was killed and after how many examples.  ``categories`` / ``ops``
focus the search where the bug can show (a numeric bug on valid inputs, a message drift on
contract cases), which keeps the whole table within the CPU budget.

Note [Wrong-field mutants]
--------------------------
One mutant per pair of redundant fields (docs/semantics.md#fields-that-may-disagree; Note [Fields that disagree]
in :mod:`fuzz.strategies`) reads the copy upstream does not read: eager ``bs`` for ``num_segments``,
``seg_lens`` for the ``seg_indptr`` bounds, the longest segment for ``max_len``'s tile count, the indptr
gaps for ``sequence_lengths``, the kwargs for ``forward_metadata``.  Each computes right whenever the
copies agree, so only the strategies' disagreeing draws can kill it.  The GQA, window and sinks mutants
plant the bug each of those checks exists for.
"""

from __future__ import annotations

import atexit
import importlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .mutant_data import Mutant, MutantError, Patch, apply_patches
from .mutants_csgmv import CSGMV_MUTANTS, csgmv_mutant_target
from .registry import register_target
from .triton import KERNELS_PACKAGE, kernels_target

__all__ = ["CONTROLS", "MUTANTS", "Mutant", "MutantError", "Patch", "apply_patches", "build_mutant", "get_mutant",
           "mutant_target"]

KERNELS_DIR = Path(importlib.import_module(KERNELS_PACKAGE).__file__).resolve().parent


_KR, _KT, _KS, _KF = "lora/_route.py", "lora/_tiles.py", "lora/_split.py", "lora/_fused.py"
# Note [TF32 mutants]: the operand rounding of our LoRA kernels, replaced.  On the interpreter tl.dot is
# exact, so rounding the fp32 operands in the kernel emulates what TF32 tensor cores do with them; the
# copy declares precision "tf32" and is searched in fp32 only.  The rule must pass plain truncation
# (CONTROLS: what the H200 does to raw fp32 operands) and still catch a TF32 error that is too large.
_OPERAND = """    if DOT_PREC == "tf32":
        x = round_tf32(x, False)
    return x"""
_FP32_ONLY = ("float32",)
_L, _P = "lora/_launch.py", "lora/_plan.py"
_VK = "vision/_kernel.py"
_VT = "vision/_tiles.py"
_VA = "vision/attention.py"
# Note [Wrong-field mutants]: segment-major tiles (what the tiny preset's batches rarely choose on their own)
_FORCE_SEG = Patch(_P, 'token_major = seg_rows > TOKEN_MAJOR_WASTE * num_rows if force == "auto" else force == "tok"',
                   "token_major = False")

# step B_q leaves each segment's last row as it was (Note [Planted-bug mutants]): its output rows kept
# around the launch and put back
_DROPS_SEGMENT_END = (Patch(_L, '    _launch(op, p, x, weights, block_r, launch, align=lay["ALIGN"])\n    return out',
          '    if op == "step_b_q":\n'
          '        _ip = batch_info.seg_indptr[: num_segments(batch_info) + 1].long()\n'
          '        _ends = (_ip[1:] - 1)[_ip[1:] > _ip[:-1]]\n'
          '        if batch_info.permutation is not None:\n'
          '            _ends = batch_info.permutation.long()[_ends]\n'
          '        _kept = out[_ends].clone()\n'
          '    _launch(op, p, x, weights, block_r, launch, align=lay["ALIGN"])\n'
          '    if op == "step_b_q":\n'
          '        out[_ends] = _kept\n'
          '    return out'),
    Patch(_L, "\ndef step_b_q_fwd(", "\nfrom ._plan import num_segments\n\n\ndef step_b_q_fwd("))

MUTANTS: tuple[Mutant, ...] = (
    # ---- LoRA ----
    Mutant("lora_ignore_permutation", "lora", "rows are read and written at their logical index; permutation ignored",
           (Patch(_KR, "phys = tl.load(perm + tl.minimum(tl.maximum(logical, 0), num_rows - 1), mask=valid, other=0)",
                  "phys = logical.to(tl.int64)"),)),
    # both token-major routes: logical rows (more than 256 segments) and slot-sorted tiles (Note [Slot-sorted
    # tiles]; what the tiny preset's batches take, on the flat grid: the segment lengths feed both the slot's
    # tile count there, Note [Flat slot grid], and the rows of a tile)
    Mutant("lora_segment_end_off_by_one", "lora", "token-major tiles treat a segment's end (seg_indptr[b+1]) as "
           "inside it (<=)",
           (Patch(_KR, "valid = (logical >= first) & (logical < last)", "valid = (logical >= first) & (logical <= last)"),
            Patch(_KR, "seg_rows = tl.maximum(ends - starts, 0)", "seg_rows = tl.maximum(ends - starts + 1, 0)"))),
    # the copy also forces the segment-major path (what LoRAOptions(route="seg") chooses): tiny CPU problems
    # rarely choose it on their own
    Mutant("lora_segment_end_off_by_one_seg", "lora", "segment-major tiles run one row past the segment end",
           (Patch(_KR, "valid = logical < end", "valid = logical <= end"),
            Patch(_P, 'token_major = seg_rows > TOKEN_MAJOR_WASTE * num_rows if force == "auto" else force == "tok"',
                  "token_major = False"))),
    # Note [Planted-bug mutants]: one defect in one op each (the campaign must report each as ONE finding
    # across dtypes, and the two together as two): step B_q leaves each segment's last row as it was
    Mutant("lora_step_b_q_drops_segment_end", "lora", "step B_q leaves each segment's last row unchanged",
           _DROPS_SEGMENT_END, ops=("step_b_q",)),
    Mutant("lora_two_planted_bugs", "lora", "step B_q leaves each segment's last row unchanged, and step A_v "
           "reads rows at their logical index (permutation ignored)",
           (*_DROPS_SEGMENT_END,
            Patch(_L, '    p = plan(op, batch_info, S, max_len, num_slots=slots, options=lora)',
                  '    p = plan(op, batch_info, S, max_len, num_slots=slots, options=lora)\n'
                  '    if op == "step_a_v" and batch_info.permutation is not None:\n'
                  '        x = x[batch_info.permutation.long().argsort()]')),
           ops=("step_b_q", "step_a_v")),
    Mutant("lora_ignore_rank_truncation", "lora", "every slot uses the buffer rank R instead of min(R, lora_ranks[w])",
           (Patch(_KS, "rank = tl.minimum(tl.load(lora_ranks + w), R)", "rank = R + 0 * tl.load(lora_ranks + w)"),
            Patch(_KF, "rank = tl.minimum(tl.load(lora_ranks + w), R)", "rank = R + 0 * tl.load(lora_ranks + w)"),
            # the fused kernels' token-major rank, loaded before the route (Note [Slot metadata first])
            Patch(_KF, "rank = tl.minimum(rank, R)", "rank = R + 0 * rank"))),
    Mutant("lora_scaling_missing", "lora", "split step B adds the delta without the slot's scaling",
           (Patch(_KS, ", s, None, y_rows,", ", 1.0, None, y_rows,", count=2),), ops=("step_b_q", "step_b_v")),
    # (the fused body serves both sides; the q side is the one searched)
    Mutant("lora_scaling_twice", "lora", "the fused sides apply the scaling twice",
           (Patch(_KF, "scale = _scaling(s, scalings, w, META_FIRST and TOKEN_MAJOR)",
                  "scale = _scaling(s, scalings, w, META_FIRST and TOKEN_MAJOR)\n        scale = scale * scale"),), ops=("q_side_fused",)),
    Mutant("lora_wrong_v_half_offset", "lora", "step B_v reads the K-half of B (row offset h*FULL_K, not +qk)",
           (Patch(_KS, "w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row",
                  "w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row"),), ops=("step_b_v",)),
    Mutant("lora_dropped_k_tail", "lora", "step A_v drops the kv_lora_rank tail block (C not a multiple of BLOCK_K)",
           (Patch(_KS, "for k0 in range(0, C, BLOCK_K):", "for k0 in range(0, (C // BLOCK_K) * BLOCK_K, BLOCK_K):",
                  count=1),), ops=("step_a_v",)),
    # Note [Tile-aware sizes]: a defect only a kv_lora_rank past the first BLOCK_K (128) shows: the second block's
    # columns are pushed past C, so its loads are masked out
    Mutant("lora_drops_second_k_block", "lora", "step A_v drops its second kv_lora_rank block (columns BLOCK_K .. "
           "2 * BLOCK_K - 1 of the K loop never summed)",
           (Patch(_KS, "            kk = k0 + offs_k\n            xt = load_operand(x_rows[:, None] + kk[None, :] * sx_c",
                  "            kk = k0 + offs_k + (k0 == BLOCK_K) * C\n"
                  "            xt = load_operand(x_rows[:, None] + kk[None, :] * sx_c"),), ops=("step_a_v",)),
    # on the flat grid (Note [Flat slot grid]) the bound becomes floor(S/BT) + L - 1, too small for some batches
    Mutant("lora_dropped_tail_tiles", "lora", "token-major grid rounds the row tiles down (tail rows never computed)",
           (Patch(_P, "        tiles = triton.cdiv(num_rows, bt)\n", "        tiles = num_rows // bt\n"),)),
    Mutant("lora_overwrite_not_accumulate", "lora", "step B stores the delta instead of base + delta",
           (Patch(_KT, "cast_rounded(y + d, base_ptr.dtype.element_ty, FIX_BF16)",
                  "cast_rounded(d, base_ptr.dtype.element_ty, FIX_BF16)"),),
           ops=("step_b_q", "step_b_v", "q_side_fused", "v_side_fused")),
    # Note [Row search]: the binary search stops at the first prefix sum >= the row instead of > it
    Mutant("lora_row_search_off_by_one", "lora", "slot-sorted tiles search the row's segment with < instead of <= "
           "(a row at a segment's start goes to the segment before)",
           (Patch(_KR, "<= k, pos + (SEG_TILE >> (i + 1)), pos)", "< k, pos + (SEG_TILE >> (i + 1)), pos)"),)),
    # every route: the segment-major and token-major lookups, and the slot-sorted tiles' slot list
    Mutant("lora_wrong_slot", "lora", "each row takes the previous segment's slot",
           (Patch(_KR, "weight_indices + seg", "weight_indices + tl.maximum(seg - 1, 0)"),
            Patch(_KR, "slots = tl.load(weight_indices + offs_n, mask=in_n, other=-1)",
                  "slots = tl.load(weight_indices + tl.maximum(offs_n - 1, 0), mask=in_n, other=-1)"))),
    Mutant("lora_tf32_operands_8bit", "lora", "fp32 operands truncated to 8 mantissa bits, not TF32's 10 "
           "(a TF32 error too large; Note [TF32 mutants])",
           (Patch(_KT, _OPERAND, "    if x.dtype == tl.float32:\n"
                  "        x = (x.to(tl.int32, bitcast=True) & -32768).to(tl.float32, bitcast=True)\n    return x"),),
           precision="tf32", dtypes=_FP32_ONLY),
    Mutant("lora_tf32_dropped_k_element", "lora", "step A_q's weight tile masks out the last qk_nope element "
           "(one dropped term of the K sum, under the TF32 rule; Note [TF32 mutants])",
           (Patch(_KS, "(kk < QK)[:, None] & (offs_r < rank)[None, :]",
                  "(kk < QK - 1)[:, None] & (offs_r < rank)[None, :]", count=1),
            Patch(_KT, _OPERAND, "    if x.dtype == tl.float32:\n        x = round_tf32(x, True)\n    return x")),
           ops=("step_a_q",), precision="tf32", dtypes=_FP32_ONLY),
    # Note [Wrong-field mutants]
    Mutant("lora_reads_bs_not_num_segments", "lora", "eager launches process bs segments instead of "
           "num_segments or bs (upstream's count)",
           (Patch(_P, "    n = num_segments(batch_info)\n",
                  "    n = int(batch_info.bs or batch_info.num_segments)\n"),)),
    Mutant("lora_bounds_from_seg_lens", "lora", "segment bounds are rebuilt from seg_lens instead of read from "
           "seg_indptr",
           (Patch(_L, "seg_indptr=batch_info.seg_indptr, weight_indices",
                  "seg_indptr=(batch_info.seg_indptr if batch_info.seg_lens is None else torch.cat("
                  "[batch_info.seg_indptr[:1], batch_info.seg_indptr[:1] + torch.cumsum(batch_info.seg_lens, 0)])"
                  ".to(torch.int32)), weight_indices"),)),
    Mutant("lora_grid_from_longest_segment", "lora", "the segment-major grid is sized from the longest segment in "
           "seg_indptr while its programs are decoded with max_len's tile count",
           (Patch(_P, "return Plan(False, n_launch, n_launch * tiles_per_seg, max(tiles_per_seg, 1), 0, 0, seg_blocks)",
                  "return Plan(False, n_launch, n_launch * triton.cdiv(int((batch_info.seg_indptr[1:n + 1] - "
                  "batch_info.seg_indptr[:n]).max()) if n else 0, seg_blocks['BT']), max(tiles_per_seg, 1), 0, 0, "
                  "seg_blocks)"),
            _FORCE_SEG)),
    Mutant("lora_drifted_error_message", "lora", "the missing-max_len error lost its final period",
           (Patch(_L, "from kernel_oracle.reference.lora import validate_call\n",
                  "from kernel_oracle.reference.lora import validate_call as _validate_call\n\n\n"
                  "def validate_call(*args, **kwargs):\n"
                  "    try:\n"
                  "        return _validate_call(*args, **kwargs)\n"
                  "    except ValueError as exc:\n"
                  "        if str(exc) == 'LoRA batch_info must provide max_len or seg_lens.':\n"
                  "            raise ValueError('LoRA batch_info must provide max_len or seg_lens') from None\n"
                  "        raise\n"),),
           categories=("upstream", "partial")),
    # ---- vision ----
    Mutant("vision_leak_past_sequence_end", "vision", "the last key block is not masked: keys past the sequence "
           "end (zero-filled) join the softmax",
           (Patch(_VT, 's = tl.where((offs_n < n)[None, :], s, float("-inf"))', "s = s"),)),
    Mutant("vision_dropped_key_tail", "vision", "the partial last key block is skipped",
           (Patch(_VK, "if n_full < n:", "if n_full < 0:"),)),
    Mutant("vision_wrong_v_offset", "vision", "v is read at the q/k token offsets instead of v_indptr's",
           (Patch(_VA, "vs.numpy()[seq], os.numpy()[seq]", "qs.numpy()[seq], os.numpy()[seq]"),)),
    Mutant("vision_wrong_o_offset", "vision", "the output is written at the q/k token offsets instead of o_indptr's",
           (Patch(_VA, "vs.numpy()[seq], os.numpy()[seq]", "vs.numpy()[seq], qs.numpy()[seq]"),)),
    Mutant("vision_ignores_softmax_scale", "vision", "the kernel always uses the default scale D**-0.5",
           (Patch(_VA, "self.num_blocks, plan.scale, self.config",
                  "self.num_blocks, plan.q.shape[2] ** -0.5, self.config"),)),
    Mutant("vision_exp2_without_log2e", "vision", "scores go to exp2 without the log2(e) factor (wrong softmax base)",
           (Patch(_VK, "_split_scale(float(scale) * LOG2E)", "_split_scale(float(scale))"),)),
    # Note [Wrong-field mutants]
    Mutant("vision_lengths_from_indptr_gaps", "vision", "each sequence's length is the gap to the next qk_indptr "
           "entry instead of sequence_lengths",
           (Patch(_VA, "    n = plan.lengths\n    qs, vs, os = plan.qk_start, plan.v_start, plan.o_start\n"
                       "    keep = _kept",
                  "    n = torch.cat([plan.qk_start[1:] - plan.qk_start[:-1], plan.lengths[-1:]]).clamp(min=0)\n"
                  "    qs, vs, os = plan.qk_start, plan.v_start, plan.o_start\n    keep = _kept"),)),
    Mutant("vision_kwargs_over_forward_metadata", "vision", "the wrapper takes the kwargs path whenever "
           "sequence_lengths is among the kwargs, even beside forward_metadata's packed indptrs",
           (Patch(_VA, "    plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, "
                       "strict=strict, **kwargs)",
                  "    if \"sequence_lengths\" in kwargs:\n        forward_metadata = None\n"
                  "    plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, "
                  "strict=strict, **kwargs)"),)),
    # the checks of SGLang's whole call (Note [GQA, window and sinks] in kernels.vision._kernel)
    Mutant("vision_gqa_interleaved_heads", "vision", "query head h reads key/value head h % H_kv instead of "
           "h // (H // H_kv)",
           (Patch(_VK, "        kv_h = h // kv_group", "        kv_h = h % (tl.num_programs(1) // kv_group)"),)),
    Mutant("vision_ignores_window", "vision", "window_size is accepted and ignored (full attention)",
           (Patch(_VK, "WINDOW=window[0] >= 0 or window[1] >= 0", "WINDOW=False"),)),
    Mutant("vision_ignores_sinks", "vision", "s_aux is accepted and ignored (no sink in the softmax)",
           (Patch(_VK, "HAS_SINKS=sinks is not None", "HAS_SINKS=False"),)),
    Mutant("vision_skips_strict_validation", "vision", "the wrapper resolves metadata with strict=False",
           (Patch(_VA, "softmax_scale, forward_metadata, strict=strict, **kwargs)",
                  "softmax_scale, forward_metadata, strict=False, **kwargs)"),),
           categories=("malformed",)),
    # ---- csgmv: patched copies of a release's own files (Note [csgmv mutants] in .mutants_csgmv) ----
    *CSGMV_MUTANTS,
)

# Controls: changes the suite must NOT flag (equivalent behaviour under the rule); searched like mutants,
# they must survive (oracle_tests/reference/test_tolerance_rule.py)
CONTROLS: tuple[Mutant, ...] = (
    Mutant("lora_tf32_truncation", "lora", "fp32 operands truncated to TF32, as the tensor cores do with raw "
           "fp32 (must pass; Note [TF32 mutants])",
           (Patch(_KT, _OPERAND, "    if x.dtype == tl.float32:\n        x = round_tf32(x, True)\n    return x"),),
           precision="tf32", dtypes=_FP32_ONLY),
)

_BY_NAME = {m.name: m for m in MUTANTS + CONTROLS}
_BUILT: dict[str, str] = {}
_TMP: dict[str, Path] = {}


def _tmp_root() -> Path:
    if "root" not in _TMP:
        root = Path(tempfile.mkdtemp(prefix="kernel-oracle-mutants-"))
        atexit.register(shutil.rmtree, root, True)
        sys.path.insert(0, str(root))
        _TMP["root"] = root
    return _TMP["root"]


def get_mutant(name: str) -> Mutant:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise MutantError(f"mutant {name!r} is unknown; the only valid names are {sorted(_BY_NAME)}") from None


def build_mutant(name: str) -> str:
    """Copy ``kernels`` with the mutant's patches as package ``kernels_mutant_<name>``; return its name."""
    if name in _BUILT:
        return _BUILT[name]
    mutant = get_mutant(name)
    if mutant.source != "kernels":
        raise MutantError(f"mutant {name!r} patches {mutant.source}, not our kernels: resolve mutant:{name} instead")
    pkg = f"kernels_mutant_{mutant.name}"
    dest = _tmp_root() / pkg
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(KERNELS_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = {str(p.relative_to(dest)): p.read_text() for p in dest.rglob("*.py")}
    patched = apply_patches(mutant, files)
    for rel, src in patched.items():
        src = re.sub(r"\b(from|import) kernel_oracle\.kernels\b", rf"\1 {pkg}", src)  # absolute self-imports
        (dest / rel).write_text(src)
    importlib.invalidate_caches()
    _BUILT[name] = pkg
    return pkg


def mutant_target(spec: TargetSpec, device: str = "cpu", sources: TargetSources = TargetSources()) -> Target:
    """The :class:`Target` of ``mutant:<name>``."""
    spec = TargetSpec.parse(spec)
    name = spec.mutant
    if name in _BY_NAME and _BY_NAME[name].source == "sglang-csgmv":
        return csgmv_mutant_target(_BY_NAME[name], spec, device, sources)
    try:
        pkg = build_mutant(name)
    except MutantError as exc:
        return unavailable(str(spec), str(exc))
    mutant = get_mutant(name)
    precision = None
    if mutant.precision is not None:
        precision = {op: mutant.precision for op in FAMILY_OPS[mutant.family]}
    t = kernels_target(device, package=pkg, name=str(spec), precision=precision)
    if mutant.dtypes is not None:
        t.excluded_dtypes.update({d: f"mutant {name} is searched in {', '.join(mutant.dtypes)} only"
                                  for d in ("float16", "bfloat16", "float32") if d not in mutant.dtypes})
    return t


register_target("mutant", mutant_target)
