"""Findings grouped by root cause: the one bucket definition of campaigns, the main job, reports and compare.

Note [Buckets]
--------------
Many failing cases share one defect; a maintainer wants one finding per defect, with a count, its
smallest example and a few more (the way ClusterFuzz groups crashes by their crash state and
Hypothesis by the interesting origin).  A :class:`Bucket` is that identity: a *root cause* is what
would have to change in the target's code to fix the failure, so the key holds what names that code
and nothing that names the input that happened to show it.  No bucket holds the dtype, the shape
class, the seed, the release or the config flags: one defect shows in every dtype and size the code
path serves, and is one finding with a ``dtypes`` list and a count over all of them.

* **contract**: the contract that did not hold (``contract lora.missing_max_len``), whatever the target
  did instead: no error, another type, another text, or a crash deep in its own code are one root cause
  (the missing check), not one finding per wrong error.  Only an error raised on a valid input, where
  no contract is at stake, keys as a crash does.  The wrong error a contract case raised travels
  along (``Bucket.also``, not compared): :meth:`Bucket.covers` takes a target that raises the same
  error on valid inputs and in place of a contract's error as one root cause (a raise in a shared
  helper), whichever of the two it met first;
* **crash** (the target raised on a valid input, or died): the exception type, its normalised message
  (:func:`normalise_message`: the first line, every number masked, whitespace collapsed, cut at
  :data:`MESSAGE_PREFIX` characters, whole words only: ``seg_lens[3]`` and ``seg_lens[7]`` are one cause, and so is a
  message a library cut at another length), and the top frame in the target's own code
  (:func:`target_frame`: the innermost frame of the traceback that is neither the harness, torch,
  Triton nor the standard library; ``module:function``, no line number, so a bucket survives an
  unrelated edit of the file).  A dead worker is its exit status;
* **validation-gap**: the mutation kind that was accepted (``accepted seg_indptr_decreasing``);
* **hang**: no answer within the case timeout (a campaign first retries such a case with a longer
  wait: Note [Confirmed hangs] in :mod:`fuzz.hangs`); the waits are in the finding's message, not the key;
* **mismatch**: the *op* and the failure mode: ``values`` (the output has the right shape and
  dtype and some values differ from the oracle) or ``output`` (a wrong shape, dtype or return
  value: there are no values to compare, so it is another defect).  The op is in the key because a
  mismatch names no frame: the op's entry point is the one piece of the target's code it points at,
  and two defects in two ops are two findings, until the minimal example of each shows what it depends on:
  then the record keys it on that dependence instead (``depends``, Note [One root cause across ops] in
  :mod:`harness.root_causes`).  The *region class* where the failing elements lie
  (:data:`REGIONS`, see :func:`mismatch_region`) and the config flags of the case
  (:data:`CONFIG_FLAGS`) are attributes of a finding (``Bucket.where`` / ``Bucket.flags``; the
  finding's ``regions`` list is every region its cases showed), not part of its key: the same defect
  shows in the tail tile of one case and everywhere in another, depending on the sizes drawn (a
  stale host integer reads past the CUDA-graph padding in one case and garbles every row in the
  next), so a region that split findings would split one root cause by the accident of its input.

Every kind's key also holds ``needs``: the features of SGLang's vision call (GQA, a window, sinks, ...)
without which the case passes (Note [Needed features] in :mod:`harness.features`).  A wrapper that gets
GQA wrong and one that ignores the window fail with the same symptom; what they need tells the two
defects apart, where the config flags (which a case carries at random) would not.

The region is the first of :data:`REGIONS` that holds **all** failing elements (not just the worst
one): ``stale graph metadata`` (rows outside every real segment, CUDA-graph padding present),
``padding`` (rows no segment routes: past the segments, or of a rank-0 slot), ``beyond rank`` (only
rows of slots whose rank is below the buffers' R, with poison planted past the rank), ``segment
boundary`` (first or last row of a segment of two or more), ``tail tile`` (the partial last
16/32/64/128-row tile of a longer segment, or the partial last column tile), ``head`` (heads >= 1
only), ``slot`` (only some of the slots in use), else ``everywhere``; a wrong shape, dtype or return
value is ``output``.  It feeds the finding's headline (:mod:`harness.headline`).

The search loop asks :meth:`Bucket.covers` (equal keys).  A finding's example holds only the flags
its defect needs: after shrinking, the campaign minimises it (Note [Minimal examples] in
:mod:`harness.simplify`: without each flag, segment, row or head it does not need, kept while it
fails in the same bucket).  :func:`bucket_of_record` reads the
bucket a finding record carries, or derives one from its fields (records of any schema version,
selfcheck rows: a stored bucket of the older shape, with ``(dtype, *flags)`` in ``config`` and the
region as its cause, reads as the bucket above), so reports, the release matrix and ``compare``
agree with the campaign that wrote the record.

This module imports only the standard library at import time (reports read it); tensors are
touched only inside :func:`mismatch_region` / :func:`config_signature`.
"""

