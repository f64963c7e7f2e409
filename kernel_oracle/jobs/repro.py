"""One saved finding (or a case given as JSON) re-run against a target (``kernel-oracle repro``).

``kernel-oracle repro DIR/cases/<id>.pt --targets T`` loads the call's saved tensors (not a
regeneration: the exact bytes the campaign used), runs the target on them as a campaign does and prints
the verdict.  ``--case-json JSON`` rebuilds the call from the problem's seed instead (the form pytest failures
print).  As in a campaign (Note [Cases outside a campaign] in :mod:`kernel_oracle.fuzz.isolated`), the
target runs in a worker, never in this process, and a case it declines (SGLang's csgmv kernels and a
permutation row past ``x``) is refused in one line before anything of it runs.  ``--emit-script DIR``
also writes a standalone reproduction (:mod:`kernel_oracle.jobs.repro_script`) that needs only torch and
the target: the expected outcome is the reference's, computed here, and the script names the target's
entry point, for which the target is imported here (its call still runs only in the worker).

Note [Case files hold no code]
------------------------------
A case file travels (CI artifacts, issue attachments), so reading one must never run code: it is
loaded with ``torch.load(weights_only=True)``, whose unpickler builds only tensors, containers,
numbers and strings, plus the two metadata types allow-listed here (:data:`SAFE_TYPES`: plain
dataclasses of tensors and ints).  Anything else -- a pickle that would call a function, a
truncated or random file -- is refused with one line and exit code 2, before any of it is used.
The file written by campaigns (``fuzz/campaign.py``: ``torch.save`` of ``{"case", "entry", "args",
"kwargs", "inplace", "target", "device"}``) loads unchanged; its shape is checked after loading
(:func:`load_case_file`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kernel_oracle.harness.data_files import loads_json, read_text

__all__ = ["Reproduction", "ReproError", "SAFE_TYPES", "check_input", "load_case", "load_case_file", "reproduce"]

# what a weights-only load may build beyond tensors and plain data (Note [Case files hold no code])
SAFE_TYPES = ("kernel_oracle.reference.batch_info.LoRABatchInfo",
              "kernel_oracle.reference.vision_metadata.VisionAttentionMetadata")


class ReproError(ValueError):
    """A case file or argument that ``repro`` refuses (exit code 2, one line)."""


def _safe_types() -> list:
    from kernel_oracle.reference.batch_info import LoRABatchInfo
    from kernel_oracle.reference.vision_metadata import VisionAttentionMetadata

    return [LoRABatchInfo, VisionAttentionMetadata]


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split("\n")[:1]).strip() or type(exc).__name__
    return text[:200]


def load_case_file(path: str | os.PathLike, device: str = "cpu") -> dict:
    """The saved call of a ``.pt`` case file, loaded without running code (Note [Case files hold no code]).

    Returns ``{"case": dict, "entry": str, "args": tuple, "kwargs": dict, "inplace": int | None}``
    (plus whatever plain extras the file carries); raises :class:`ReproError` (one line) for a file
    that is missing, unreadable, not a torch file, holds anything but allow-listed types, or has
    another shape.
    """
    import pickle

    import torch

    path = Path(path)
    check_input(path=str(path))
    try:
        with torch.serialization.safe_globals(_safe_types()):
            saved = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ReproError(f"{path} was refused: it holds objects other than tensors, plain data and "
                         f"{', '.join(n.rsplit('.', 1)[1] for n in SAFE_TYPES)} (a case file never does; "
                         f"nothing in it was run): {_first_line(exc)}") from None
    except (RuntimeError, EOFError, OSError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            UnicodeDecodeError, MemoryError, OverflowError) as exc:
        raise ReproError(f"{path} is not a readable kernel-oracle case file (truncated or not written by "
                         f"torch.save): {type(exc).__name__}: {_first_line(exc)}") from None
    return _check_saved(saved, path)


def _check_saved(saved: object, path: Path) -> dict:
    import torch

    def bad(why: str) -> ReproError:
        return ReproError(f"{path} is not a kernel-oracle case file: {why}")

    if not isinstance(saved, dict):
        raise bad(f"expected a dict but it holds a {type(saved).__name__}")
    missing = [k for k in ("case", "entry", "args", "kwargs") if k not in saved]
    if missing:
        raise bad(f"it lacks the keys {missing}")
    if not isinstance(saved["case"], dict):
        raise bad(f"'case' is a {type(saved['case']).__name__}, not a dict")
    if not isinstance(saved["entry"], str):
        raise bad(f"'entry' is {saved['entry']!r}, not an entry point name")
    if not isinstance(saved["args"], (tuple, list)):
        raise bad(f"'args' is a {type(saved['args']).__name__}, not a tuple")
    if not isinstance(saved["kwargs"], dict) or not all(isinstance(k, str) for k in saved["kwargs"]):
        raise bad("'kwargs' is not a dict with string keys")
    inplace = saved.get("inplace")
    if inplace is not None and (isinstance(inplace, bool) or not isinstance(inplace, int)
                                or not 0 <= inplace < len(saved["args"])):
        raise bad(f"'inplace' is {inplace!r}, not None or an index into args")
    if not any(isinstance(a, torch.Tensor) for a in saved["args"]):
        raise bad("'args' holds no tensor")
    return dict(saved, args=tuple(saved["args"]), kwargs=dict(saved["kwargs"]), inplace=inplace)


def _case_from(data: object, source: str):
    from kernel_oracle.harness.check import case_from_dict

    if not isinstance(data, dict) or "problem" not in data:
        raise ReproError(f"{source} is not a case: expected {{'problem': ..., 'mutation': ...}}, got "
                         f"{type(data).__name__}")
    try:  # every field typed and sizes bounded (harness.problems.problem_from_dict)
        return case_from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ReproError(f"{source} is not a valid case: {type(exc).__name__}: {_first_line(exc)}") from None


def load_case(*, path: str | None = None, case_json: str | None = None, device: str = "cpu"):
    """(case, call or None): from a ``.pt`` file (its saved call), a ``.json`` file or a JSON string."""
    from kernel_oracle.harness.opinfo import OP_DB
    from kernel_oracle.harness.problems import Call

    if path is not None and str(path).endswith(".pt"):
        saved = load_case_file(path, device)
        case = _case_from(saved["case"], f"{path} ('case')")
        want = OP_DB[case.op].entry if case.op in OP_DB else None
        if want is not None and saved["entry"] != want:
            raise ReproError(f"{path} is inconsistent: its case is op {case.op!r} (entry {want}) but its call "
                             f"is entry {saved['entry']!r}")
        return case, Call(saved["entry"], saved["args"], saved["kwargs"], saved["inplace"])
    if path is not None:
        try:  # bounded: Note [Files as data] in harness/data_files.py
            data = loads_json(read_text(path), str(path))
        except OSError as exc:
            raise ReproError(f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ReproError(f"{path} is not JSON: {_first_line(exc)}") from None
        return _case_from(data, str(path)), None
    if case_json is not None:
        return _case_from(_json_case(case_json), "--case-json"), None
    raise ReproError("pass a saved case path (DIR/cases/<id>.pt) or --case-json JSON")


def _json_case(case_json: str):
    try:
        return loads_json(case_json, "--case-json")
    except ValueError as exc:
        raise ReproError(f"--case-json is not JSON: {_first_line(exc)}") from None


def check_input(*, path: str | None = None, case_json: str | None = None) -> None:
    """What :func:`reproduce` checks of its input before it looks at the device (which imports torch): the
    case file exists, the JSON parses; :class:`ReproError` (one line)."""
    if path is not None and not Path(path).is_file():
        raise ReproError(f"no such case file: {path}")
    if case_json is not None:
        _json_case(case_json)


def _device(device: str) -> str:
    from kernel_oracle.harness.device import configure_process, resolve_device

    try:
        device = resolve_device(device)
        configure_process(device)  # the target runs in this process: before any kernel import
    except (ValueError, RuntimeError) as exc:
        raise ReproError(str(exc)) from None
    return device


def _resolve(target, device: str, sglang_wheel: Optional[str]):
    """The target resolved in this process, for the script's entry point only (never called here)."""
    from kernel_oracle.fuzz.targets import TargetError, TargetSources, resolve_target

    try:
        tgt = resolve_target(target, device, sources=TargetSources(sglang_wheel=sglang_wheel))
    except TargetError as exc:
        raise ReproError(str(exc)) from None
    if not tgt.available:
        raise ReproError(f"target {str(target)!r} is unavailable: {tgt.reason}")
    return tgt


