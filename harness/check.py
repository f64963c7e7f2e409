"""One fuzz case, end to end: expected outcome, one target call, verdict.

Note [Checking a case]
----------------------
A :class:`Case` is a plain-data problem plus an optional :class:`~harness.mutations.Mutation`.

1. :func:`expected_outcome` runs the reference oracle (strict) on the materialised, mutated call:
   it either returns (an ``ExpectedOutcome`` of kind ``result`` carrying the float64 value, the defined
   mask and the faithful same-dtype baseline in the target's fp32 precision), or raises a contract
   error (``upstream`` / ``strict`` with exact type and text from :mod:`reference.contracts`), or
   raises something outside the table (``error``: Note [Errors outside the table]).
2. :func:`execute` runs the target on a fresh copy of the call (picklable :class:`Observed`, so it
   can run in a worker process): outputs are NaN-poisoned first where the target's API allows it
   (the ``poison_outputs`` launch option of our kernels, or a target's own ``poison`` hook; for any
   other target ``torch.empty`` returns NaN during the call, Note [Poisoning code we do not own] in
   :mod:`harness.fresh_outputs`); inputs that no sequence reads are NaN too (vision), so a kernel
   that leaks across sequences produces NaN; in-place outputs cannot be poisoned, so rows no segment
   routes must come back bit-identical instead.  Around the call, torch's global settings are
   snapshotted and restored (:mod:`harness.torch_state`, Note [Global state]) and the read-only
   inputs copied and compared after it (:mod:`harness.input_writes`, Note [Read-only inputs]), and so are
   the buffers around strided arguments (:mod:`harness.view_gaps`, Note [Writes outside a view]).
   A target's own vision metadata helper (an SGLang release's) runs while the call is materialised:
   its error is the target's raise too, judged against the same batch built with our metadata.
3. :func:`judge` classifies: ``mismatch`` (wrong numbers on a valid input), ``contract`` (missing,
   wrong-type or wrong-text error, or an error on a valid input), ``validation-gap`` (malformed
   metadata accepted), ``crash`` (the worker died); a written read-only input or a write outside an
   argument's view is a ``contract`` finding, a changed global setting travels in ``Verdict.state_changes`` (a campaign records each
   setting once; :func:`with_state_changes` fails a single check on it).  Errors are scored with
   :func:`reference.tolerance.compare` against the faithful baseline of the target's dtype and
   precision.

Note [Verdicts beside the target]
---------------------------------
:func:`check_case` does all three steps in the process that runs the target, on its device:
the problem is materialised there (Note [Where data is generated]), the oracle runs there (float64
on a GPU is fine), the output stays there and :func:`judge` compares there; what comes back is the
:class:`Verdict` (plus, for a failure, its root-cause :class:`~harness.buckets.Bucket`): a few
hundred bytes instead of the output tensor, and no host copy or host float64 comparison.  A
campaign worker calls it per case; tensors are rebuilt and saved only for findings (from the seed,
on the same kind of device).  :func:`execute` with ``to_host=True`` (the default) still returns the
output on the CPU for callers that pickle or keep observations.

Note [Errors outside the table]
-------------------------------
When the oracle raises an error that is in no contract, a target passes only by raising the same
type with the same text on the same inputs: a type alone would let Python's own ``TypeError`` of a
wrong call (an argument missing or misspelled) match any function called the same wrong way, a
check that cannot fail.  The one exception is a target without our strict validation (SGLang's
kernels, ``strict=False``): where upstream itself fails with a bare Python error (``int(None)`` for
``max_seqlen=None``), the reference keeps that type and words its own text (docs/reference.md), so
upstream's text is Python's and only the type is the contract (``judge(..., exact_errors=False)``).

Note [Odd outputs]
------------------
What a target returns is the target's business and never the harness's failure: a meta tensor
(no data to compare), a nested or sparse tensor, a ``torch.Tensor`` subclass (whose operators may
run its own code during the comparison), a quantized tensor, a tensor on another device than its
inputs, or no tensor at all is a ``mismatch`` with a one-line reason (:func:`odd_output`), and
the campaign goes on.  Only a plain strided tensor with data on the inputs' device is compared.
Text the target controls (its exception's message and type name, a returned type's name) is
bounded and has its control characters escaped before it enters a verdict (Note [Target text]).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from kernel_oracle.reference.contracts import CONTRACTS
from kernel_oracle.reference.strict import strict_validation
from kernel_oracle.reference.tolerance import compare

from kernel_oracle.harness import oracle_integrity
from kernel_oracle.harness.buckets import Bucket, bucket_of, config_signature, target_frame
from kernel_oracle.harness.device import DeviceLost, is_device_error
from kernel_oracle.harness.family import get_family
from kernel_oracle.harness.fresh_outputs import nan_filled_allocations
from kernel_oracle.harness.input_writes import freed, storage_shortfall, watch as watch_inputs, writes as input_writes
from kernel_oracle.harness.view_gaps import watch as watch_gaps, writes as gap_writes
from kernel_oracle.harness.target_raises import signals_noted
from kernel_oracle.harness.text import bounded, printable
from kernel_oracle.harness.locators import expected_at
from kernel_oracle.harness.malformed import consequence, valid_part
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.problems import materialize, problem_from_dict, problem_to_dict
from kernel_oracle.harness.saved_calls import call_on
from kernel_oracle.harness.untouched import changed_rows, changed_rows_message, untouched_mask

__all__ = ["Case", "ExpectedOutcome", "Observed", "Verdict", "case_from_dict", "check_case", "execute",
           "expected_outcome", "judge", "odd_output", "prepared_call", "shape_class", "state_change_verdict",
           "with_state_changes"]


@dataclass(frozen=True)
class Case:
    """A problem (plain data) and an optional metadata mutation."""

    problem: Any
    mutation: Optional[Mutation] = None

    @property
    def family(self) -> str:
        return self.problem.family

    @property
    def op(self) -> str:
        return self.problem.op

    @property
    def dtype(self) -> str:
        return self.problem.dtype

    @property
    def category(self) -> str:
        return "valid" if self.mutation is None else self.mutation.category

    def declined(self, declines, *, never_sent: bool = False) -> tuple[str, ...]:
        """The features of ``declines`` (a target's ``Target.declines``) this case uses, which no campaign gives
        that target (its family's ``declined``; none for a family without one); ``never_sent``: only those
        of them that no command sends (the family's ``never_sent``: memory outside the tensors)."""
        family = get_family(self.family)
        fn = family.resolve("declined")
        used = tuple(fn(self.problem, self.mutation, declines)) if fn is not None else ()
        return tuple(f for f in used if f in family.never_sent) if never_sent else used

    def call(self, device, metadata_helper=None):
        c = materialize(self.problem, device, metadata_helper)
        if self.mutation is not None:
            self.mutation.apply(c)
        return c

    def to_dict(self) -> dict:
        return {"problem": problem_to_dict(self.problem),
                "mutation": None if self.mutation is None else self.mutation.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def case_from_dict(d: dict) -> Case:
    return Case(problem_from_dict(d["problem"]), Mutation.from_dict(d.get("mutation")))


def shape_class(case: Case) -> str:
    """A coarse class for grouping results: the mutation category or the problem's shape."""
    if case.mutation is not None:
        return case.mutation.category
    return case.problem.shape_class()  # each family's problem knows its own


# ---- expected outcome ----------------------------------------------------------------------------

@dataclass
class ExpectedOutcome:
    kind: str  # "result" | "upstream" | "strict" | "error"
    exc_type: Optional[str] = None
    message: Optional[str] = None
    contract_id: Optional[str] = None
    value: Optional[torch.Tensor] = None
    defined: Optional[torch.Tensor] = None
    baseline: Optional[tuple] = None  # the faithful oracle's (Note [Baseline orders]); csgmv: (CsgmvExpected, mode)
    out_dtype: Optional[torch.dtype] = None
    overflow_alternate: Optional[torch.Tensor] = None  # the LoRA oracle's (Note [Range at rounding points])


def _run_oracle(case: Case, call, **kw):
    c = _copy_call(call)
    return OP_DB[case.op].oracle(*c.args, **c.kwargs, **kw)


def _copy_call(call):
    return copy.deepcopy(call)


def prepared_call(case: Case, device, metadata_helper=None):
    """The call both the oracle and the target see: materialised (``metadata_helper``: the target's own
    vision metadata helper), mutated, unread inputs poisoned."""
    call = case.call(device, metadata_helper)
    poison = getattr(case.problem, "poison_unread", None)  # a family whose calls have inputs no output reads
    if poison is not None and case.category == "valid":
        poison(call)
    return call


def expected_outcome(case: Case, device="cpu", *, precision: str = "ieee", call=None) -> ExpectedOutcome:
    """What a correct target does on ``case`` (see Note [Checking a case]); ``precision``: the target's
    fp32 precision for this op (``Target.precision_for(op)``)."""
    if not isinstance(precision, str):  # a target's per-op dict passed whole (the bench's crash)
        raise TypeError(f"Expected precision to be one op's precision string but got precision={precision!r}; "
                        f"pass target.precision_for(op)")
    call = prepared_call(case, device) if call is None else call
    try:
        with strict_validation(True):
            ref = _run_oracle(case, call)
    except Exception as exc:  # the reference is the oracle of contracts
        cid = getattr(exc, "contract_id", None)
        if cid is not None:
            return ExpectedOutcome(CONTRACTS[cid].origin, type(exc).__name__, str(exc), cid)
        return ExpectedOutcome("error", type(exc).__name__, str(exc))
    inplace = call.inplace  # from the op's signature
    out_dtype = call.args[inplace].dtype if inplace is not None else call.args[0].dtype
    faithful = precision if (precision.startswith("tf32") and call.args[0].dtype == torch.float32) else True
    if get_family(case.family).mismatch is not None:  # its oracle's own bound judges it: keep what that reads
        return ExpectedOutcome("result", value=ref.value, defined=ref.defined, out_dtype=out_dtype,
                               baseline=(ref, faithful))
    with strict_validation(True):
        base = _run_oracle(case, call, faithful=faithful)
    defined, tail = ref.defined, getattr(case.problem, "tail_rows", range(0))
    if len(tail):  # padding rows of a replayed graph that a stale tail segment covers: no contract fixes them
        defined = defined.clone().index_fill_(0, torch.arange(tail.start, tail.stop, device=defined.device), False)
    return ExpectedOutcome("result", value=ref.value, defined=defined, baseline=base.baselines, out_dtype=out_dtype,
                           overflow_alternate=getattr(ref, "overflow_alternate", None))


# ---- running a target ----------------------------------------------------------------------------

@dataclass
class Observed:
    """What the target did (picklable): returned ``output`` (on the CPU; on the target's device with
    ``execute(..., to_host=False)``), or raised, or crashed.  ``message``: the error's text, or why
    a returned value is no output (Note [Odd outputs]), bounded (Note [Target text]);
    ``input_writes``: the read-only inputs it changed (Note [Read-only inputs]); ``gap_writes``: the
    arguments whose buffers it wrote outside their views (Note [Writes outside a view]); ``state_changes``:
    ``(switch, text)`` of the global settings it changed (Note [Global state])."""

    kind: str  # "ok" | "raise" | "crash"
    output: Optional[torch.Tensor] = None
    returned_inplace: bool = True
    exc_type: Optional[str] = None
    exc_qualname: Optional[str] = None
    message: Optional[str] = None
    frame: Optional[str] = None  # "module:function" of the raise in the target's own code (harness.buckets)
    input_writes: list = field(default_factory=list)
    gap_writes: list = field(default_factory=list)  # buffers written outside their views (Note [Writes outside a view])
    state_changes: list = field(default_factory=list)
    freed: list = field(default_factory=list)  # arguments whose memory it freed: nothing of the call was read


def execute(target, case: Case, device="cpu", *, call=None, to_host: bool = True) -> Observed:
    """Run ``target`` on a fresh copy of the case's call; never raises for the target's errors.

    Around the call: copies of the read-only inputs (compared after it) and a snapshot of torch's
    global settings (restored right after it, before anything is judged).
    ``to_host=False`` leaves the output on the device (Note [Verdicts beside the target])."""
    call = _copy_call(prepared_call(case, device) if call is None else call)
    fn = target.entry(case.op)
    # our kernels poison their own outputs; code we do not own gets NaN from torch.empty (harness.fresh_outputs)
    poison = target.poison(case.family) if target.poison is not None else nan_filled_allocations()
    watched, gaps = watch_inputs(call), watch_gaps(call)
    from kernel_oracle.harness import torch_state  # where used: a campaign's parent never runs a target

    settings = torch_state.snapshot()
    try:
        with signals_noted() as noted:  # Note [The target's BaseException]
            try:
                with poison:
                    ret = fn(*call.args, **call.kwargs)
                if device != "cpu" and torch.cuda.is_available():
                    torch.cuda.synchronize()
            finally:
                changed = torch_state.changes(settings, torch_state.snapshot())
                torch_state.restore(settings)
                changed += oracle_integrity.replaced()  # Note [The oracle's own code]: put back where it can
    except BaseException as exc:  # noqa: BLE001 - the target's raise is the observation; a signal's is not
        if not noted.targets(exc):
            raise
        if is_device_error(exc):  # the CUDA context is gone: nothing more can run in this process
            raise DeviceLost(f"{type(exc).__name__}: {_text_of(exc).splitlines()[0] if _text_of(exc) else ''}") \
                from exc
        observed = _observed_raise(exc)
    else:
        observed = None
    released = freed(call)  # before anything reads the call's tensors (Note [Read-only inputs])
    if released:
        observed = Observed(observed.kind if observed is not None else "ok", freed=released, state_changes=changed)
        return observed
    observed = observed if observed is not None else _observe(ret, call, to_host)
    observed.state_changes = changed
    observed.input_writes = input_writes(watched)
    observed.gap_writes = gap_writes(gaps)
    return observed


def _observed_raise(exc: BaseException) -> Observed:
    """The observation of an error the target's own code raised."""
    return Observed("raise", exc_type=type(exc).__name__,
                    exc_qualname=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    message=bounded(_text_of(exc)), frame=target_frame(exc.__traceback__))


class _HelperRaised(Exception):
    """The target's own metadata helper raised while its call was prepared (``exc``)."""

    def __init__(self, exc: BaseException):
        super().__init__(_text_of(exc))
        self.exc = exc


def _guarded(helper):
    """``helper`` with its errors marked as the target's (an SGLang release's metadata helper is the
    release's code: its error on a valid batch is a finding, never a harness error)."""
    if helper is None:
        return None

    def run(*args, **kwargs):
        with signals_noted() as noted:  # Note [The target's BaseException]
            try:
                return helper(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the target's error is the observation
                if not noted.targets(exc):
                    raise
                raise _HelperRaised(exc) from exc
    return run


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as inner:  # noqa: BLE001 - an exception whose __str__ raises still has a type
        return f"<str() of the exception raised {type(inner).__name__}>"


def _observe(ret, call, to_host: bool) -> Observed:
    """The observation of a call that returned ``ret`` (the in-place output, or ``ret`` itself)."""
    if call.inplace is not None:
        base = call.args[call.inplace]
        same = odd_output(ret, base) is None and ret.data_ptr() == base.data_ptr() and ret.shape == base.shape
        return Observed("ok", output=_keep(base, to_host), returned_inplace=same)
    like = next((a for a in call.args if isinstance(a, torch.Tensor)), None)
    odd = odd_output(ret, like)
    if odd is not None:
        return Observed("ok", output=None, returned_inplace=True, message=odd)
    return Observed("ok", output=_keep(ret, to_host))


def odd_output(ret, like: Optional[torch.Tensor]) -> Optional[str]:
    """Why ``ret`` is not an output that can be compared (Note [Odd outputs]), or None: a plain,
    strided tensor with data, on the device of ``like`` (the call's first tensor)."""
    if not isinstance(ret, torch.Tensor):
        return f"returned {printable(type(ret).__name__)}, not a tensor"
    if type(ret) is not torch.Tensor:
        return (f"returned a {printable(type(ret).__module__)}.{printable(type(ret).__qualname__)}, a torch.Tensor "
                f"subclass, not a plain tensor")
    if ret.is_meta:
        return "returned a meta tensor (a shape without data)"
    if ret.is_nested:
        return "returned a nested tensor, not a strided one"
    if ret.layout != torch.strided:
        return f"returned a tensor of layout {ret.layout}, not a strided one"
    if ret.is_quantized:
        return "returned a quantized tensor"
    if (short := storage_shortfall(ret)) is not None:  # its memory freed: reading it would fault
        return f"returned a tensor whose memory was freed ({short})"
    if like is not None and ret.device != like.device:
        return f"returned a tensor on {ret.device}; its inputs are on {like.device}"
    return None


def _keep(t: torch.Tensor, to_host: bool) -> torch.Tensor:
    """The observed output: a CPU copy, or (``to_host=False``) the tensor where it is (the call it
    belongs to is a private copy, so nothing else writes to it)."""
    return t.detach().cpu().clone() if to_host else t.detach()


# ---- verdict -------------------------------------------------------------------------------------

@dataclass
class Verdict:
    ok: bool
    kind: Optional[str] = None  # a finding kind when not ok
    message: str = ""
    ratio: Optional[float] = None
    figures: dict = field(default_factory=dict)
    expected: str = ""
    bucket: Optional[Any] = None  # harness.buckets.Bucket of a failure, from check_case
    state_changes: list = field(default_factory=list)  # (switch, text) per global setting the target changed
    consequence: Optional[str] = None  # accepted malformed metadata: its class (Note [Malformed consequences])
    rows: Optional[str] = None  # the rows that class names ("rows [3, 4]"), or None
    # the mutation kind of a malformed case whose failure a valid neighbour shows too: the verdict is
    # the neighbour's (Note [One defect through malformed input] in harness.through_malformed)
    seen_through: Optional[str] = None
    valid_problem: Optional[Any] = None  # that valid neighbour's problem, the case a campaign records


def _describe_expected(e: ExpectedOutcome, exact_errors: bool = True) -> str:
    if e.kind == "result":
        return "a result"
    if e.kind == "error" and not exact_errors:
        return f"{e.exc_type} (outside the contract table: its type, as upstream's own Python error)"
    if e.kind == "error":
        return f"{e.exc_type}({bounded(e.message or '', 2000)!r}) (outside the contract table: the oracle's own error)"
    return f"{e.exc_type}({e.message!r}) [{e.kind} contract {e.contract_id}]"


def judge(case: Case, expected: ExpectedOutcome, observed: Observed, *, call=None, device="cpu", repro: str = "",
          exact_errors: bool = True) -> Verdict:
    """Classify ``observed`` against ``expected`` (see Note [Checking a case]); a case whose output
    passes but whose target wrote a read-only input fails as a ``contract`` finding (Note
    [Read-only inputs]); the global settings it changed travel in ``state_changes``.
    ``exact_errors``: an error outside the contract table must have the oracle's text too (Note
    [Errors outside the table]); False for a target without our strict validation."""
    if observed.freed:  # nothing of the call could be read (Note [Read-only inputs])
        verdict = _write_verdict(case, observed.freed, _describe_expected(expected, exact_errors), freed=True)
        verdict.state_changes = list(observed.state_changes)
        return verdict
    verdict = _classify(case, expected, observed, call=call, device=device, repro=repro, exact_errors=exact_errors)
    if verdict.ok and observed.input_writes:
        verdict = _write_verdict(case, observed.input_writes, verdict.expected, outside_view=False)
    if verdict.ok and observed.gap_writes:
        verdict = _write_verdict(case, observed.gap_writes, verdict.expected, outside_view=True)
    verdict.state_changes = list(observed.state_changes)
    return verdict


def _raised(observed: Observed) -> str:
    return f"raised {printable(observed.exc_type or '?')}({observed.message!r})"


def _judge_error(case: Case, expected: ExpectedOutcome, observed: Observed, exp: str, exact_errors: bool) -> Verdict:
    """An error is expected: the same type and the same full text (bounded alike, Note [Target
    text]); for an error outside the contract table of a target without our validation, the type
    (Note [Errors outside the table])."""
    if observed.kind == "ok":
        if expected.kind == "strict":
            return Verdict(False, "validation-gap",
                           f"malformed metadata accepted ({case.mutation.kind if case.mutation else '-'}): "
                           f"expected {exp}", expected=exp)
        return Verdict(False, "contract", f"no error raised; expected {exp}", expected=exp)
    same_text = observed.message == bounded(expected.message or "")
    if observed.exc_type == expected.exc_type and (same_text or (expected.kind == "error" and not exact_errors)):
        return Verdict(True, expected=exp)
    if expected.kind == "strict" and not exact_errors:  # no upstream contract: rejecting it is all one can ask
        return Verdict(True, expected=exp, consequence="rejected")  # (Note [Malformed consequences])
    return Verdict(False, "contract", f"{_raised(observed)}; expected {exp}", expected=exp)


def _write_verdict(case: Case, writes: list, exp: str, *, outside_view: bool = False, freed: bool = False) -> Verdict:
    """The target changed memory it must only read: its read-only inputs (Note [Read-only inputs]), the
    buffer around an argument's view (Note [Writes outside a view]), or an argument's storage, freed; one
    finding naming the first."""
    name = writes[0].split(":", 1)[0]
    more = "\n  also: " + "\n  also: ".join(writes[1:8]) if len(writes) > 1 else ""
    what, why, cause = (
        ("freed the memory of", "a caller's tensors keep their storage; nothing of the call was read", "freed") if freed
        else ("wrote outside the view of", "a kernel writes only the elements of its output view; the rest of the "
              "buffer is other data", "wrote outside the view of") if outside_view
        else ("wrote its read-only input", "only the in-place output may change", "wrote its input"))
    verdict = Verdict(False, "contract", f"{what} {writes[0]} ({why}){more}", expected=exp)
    verdict.bucket = Bucket("contract", case.family, f"{cause} {name}")
    return verdict


def state_change_verdict(case: Case, switch: str, text: str) -> Verdict:
    """The finding of one global setting a target changed (Note [Global state]), or of something of the
    oracle's it replaced (switches ``oracle: ...``, Note [The oracle's own code]): kind ``contract``,
    bucketed by the setting, whatever values it went between."""
    if switch.startswith("oracle: "):
        verdict = Verdict(False, "contract", f"replaced what the oracle runs: {text}; the verdicts computed while it "
                                             f"was replaced are void", expected="the oracle's own code unchanged")
        verdict.bucket = Bucket("contract", case.family, f"replaced the oracle's {switch[len('oracle: '):]}")
        return verdict
    verdict = Verdict(False, "contract", f"global state changed: {text} (kernel-oracle restored it after the call; "
                                         f"a target leaves torch's process-wide settings as it found them)",
                      expected="torch's global settings unchanged")
    verdict.bucket = Bucket("contract", case.family, f"global state changed: {switch}")
    return verdict


def with_state_changes(case: Case, verdict: Verdict) -> Verdict:
    """``verdict``, or when it passes but its target changed a global setting, the finding of the
    first one (the single-case view of :func:`kernel_oracle.assert_matches` and ``repro``; a
    campaign records each setting once instead)."""
    if not verdict.ok or not verdict.state_changes:
        return verdict
    switch, text = verdict.state_changes[0]
    failed = state_change_verdict(case, switch, "; ".join(t for _, t in verdict.state_changes))
    failed.state_changes = list(verdict.state_changes)
    return failed


def _classify(case: Case, expected: ExpectedOutcome, observed: Observed, *, call, device, repro: str,
              exact_errors: bool) -> Verdict:
    """The verdict on the returned or raised value alone."""
    exp = _describe_expected(expected, exact_errors)
    if observed.kind == "crash":
        return Verdict(False, "crash", f"target crashed: {observed.message}; expected {exp}", expected=exp)
    if observed.kind == "raise" and observed.exc_type == "StreamOrderingHazard":  # a stream-ordering finding
        return Verdict(False, "stream", f"stream-ordering hazard: {observed.message}", expected=exp)
    if expected.kind != "result":
        return _judge_error(case, expected, observed, exp, exact_errors)
    # a result is expected
    if observed.kind == "raise":
        return Verdict(False, "contract", f"{_raised(observed)} on a valid input", expected=exp)
    if observed.output is None:  # Note [Odd outputs]: its own bucket per reason, covered by no other
        verdict = Verdict(False, "mismatch", f"target {observed.message}", expected=exp)
        verdict.bucket = Bucket("mismatch", case.family, f"target {observed.message}")
        return verdict
    call = prepared_call(case, device) if call is None else call
    if not observed.returned_inplace:
        return Verdict(False, "mismatch", "the in-place step did not return its base_output", expected=exp)
    if (own := get_family(case.family).resolve("mismatch")) is not None:  # its oracle's own bound (csgmv)
        why = own(expected.baseline, observed.output, expected.out_dtype, repro)
        if why is None:
            return Verdict(True, expected=exp)
        verdict = Verdict(False, "mismatch", why, float("inf"), expected=exp)
        if tuple(observed.output.shape) == tuple(expected.value.shape) and observed.output.dtype == expected.out_dtype:
            # the output's form is right: values differ (no region class: its rows are the family's own)
            verdict.bucket = Bucket("mismatch", case.family, "values", "", case.op, "",
                                    config_signature(case.problem)[1:])
        return verdict
    locate, route = get_family(case.family).resolve("locator")(call)  # the family's own words for an element
    actual = observed.output  # compared where it is (compare moves the reference there)
    cmp = compare(actual, expected.value, expected.defined, family=case.family,
                  baseline=None if expected.baseline is None else list(expected.baseline),
                  out_dtype=expected.out_dtype, locate=locate, repro=repro,
                  overflow_alternate=expected.overflow_alternate)
    figures = {"max_abs": cmp.err, "max_rel": cmp.worst_rel, "ratio": cmp.ratio, "where": cmp.where}
    if not cmp.ok:
        return Verdict(False, "mismatch", cmp.message, cmp.ratio, figures, expected_at(actual, expected.value, cmp, call))
    inplace = call.inplace
    if inplace is not None and route is not None:  # unrouted rows must be bit-identical
        before = call.args[inplace].detach()
        bad = changed_rows(actual, before, untouched_mask(route, before.shape[0]))
        if bad:
            where = {"token": bad[0], "head": None, "segment": None, "slot": None}
            return Verdict(False, "mismatch", changed_rows_message(bad) + (f"\nReproduce: {repro}" if repro else ""),
                           float("inf"), {"max_abs": None, "max_rel": None, "ratio": None, "where": where},
                           f"rows {bad[:8]} of base_output unchanged (bit-identical to before the call: no "
                           f"segment routes them)")
    return Verdict(True, ratio=cmp.ratio, figures=figures, expected=exp)


def check_case(target, case: Case, device="cpu", *, repro: str = "", call=None) -> Verdict:
    """The verdict of one case on ``target``, computed beside it on ``device`` (Note [Verdicts beside the
    target]): data generated there, oracle and comparison there, the output never copied to the host.
    A failure carries its root-cause bucket (``verdict.bucket``), computed once here, so no caller
    needs a tensor; harness errors propagate (a campaign's worker reports them).  pytest properties,
    the bug corpus and the campaigns (in process or in their worker) all check a case with this.
    ``call``: the call to run instead of one built from the case (a saved case file's tensors, moved
    to ``device`` by :func:`harness.saved_calls.call_on`)."""
    judged, observed = case, None
    try:
        call = (prepared_call(case, device, _guarded(getattr(target, "metadata_helper", None))) if call is None
                else call_on(call, device))
    except _HelperRaised as raised:  # the target's raise, judged against the same batch with our metadata
        judged = Case(dataclasses.replace(case.problem, metadata_source="ours"), case.mutation)
        call, observed = prepared_call(judged, device), _observed_raise(raised.exc)
    expected = expected_outcome(judged, device, precision=target.precision_for(case.op), call=call)
    observed = observed or execute(target, case, device, call=call, to_host=False)
    verdict = judge(case, expected, observed, call=call, device=device, repro=repro,
                    exact_errors=getattr(target, "strict", True))
    if verdict.kind == "validation-gap":  # what it did with what it accepted (harness.malformed)
        clean = Case(case.problem, None)
        clean_call = prepared_call(clean, device) if valid_part(case) is not None else None
        verdict.consequence, verdict.rows = consequence(
            case, call, observed, clean_call,
            lambda: expected_outcome(clean, device, precision=target.precision_for(case.op), call=clean_call))
        if verdict.rows:
            verdict.message += f"; {verdict.consequence}: {verdict.rows}"
        if verdict.consequence == "defined rows changed" and not getattr(target, "strict", True):
            from kernel_oracle.harness.through_malformed import valid_failure  # Note [One defect through malformed input]

            shown = valid_failure(case, call, clean_call,
                                  lambda problem: check_case(target, Case(problem, None), device, repro=repro))
            if shown is not None:
                return shown
    if not verdict.ok and verdict.bucket is None:
        verdict.bucket = bucket_of(case, verdict, observed=observed, expected=expected, call=call)
    return verdict


oracle_integrity.baseline()  # Note [The oracle's own code]: taken here, before this process imports any target