from __future__ import annotations

import os
import re
import signal
import sysconfig
from dataclasses import dataclass, field
from typing import Optional

from kernel_oracle.harness.family import get_family

__all__ = ["Bucket", "CONFIG_FLAGS", "MESSAGE_PREFIX", "REGIONS", "RowStructure", "bucket_of", "bucket_of_record",
           "config_signature", "describe_exit", "mask_numbers", "mismatch_region", "normalise_message",
           "target_frame"]

REGIONS = ("stale graph metadata", "padding", "beyond rank", "segment boundary", "tail tile", "head", "slot",
           "everywhere", "output")
CONFIG_FLAGS = ("cuda_graph", "permuted", "rank0", "empty_segment")
# tile heights of the kernels we know (our kernels, SGLang's, FlashInfer's): a failure confined to the
# partial last tile of any of them is a tail-tile defect
TILES = (16, 32, 64, 128)
_MAX_MESSAGE = 200
# characters of a normalised message a bucket keys on: long enough to name the error, short enough
# that a message cut by a library (or by us, at _MAX_MESSAGE) at another length keys the same
MESSAGE_PREFIX = 56

_NUMBER = re.compile(r"0x[0-9a-fA-F]+|(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def mask_numbers(text: str) -> str:
    """``text`` with every number (and hex address) replaced by ``#``; numbers inside names
    (``float16``, ``step_a_q``, ``int32``) are kept."""
    return _NUMBER.sub("#", text)


def normalise_message(text: Optional[str]) -> str:
    """The key form of a message (Note [Buckets]): its first line, numbers masked, runs of masks
    and whitespace collapsed, cut at :data:`MESSAGE_PREFIX` characters and stripped of a trailing
    ellipsis, so ``"shape (3, 4) ..."`` cut at 80 or 120 characters is one key."""
    line = re.sub(r"#(?:[\s,x*]*#)+", "#", mask_numbers(_first_line(text)))
    line = re.sub(r"\s+", " ", line).rstrip(" .…")
    if len(line) > MESSAGE_PREFIX:  # whole words only: a cut inside one would key on where it fell
        line = line[:MESSAGE_PREFIX + 1].rsplit(" ", 1)[0]
    return line.rstrip(" .…,").rstrip()


def _first_line(text: Optional[str]) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:_MAX_MESSAGE]
    return ""