@dataclass(frozen=True)
class Reproduction:
    """One re-run: the ``verdict`` of ``case`` on ``target`` (a resolved Target, for a script; None
    without one), the ``call`` it ran and the ``expected`` outcome (what a standalone script needs)."""

    verdict: Any
    case: Any
    call: Any
    expected: Any
    target: Any


def _isolated_verdict(target, case, call, device: str, sglang_wheel: Optional[str]):
    """The verdict of ``case`` (its saved ``call``, or None) on ``target``, run in a worker as a campaign runs
    it (Note [Cases outside a campaign]); :class:`ReproError` for a target that cannot take it."""
    from kernel_oracle.fuzz.isolated import DeclinedCase, IsolatedTarget, WorkerError
    from kernel_oracle.fuzz.targets import TargetSources
    from kernel_oracle.harness.saved_calls import call_on

    with IsolatedTarget(target, device, sources=TargetSources(sglang_wheel=sglang_wheel)) as isolated:
        try:
            info = isolated.info
            if not info.get("available", True):
                raise ReproError(f"target {str(target)!r} is unavailable: {info.get('reason')}")
            if case.op not in (info.get("entry_points") or ()):
                raise ReproError(f"target {str(target)!r} has no entry point for op {case.op!r}; it has "
                                 f"{sorted(info.get('entry_points') or ())}")
            return isolated.check(case, None if call is None else call_on(call, "cpu"))  # the worker moves it back
        except DeclinedCase as exc:
            raise ReproError(str(exc)) from None
        except WorkerError as exc:
            raise ReproError(f"target {str(target)!r}: {_first_line(exc)}") from None


