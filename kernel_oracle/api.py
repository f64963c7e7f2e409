"""The public API: check your own kernel against the oracle, inside your own tests.

Note [Public API]
-----------------
:func:`assert_matches` is the one call a kernel engineer needs::

    import kernel_oracle
    kernel_oracle.assert_matches("step_a_q", my_step_a_q, q_nope, B_buf, batch_info, full_K)

It is the harness's own check (:mod:`kernel_oracle.harness.check`, Note [Checking a case]) on inputs
the caller built, not a second implementation of it:

0. the arguments are bound to the op's signature first (Note [Binding the call]);
1. the float64 oracle runs on a copy of the inputs (strict validation by default).  When it raises,
   the user's function must raise the same exception type with the same full text: a contract
   error (docs/semantics.md#error-contracts-and-their-order: the upstream messages are contracts) or any other error of the oracle on these
   inputs (with ``strict=False``, only the type of the latter: Note [Errors outside the table] in
   :mod:`kernel_oracle.harness.check`); when it returns, it also yields the same-dtype baseline (the oracle's faithful mode, in
   TF32 for ``precision="tf32"``);
2. the user's function runs on another copy (their tensors are never modified), with torch's global
   settings restored after it and its read-only inputs compared after it (Note [Checking a case]);
3. the verdict: :func:`kernel_oracle.reference.tolerance.compare` over the defined region only
   (``err <= K * baseline_err + floor``), rows that no segment routes bit-identical for the in-place
   steps, shape and dtype before values; a returned value that is no plain tensor with data
   (Note [Odd outputs]), a written read-only input or a changed global setting fail it too.

A failure raises :class:`AssertionError` in ``torch.testing.assert_close``'s layout plus the
locator (token, head, segment, slot) and a ``Reproduce:`` line: the inputs are saved once with
``torch.save`` (under ``$KERNEL_ORACLE_REPRO_DIR``, default a private directory this process makes
once with ``tempfile.mkdtemp``; never written through a symlink nor over another file; SGLang's
metadata objects as our same-field mirrors) and :func:`replay` re-runs the check from that file,
loading it weights-only.

Note [Binding the call]
-----------------------
A check that cannot fail is worse than none.  Called the wrong way -- an argument missing,
misspelled, given twice, one too many -- the oracle raises Python's own ``TypeError``, and so does
any function called the same way: comparing the two would pass a kernel that is always wrong.
So :func:`assert_matches` binds its arguments to the op's signature before it calls anything (the
oracle's parameters: names, order, defaults; the vision op's optional keywords
``sequence_lengths`` and ``max_seqlen`` stay absent unless given, since their absence is a
contract) and raises ``TypeError`` naming the argument and the signature: a usage error of the
test.  A batch info that is a tensor, a number or a container (an argument in another one's
place) and a data tensor without data (``device="meta"``) are usage errors too.

``strict=False`` is for third-party kernels that do not implement our strict validation (SGLang's
own): the oracle then runs with upstream semantics (the per-call ``strict=False`` of every oracle),
so malformed metadata that upstream accepts is compared instead of demanded to raise.

For property tests, :func:`materialize` turns a problem or a case drawn from
:mod:`kernel_oracle.strategies` into tensors on a device (a :class:`~kernel_oracle.harness.problems.Call`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import inspect
import io
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch

from kernel_oracle.harness.check import Case, Verdict, execute, expected_outcome, judge, with_state_changes
from kernel_oracle.harness.opinfo import OP_DB, op_info
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.harness.problems import Call
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.problems import materialize as _materialize_problem
from kernel_oracle.harness.targets import PRECISIONS, Target
from kernel_oracle.reference.batch_info import LoRABatchInfo
from kernel_oracle.reference.vision_metadata import VisionAttentionMetadata

__all__ = ["OPS", "PRECISIONS", "REPRO_DIR_ENV", "Verdict", "assert_matches", "materialize", "replay"]

# step_a_q, step_b_q, step_a_v, step_b_v, q_side_fused, v_side_fused, vision, csgmv_shrink, csgmv_expand
OPS = tuple(OP_DB)
REPRO_DIR_ENV = "KERNEL_ORACLE_REPRO_DIR"

Problem = Union[LoRAProblem, VisionProblem, CsgmvProblem]


@dataclass(frozen=True)
class _GivenInputs:
    """What :class:`~kernel_oracle.harness.check.Case` needs of a problem when the caller built the
    tensors: the op and its family (no seed, so no regeneration: the inputs are saved instead)."""

    op: str
    family: str
    dtype: str


def assert_matches(op: str, fn: Callable[..., Any], /, *args: Any, precision: str = "ieee", strict: bool = True,
                   repro: Optional[str] = None, **kwargs: Any) -> Verdict:
    """Assert that ``fn(*args, **kwargs)`` computes what the oracle of ``op`` computes.

    ``op``: one of :data:`OPS`; ``args``/``kwargs``: the call in SGLang's signature, e.g. for
    ``"step_a_q"`` ``(q_nope (S,H,qk), B_buf (L,H*FULL_K,R), batch_info, FULL_K)`` -> ``(S,H,R)``;
    for ``"step_b_q"`` ``(q_lora_a (S,H,R), A_buf (L,R,C), batch_info, base_output (S,H,C))``
    updated in place and returned; for ``"vision"`` ``(q, k, v, cu_seqlens, bsz, seq_len,
    softmax_scale=None, forward_metadata=None, **kwargs)`` with q/k/v ``(T,H,D)`` or ``(b,s,H,D)``.
    ``precision``: how ``fn`` runs fp32 matmuls: ``"ieee"`` (exact fp32 products), ``"tf32"`` (TF32,
    Triton's ``tl.dot`` default on NVIDIA GPUs; either operand rounding passes) or one TF32 rounding,
    ``"tf32-rne"`` / ``"tf32-trunc"`` (:data:`PRECISIONS`).  ``strict``: whether ``fn`` implements our strict validation
    (Note [Public API]).  ``repro``: the line printed under a failure (default: save the inputs and
    print a :func:`replay` command).  ``precision``, ``strict`` and ``repro`` are therefore not
    passed on to ``fn``.

    Returns the :class:`~kernel_oracle.harness.check.Verdict` (``ratio``: error / allowance) on
    success; raises :class:`AssertionError` (Note [Public API]) when ``fn`` is wrong, and
    ``ValueError``/``TypeError`` naming the argument when the arguments of this call are (a weight
    buffer and an activation in each other's positions included: :func:`_check_positions`).  Its
    frames are hidden from pytest's traceback, so a failure shows its message first.
    """
    __tracebackhide__ = True  # noqa: F841 - read by pytest
    info = op_info(op)  # ValueError naming the valid ops
    if not callable(fn):
        raise TypeError(f"Expected a callable with the signature of {info.entry} but got fn={fn!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is unknown; the only valid values are {list(PRECISIONS)} "
                         "(pass 'tf32' when fn runs fp32 matmuls in TF32)")
    if not isinstance(strict, bool):
        raise TypeError(f"Expected strict to be True or False but got strict={strict!r}")
    if repro is not None and not isinstance(repro, str):
        raise TypeError(f"Expected repro to be a str or None but got repro={repro!r}")
    call = _bind(op, args, kwargs)  # TypeError / ValueError: a usage error of the test, before anything runs
    verdict = _check(op, fn, call, precision=precision, strict=strict)
    if verdict.ok:
        return verdict
    if repro is None:
        repro = _save_repro(op, fn, call, precision=precision, strict=strict)
    lines = [verdict.message,
             f"Finding: {verdict.kind} ({_name_of(fn)} as {op!r}, precision={precision!r}, "
             f"strict validation {'on' if strict else 'off'}); expected {verdict.expected}"]
    if repro:
        lines.append(f"Reproduce: {repro}")
    raise AssertionError("\n".join(lines))


# the oracles' own switches, not part of the entry point's signature
_ORACLE_SWITCHES = ("faithful", "strict")


class _Absent:
    """The default of an optional keyword whose absence means something (vision's ``max_seqlen``)."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()
# values that are never a LoRA batch info object (an argument passed in another one's place)
_NOT_BATCH_INFO = (torch.Tensor, int, float, complex, str, bytes, list, tuple, dict, type(None))


def _entry_signature(op: str) -> inspect.Signature:
    """The entry point's signature (Note [Binding the call]): names, order and defaults from the op's
    oracle, without the oracle's own switches; its ``**kwargs`` become the keywords the op's row of
    :data:`kernel_oracle.reference.signatures.SIGNATURES` names, each optional and absent by default."""
    info = OP_DB[op]
    params = [p for p in inspect.signature(info.oracle).parameters.values()
              if p.name not in _ORACLE_SWITCHES and p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = {p.name for p in params}
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=_ABSENT)
               for k in info.signature.keywords if k not in named]
    return inspect.Signature(params)


def _bind(op: str, args: tuple, kwargs: dict) -> Call:
    """The call of ``args``/``kwargs`` bound to the op's signature (Note [Binding the call]):
    positional parameters in order, keywords only when given; ``TypeError`` naming the argument and
    the expected signature for a missing, extra, repeated or misspelled one; ``ValueError`` for a
    data tensor without data (meta)."""
    __tracebackhide__ = True  # noqa: F841 - read by pytest
    info = OP_DB[op]
    sig = _entry_signature(op)

    def refuse(why: str) -> TypeError:
        return TypeError(f"assert_matches({op!r}, fn, ...): {why}; the signature of {op} is {info.entry}{sig} "
                         f"(precision=, strict= and repro= are assert_matches' own)")

    unknown = [k for k in kwargs if k not in sig.parameters]
    if unknown:  # before a missing one: the misspelling is the mistake to name
        close = [p for p in sig.parameters if p.startswith(unknown[0]) or unknown[0].startswith(p)] \
            or difflib.get_close_matches(unknown[0], list(sig.parameters), n=1)
        raise refuse(f"got an unexpected keyword argument {unknown[0]!r}"
                     + (f" (did you mean {close[0]!r}?)" if close else ""))
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise refuse(str(exc)) from None
    given = bound.arguments
    params = info.signature.params
    args = tuple(given[p] for p in params)
    inplace = info.inplace_arg if info.inplace_arg is None or args[info.inplace_arg] is not None else None
    call = Call(info.entry, args, {k: v for k, v in given.items() if k not in params}, inplace)  # None: fresh output
    bi = info.signature.batch_info
    if bi is not None and isinstance(given[bi], _NOT_BATCH_INFO):
        raise TypeError(f"assert_matches({op!r}, fn, ...): {bi} is a {type(given[bi]).__name__}, not a batch info "
                        f"object (LoRABatchInfo's fields: seg_indptr, weight_indices, lora_ranks, scalings, ...); "
                        f"the signature of {op} is {info.entry}{sig}")
    for name in info.signature.data:
        value = given[name]
        if isinstance(value, torch.Tensor) and value.is_meta:
            raise ValueError(f"assert_matches({op!r}, fn, ...): {name} is a meta tensor (a shape without data), "
                             f"which the oracle cannot compute on; pass tensors on the CPU or a GPU")
    _check_positions(op, given, sig)
    return call


def _check_positions(op: str, given: dict, sig: inspect.Signature) -> None:
    """``ValueError`` when a LoRA weight buffer (``*_buf``, ``(L, ...)`` with ``L`` the batch info's
    slot count ``len(lora_ranks)``) and an activation sit in each other's positions: the buffer's
    first dimension is not ``L`` and the activation's is (a malformed buffer alone is left to the
    contract check, which judges it)."""
    __tracebackhide__ = True  # noqa: F841 - read by pytest
    info = OP_DB[op]
    ranks = getattr(given.get(info.signature.batch_info or ""), "lora_ranks", None)
    if ranks is None or not hasattr(ranks, "__len__"):
        return
    slots = len(ranks)
    params = list(info.signature.params)
    tensors = {n: v for n, v in given.items() if n in info.signature.data and isinstance(v, torch.Tensor) and v.dim() == 3}
    for buf in (n for n in tensors if n.endswith("_buf") and tensors[n].shape[0] != slots):
        other = next((n for n in tensors if not n.endswith("_buf") and tensors[n].shape[0] == slots), None)
        if other is not None:
            raise ValueError(f"assert_matches({op!r}, fn, ...): {buf} (argument {params.index(buf) + 1}) has shape "
                             f"{tuple(tensors[buf].shape)}, but {buf} is (L, ...) with L = {slots} LoRA slots "
                             f"(len(batch_info.lora_ranks)), and {other} (argument {params.index(other) + 1}, shape "
                             f"{tuple(tensors[other].shape)}) has L rows: are {other} and {buf} swapped? The "
                             f"signature of {op} is {info.entry}{sig}")


def _check(op: str, fn: Callable[..., Any], call: Call, *, precision: str, strict: bool) -> Verdict:
    """The harness's expected_outcome / execute / judge on a call the caller built."""
    __tracebackhide__ = True  # noqa: F841 - read by pytest
    info = OP_DB[op]
    tensors = [a for a in call.args if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else "-"
    case = Case(_GivenInputs(op, info.family, dtype))
    # lenient: the oracles' own per-call switch; expected_outcome's strict default then yields to it
    oracle_call = call if strict else Call(call.entry, call.args, {**call.kwargs, "strict": False}, call.inplace)
    expected = expected_outcome(case, device, precision=precision, call=oracle_call)
    target = Target(_name_of(fn), {op: fn}, precision=precision, strict=strict)
    observed = execute(target, case, str(device), call=call)
    return with_state_changes(case, judge(case, expected, observed, call=call, device=str(device), exact_errors=strict))


def _name_of(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _importable_spec(fn: Callable[..., Any]) -> Optional[str]:
    """``module:qualname`` when importing it gives back ``fn`` (not for lambdas, locals, partials)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or module == "__main__" or not qualname or "<" in qualname:
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if obj is fn else None


def _resolve_spec(spec: str) -> Callable[..., Any]:
    module, _, qualname = spec.partition(":")
    if not module or not qualname:
        raise ValueError(f"Expected fn as 'package.module:function' but got fn={spec!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _portable(value: Any) -> Any:
    """SGLang's ``LoRABatchInfo`` / ``VisionAttentionMetadata`` -> our mirrors (same field names), so
    that :func:`replay` can load the file weights-only (it builds no other class: no code runs)."""
    for cls in (LoRABatchInfo, VisionAttentionMetadata):
        fields = dataclasses.fields(cls)
        required = [f.name for f in fields if f.default is dataclasses.MISSING]
        if not isinstance(value, cls) and type(value).__name__ == cls.__name__ \
                and all(hasattr(value, n) for n in required):
            return cls(**{f.name: getattr(value, f.name) for f in fields if hasattr(value, f.name)})
    return value


def _save_repro(op: str, fn: Callable[..., Any], call: Call, *, precision: str, strict: bool) -> str:
    """Save the inputs once (content-addressed, never overwritten) and return the replay line."""
    payload = {"op": op, "args": tuple(_portable(a) for a in call.args),
               "kwargs": {k: _portable(v) for k, v in call.kwargs.items()}, "precision": precision, "strict": strict}
    buf = io.BytesIO()
    try:
        torch.save(payload, buf)
    except Exception as exc:  # noqa: BLE001 - a repro that cannot be saved is reported, not fatal
        return f"(the inputs could not be saved: {type(exc).__name__}: {exc}; rerun this test)"
    data = buf.getvalue()
    try:
        folder = _repro_dir()
        path = folder / f"{op}-{hashlib.sha256(data).hexdigest()[:16]}.pt"
        _write_new(path, data)
    except OSError as exc:
        return f"(the inputs could not be saved: {exc}; set {REPRO_DIR_ENV} to a writable folder)"
    spec = _importable_spec(fn)
    fn_arg = repr(spec) if spec else "<your function>"
    return f"python -c \"import kernel_oracle; kernel_oracle.replay({str(path)!r}, {fn_arg})\""


_private_repro_dir: Optional[Path] = None  # made once per process (tempfile.mkdtemp) when REPRO_DIR_ENV is unset


def _repro_dir() -> Path:
    """``$KERNEL_ORACLE_REPRO_DIR`` (created if absent), else this process's private directory."""
    global _private_repro_dir
    chosen = os.environ.get(REPRO_DIR_ENV)
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)
    if _private_repro_dir is None or not _private_repro_dir.is_dir():
        _private_repro_dir = Path(tempfile.mkdtemp(prefix="kernel-oracle-repro-"))
    return _private_repro_dir


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (mode 0600), never through a symlink nor over another
    file; a regular file already there with the same bytes is the same repro (names are content
    hashes)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        if path.is_symlink() or not path.is_file() or path.read_bytes() != data:
            raise FileExistsError(f"{path} exists and is not this repro (a symlink or another file); "
                                  f"nothing was written") from None
        return
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def replay(path: Union[str, os.PathLike], fn: Union[Callable[..., Any], str]) -> Verdict:
    """Re-run a failed :func:`assert_matches` on the inputs it saved at ``path``.

    ``fn``: the function to check, a callable or ``"package.module:function"``.  The file is loaded
    weights-only (tensors, plain data and our two metadata types; nothing in it runs).  Tensors load
    on their saved device, or on the CPU without CUDA.  Raises the same :class:`AssertionError`
    while the bug is there; returns the verdict once it is fixed.
    """
    if isinstance(fn, str):
        fn = _resolve_spec(fn)
    try:
        with torch.serialization.safe_globals([LoRABatchInfo, VisionAttentionMetadata]):
            saved = torch.load(path, map_location=None if torch.cuda.is_available() else "cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "Unsupported global" in ln] or [type(exc).__name__]
        first = lines[0]
        raise ValueError(f"{path} was refused: it holds objects other than tensors, plain data, LoRABatchInfo and "
                         f"VisionAttentionMetadata (nothing in it was run): {first}") from None
    if not isinstance(saved, dict) or not {"op", "args", "kwargs", "precision", "strict"} <= set(saved):
        raise ValueError(f"{path} is not a file saved by kernel_oracle.assert_matches")
    return assert_matches(saved["op"], fn, *saved["args"], precision=saved["precision"], strict=saved["strict"],
                          repro=f"kernel_oracle.replay({str(path)!r}, ...)", **saved["kwargs"])


def materialize(problem: Union[Problem, Case], device: Union[str, torch.device] = "cpu") -> Call:
    """The tensors of a problem (or of a case: the problem with its metadata mutation applied) on
    ``device``, as a :class:`~kernel_oracle.harness.problems.Call`: ``call.args``/``call.kwargs`` in
    the entry point's order, ready for ``assert_matches(problem.op, fn, *call.args, **call.kwargs)``.
    The same problem gives the same bytes on every run (the tensors come from its ``seed``)."""
    if isinstance(problem, Case):
        return problem.call(device)
    if not isinstance(problem, (LoRAProblem, VisionProblem, CsgmvProblem)):
        raise TypeError("Expected a LoRAProblem, VisionProblem, CsgmvProblem or Case (from kernel_oracle.strategies) "
                        f"but got problem={problem!r}")
    return _materialize_problem(problem, device)