@dataclass(frozen=True)
class Bucket:
    """One root cause (Note [Buckets]).  The key: ``kind``, ``family``, ``cause`` (per kind),
    ``frame`` (the top frame in the target's code: crash / contract) and ``op`` (mismatch only).
    ``needs``: the features of SGLang's vision call the failure needs (Note [Needed features] in
    :mod:`harness.features`), also compared.  ``where`` (the region class of this case) and ``flags``
    (its config flags) describe the case that showed it and are not compared."""

    kind: str
    family: str
    cause: str
    frame: str = ""
    op: str = ""
    where: str = field(default="", compare=False)
    flags: tuple = field(default=(), compare=False)
    needs: tuple = ()
    # a broken contract's wrong error (``Type: message at module:function``), when the target raised one
    also: str = field(default="", compare=False)
    # a mismatch keyed on what its minimal example depends on, not on its op (Note [One root cause across ops])
    depends: tuple = ()

    @property
    def label(self) -> str:
        parts = [self.kind, self.family] + ([self.op] if self.op else []) + [self.cause]
        if self.frame:
            parts.append(f"at {self.frame}")
        if self.needs:
            parts.append("needs " + ", ".join(self.needs))
        if self.depends:
            parts.append("depends on " + ", ".join(self.depends))
        return " | ".join(parts)

    @property
    def raised(self) -> str:
        """The error the target raised, in key form, where the bucket knows one: a broken contract's wrong
        error (``also``), or the error of a contract bucket keyed on what was raised (a valid input's)."""
        if self.kind != "contract":
            return ""
        if self.cause.startswith(("contract ", "no error: ", "wrote its input ", "global state changed: ")):
            return self.also
        return f"{self.cause} at {self.frame}"

    def covers(self, other: "Bucket") -> bool:
        """Whether a case in ``other`` is an instance of this (already found) root cause: equal keys, or
        one error the target raises whatever the input (on a valid input and in place of a contract's
        error: one raise in a shared helper, not two defects)."""
        return self == other or (self.kind == other.kind == "contract" and self.family == other.family
                                 and bool(self.raised) and self.raised == other.raised)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "family": self.family, "cause": self.cause, "frame": self.frame, "op": self.op,
                "also": self.also, "needs": list(self.needs), "where": self.where, "flags": list(self.flags),
                "depends": list(self.depends)}

    @classmethod
    def from_dict(cls, d: dict) -> "Bucket":
        """A stored bucket, of this shape or the older one (``config`` = ``(dtype, *flags)``, the
        region as a mismatch's cause, no op: the op comes from ``op``, the finding's op)."""
        kind, cause = str(d["kind"]), str(d.get("cause") or "")
        flags = tuple(str(c) for c in d.get("flags") or (d.get("config") or ())[1:])
        where = str(d.get("where") or "")
        if kind == "mismatch" and cause not in ("values", "output"):
            where, cause = where or cause, "values"
        elif kind == "mismatch" and not where:
            where = "output" if cause == "output" else ""
        elif kind in ("crash", "contract"):
            cause = _normalise_cause(cause)
        return cls(kind=kind, family=str(d.get("family") or ""), cause=cause, frame=str(d.get("frame") or ""),
                   op=str(d.get("op") or "") if kind == "mismatch" else "",
                   needs=tuple(str(n) for n in d.get("needs") or ()), where=where, flags=flags,
                   also=str(d.get("also") or ""), depends=tuple(str(n) for n in d.get("depends") or ()))


def _normalise_cause(cause: str) -> str:
    """A crash / contract cause in key form: ``"Type: message"`` with the message normalised."""
    head, sep, rest = cause.partition(": ")
    if sep and re.fullmatch(r"[\w.]+", head):
        return f"{head}: {normalise_message(rest)}"
    return normalise_message(cause)


# ---- crash and contract: the target's own frame -------------------------------------------------------------

_STDLIB = tuple(os.path.realpath(p) + os.sep for p in {sysconfig.get_paths()["stdlib"],
                                                        sysconfig.get_paths()["platstdlib"]})
# modules whose frames are never "the target's code": the harness that calls it and the libraries under it
_NOT_TARGET = ("kernel_oracle.harness", "kernel_oracle.fuzz.worker", "kernel_oracle.fuzz.campaign", "torch",
               "triton", "numpy", "importlib", "contextlib", "functools", "multiprocessing", "typing")


def _is_target_frame(frame) -> bool:
    module = str(frame.f_globals.get("__name__") or "")
    if any(module == m or module.startswith(m + ".") for m in _NOT_TARGET):
        return False
    path = os.path.realpath(frame.f_code.co_filename)
    if "site-packages" not in path and path.startswith(_STDLIB):
        return False
    return not path.startswith("<")


def target_frame(tb) -> Optional[str]:
    """``module:function`` of the innermost traceback frame in the target's own code, or None."""
    found = None
    while tb is not None:
        if _is_target_frame(tb.tb_frame):
            f = tb.tb_frame
            found = f"{f.f_globals.get('__name__') or os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}"
        tb = tb.tb_next
    return found