def reproduce(*, target, path: str | None = None, case_json: str | None = None, device: str = "auto",
              sglang_wheel: Optional[str] = None, script: bool = False) -> Reproduction:
    """Re-run one saved (``path``) or given (``case_json``) case on ``target`` (a spec string or
    TargetSpec) on ``device``, in a worker as a campaign does (see the module docstring); ``script``: also
    resolve the target here for a standalone script's entry point.  :class:`ReproError` (one line) for
    bad input, a target that cannot take the case, or a case it declines."""
    check_input(path=path, case_json=case_json)  # before the device (torch): a usage error answers at once
    device = _device(device)
    from kernel_oracle.harness.check import expected_outcome, prepared_call, with_state_changes
    from kernel_oracle.harness.saved_calls import call_on

    case, saved = load_case(path=path, case_json=case_json, device=device)  # refused files stop here
    call = saved
    if call is None:
        try:  # built here (our code, no target's): a case given as data may describe no call at all
            call = prepared_call(case, device)
        except Exception as exc:  # noqa: BLE001 - a bad case, never a traceback
            raise ReproError(f"the case cannot be built: {type(exc).__name__}: {_first_line(exc)}") from None
    verdict = with_state_changes(case, _isolated_verdict(target, case, saved, device, sglang_wheel))
    if not script:
        return Reproduction(verdict, case, call, None, None)
    tgt = _resolve(target, device, sglang_wheel)
    expected = expected_outcome(case, device, precision=tgt.precision_for(case.op), call=call_on(call, device))
    return Reproduction(verdict, case, call, expected, tgt)