def describe_exit(code: Optional[int]) -> str:
    """A worker's exit code in words: ``killed by SIGSEGV`` or ``exit status 7``."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# ---- mismatch: region class and config signature ------------------------------------------------------------

def config_signature(problem) -> tuple:
    """``(dtype, *flags)`` of a LoRA or vision problem (dataclass or its dict)."""
    get = (lambda k, d=None: problem.get(k, d)) if isinstance(problem, dict) else (
        lambda k, d=None: getattr(problem, k, d))
    flags = []
    if get("cuda_graph_pad_to") is not None:
        flags.append("cuda_graph")
    if get("permute"):
        flags.append("permuted")
    seg_lens = list(get("seg_lens") or get("lengths") or ())
    ranks = list(get("lora_ranks") or ())
    slots = list(get("weight_indices") or ())
    if ranks and any(0 <= s < len(ranks) and ranks[s] == 0 for s, n in zip(slots, seg_lens) if n):
        flags.append("rank0")
    if any(n == 0 for n in seg_lens):
        flags.append("empty_segment")
    return (str(get("dtype") or "-"), *flags)


def _failing_mask(output, value, defined, figures: dict):
    """Elements the comparison failed: non-finite ones if any, else ``|a - r| > max_abs / ratio``."""
    import torch

    a = output.detach().to("cpu", torch.float64)
    r = value.detach().to("cpu", torch.float64)
    d = defined.detach().to("cpu").bool()
    nonfinite = d & ~torch.isfinite(a)
    if bool(nonfinite.any()):
        return nonfinite
    max_abs, ratio = figures.get("max_abs"), figures.get("ratio")
    diff = torch.where(d, (a - r).abs(), torch.zeros((), dtype=torch.float64))
    if isinstance(max_abs, (int, float)) and isinstance(ratio, (int, float)) and ratio > 0 and ratio == ratio:
        allowed = max_abs / ratio
        return d & (diff > allowed * (1 + 1e-9))
    return d & (diff > 0)


def _row_region(rows, seg, pos, seg_len, cuda_graph: bool) -> Optional[str]:
    """The row-wise region holding all failing ``rows`` (python lists per row), or None."""
    if all(seg[t] < 0 for t in rows):
        return "stale graph metadata" if cuda_graph else "padding"
    if any(seg[t] < 0 for t in rows):
        return None
    if all(seg_len[seg[t]] >= 2 and pos[t] in (0, seg_len[seg[t]] - 1) for t in rows):
        return "segment boundary"
    for tile in TILES:
        if all(seg_len[seg[t]] > tile and seg_len[seg[t]] % tile and pos[t] >= seg_len[seg[t]] // tile * tile
               for t in rows):
            return "tail tile"
    return None


def _column_tail(cols, width: int) -> bool:
    return any(width > tile and width % tile and all(c >= width // tile * tile for c in cols) for tile in TILES)


@dataclass(frozen=True)
class RowStructure:
    """What a mismatch's region reads of a call's output rows (its family's ``row_structure``: a LoRA call's
    routing, a vision call's sequences): per row its ``segment`` (-1: none), ``position`` in it and ``slot``
    (-1: none); each segment's ``lengths``; ``cuda_graph``: the batch is a replayed graph's (rows of no
    segment are its padding); ``beyond_rank_slots``: the slots whose rows read poison planted past their rank
    (a region of their own where every failing row is one of theirs)."""

    segment: list
    position: list
    slot: list
    lengths: list
    cuda_graph: bool = False
    beyond_rank_slots: frozenset = frozenset()


def mismatch_region(case, call, output, value, defined, figures: dict) -> str:
    """The region class (:data:`REGIONS`) holding every failing element of a value mismatch.

    ``output`` / ``value`` / ``defined``: the target's output, the float64 oracle and its defined
    mask, LoRA ``(S, H, X)`` or vision ``(T, H, D)`` / ``(1, T, H, D)``; ``call``: the call both saw.  The rows'
    structure is the family's (its record's ``row_structure``, a :class:`RowStructure`); a family without one
    fails ``everywhere``."""
    import torch

    if output is None or value is None or tuple(output.shape) != tuple(value.shape):
        return "output"
    over = _failing_mask(output, value, defined, figures)
    if over.dim() == 4:
        over = over.flatten(0, 1)
    hit = torch.nonzero(over)
    if not hit.numel():
        return "everywhere"
    rows = torch.unique(hit[:, 0]).tolist()
    heads = set(torch.unique(hit[:, 1]).tolist())
    cols = set(torch.unique(hit[:, -1]).tolist())
    S, H, width = over.shape[0], over.shape[1], over.shape[-1]
    structure = get_family(case.family).resolve("row_structure")
    rs = structure(case, call, S) if structure is not None else None
    if rs is None:  # a family whose rows have no structure here, or metadata too malformed to give one
        return "everywhere"
    seg, pos, slot = rs.segment, rs.position, rs.slot
    region = _row_region(rows, seg, pos, rs.lengths, rs.cuda_graph)
    if region in ("stale graph metadata", "padding"):
        return region
    if all(seg[t] >= 0 and slot[t] in rs.beyond_rank_slots for t in rows):
        return "beyond rank"
    if region is not None:
        return region
    if _column_tail(cols, width):
        return "tail tile"
    if H > 1 and 0 not in heads:
        return "head"
    used = {slot[t] for t in range(S) if seg[t] >= 0 and slot[t] >= 0}
    if len(used) > 1 and {slot[t] for t in rows} < used:
        return "slot"
    return "everywhere"


# ---- the bucket of a case or of a stored finding --------------------------------------------------------------

def bucket_of(case, verdict, *, observed=None, expected=None, call=None) -> Bucket:
    """The bucket of a failing case (the campaign's view: it holds the observation and the call)."""
    kind, family = verdict.kind, case.family
    if kind == "mismatch":
        region = "output"
        if observed is not None and expected is not None and call is not None and observed.output is not None:
            if "routed by no segment" in (verdict.message or ""):
                region = "stale graph metadata" if getattr(case.problem, "cuda_graph_pad_to", None) else "padding"
            elif verdict.figures:
                region = mismatch_region(case, call, observed.output, expected.value, expected.defined,
                                         verdict.figures)
        sig = config_signature(case.problem)
        return Bucket(kind, family, "output" if region == "output" else "values", "", case.op, region, sig[1:])
    if kind == "validation-gap":
        return Bucket(kind, family, f"accepted {case.mutation.kind if case.mutation else 'valid input'}")
    if kind == "hang":
        return Bucket(kind, family, "no answer within the case timeout")
    if kind == "stream":  # one root cause per fused side: the step-B input read after its block was reused
        return Bucket(kind, family, f"{case.op}: step B read a block the side stream reused")
    if kind == "crash":
        return Bucket(kind, family, normalise_message(observed.message if observed is not None
                                                      else verdict.message))
    # contract: the contract that did not hold, whatever the target did instead (Note [Buckets])
    contract = getattr(expected, "contract_id", None)
    raised = (f"{observed.exc_type}: {normalise_message(observed.message)} at {getattr(observed, 'frame', None) or ''}"
              if observed is not None and observed.kind == "raise" else "")
    if contract:
        return Bucket(kind, family, f"contract {contract}", also=raised)
    if getattr(expected, "kind", None) == "error":
        return Bucket(kind, family, f"contract {expected.exc_type} (the oracle's own error)")
    if observed is not None and observed.kind == "raise":  # an error on a valid input: no contract names it
        cause = f"{observed.exc_type}: {normalise_message(observed.message)}"
        return Bucket(kind, family, cause, getattr(observed, "frame", None) or "")
    return Bucket(kind, family, f"no error: expected {getattr(expected, 'exc_type', None) or 'an error'}")


def _family_of_record(f: dict) -> str:
    fam = f.get("family")
    if not fam and isinstance(f.get("problem"), dict):
        fam = (f["problem"].get("problem") or {}).get("family")
    return str(fam or f.get("op") or "-")


_EXPECTED_CONTRACT = re.compile(r"\[(?:upstream|strict) contract ([\w.]+)\]")
# a contract bucket keyed on what the target did rather than on the contract (records written before)
_OLD_CONTRACT_KEY = re.compile(r"no error: expected |[\w.]+: ")


def _expected_contract(f: dict) -> Optional[str]:
    """The contract id a contract finding's ``expected`` text names (``... [upstream contract ID]``)."""
    found = _EXPECTED_CONTRACT.search(str(f.get("expected") or ""))
    return found.group(1) if found else None


def bucket_of_record(f: dict) -> Bucket:
    """The bucket a finding record carries, or the one its fields imply (older records, selfcheck).  A
    contract finding keys on the contract its ``expected`` names, also in records whose stored bucket
    keyed on the text of the wrong error (``no error: expected ...`` or ``Type: message``)."""
    stored = f.get("bucket") if isinstance(f.get("bucket"), dict) else None
    contract = _expected_contract(f) if f.get("kind") == "contract" else None
    if contract and (stored is None or _OLD_CONTRACT_KEY.match(str(stored.get("cause") or ""))):
        return Bucket("contract", str((stored or {}).get("family") or _family_of_record(f)), f"contract {contract}")
    if isinstance(f.get("bucket"), dict):
        try:
            b = Bucket.from_dict(f["bucket"])
            if b.kind == "mismatch" and not b.op and not b.depends:  # an older record: the finding's op
                import dataclasses

                b = dataclasses.replace(b, op=str(f.get("op") or ""))
            return b
        except (KeyError, TypeError):
            pass
    kind, family = str(f.get("kind")), _family_of_record(f)
    contract = f.get("contract") or f.get("contract_id")
    if contract:
        return Bucket(kind, family, f"contract {contract}")
    if kind == "mismatch":
        problem = (f.get("problem") or {}).get("problem") if isinstance(f.get("problem"), dict) else None
        flags = config_signature(problem)[1:] if isinstance(problem, dict) else ()
        return Bucket(kind, family, "values", "", str(f.get("op") or ""), "", flags)
    return Bucket(kind, family, normalise_message(str(f.get("message") or "")))
