"""``kernel-oracle repro --emit-script DIR``: a finding as a standalone script for an upstream issue.

Note [Standalone repro]
-----------------------
A maintainer should be able to reproduce a finding with torch and their kernel alone, without
installing kernel-oracle.  :func:`emit_script` writes two files to ``DIR``:

* ``<name>.tensors.pt``: a flat ``{name: tensor}`` dict (``torch.load(weights_only=True)`` reads
  it; no allow-list, no code): every tensor of the call exactly as the campaign saved it (views keep
  their strides and storage offsets: offsets are counted from each tensor's data pointer), the
  float64 expectation ``expected`` and its ``defined`` mask, and, for in-place steps, the rows no
  segment routes (``untouched``), which must come back bit-identical;
* ``<name>.json``: the data: the call's structure (scalars inline; metadata objects rebuilt as
  ``types.SimpleNamespace`` with the same fields: every API duck-types them), the target as
  ``module:function``, the expected outcome (a result, or an exception type and exact text), the
  tolerance with its numbers inlined (docs/semantics.md#tolerance-rule: ``err <= K * err(baseline) + floor``
  evaluated at emit time, or the assert_close table's ``rtol``/``atol``) and the case;
* ``<name>.py``: the checks that the suite's verdict makes, reading the two files beside it.

Note [The script is data]
-------------------------
The target spec, the case and every message come from a campaign, a case file or a command line,
and a maintainer runs the script: none of that text may become code.  So the script is the same
fixed text for every finding (its only varying part, the file stem, is reduced to
``[A-Za-z0-9_.-]`` and enters only as a ``repr`` literal outside any docstring), and everything
else travels in ``<name>.json``, read with ``json.load``.  The files are created new
(``O_EXCL | O_NOFOLLOW``): an existing file or a planted symlink is refused, unless ``force``, which
removes it (the link, never what it points to) and writes a fresh file.

The script exits 1 when the finding reproduces, 0 when the target passes, 2 when it cannot run
(target not importable).  A target that lives only inside kernel-oracle (a mutant, an adapter
closure) gets no default ``TARGET``; the script then asks for ``--targets module:function``.

Note [Where the script finds its target]
----------------------------------------
The script runs as printed (``python /abs/DIR/<name>.py``) from any folder, so it records where its
target was found rather than relying on where it is run: a user's module by the folder that holds it
(``module_dir``, put first on ``sys.path``: ``python DIR/x.py`` puts ``DIR`` there, not the current
folder), and the spec it was tested as (``target_spec``, with ``--sglang-wheel`` as ``sglang_wheel``).
When ``TARGET`` does not import (a release's file, ``sglang.srt.lora...``, where SGLang is not
installed), the script asks kernel-oracle, when it is installed, to resolve ``target_spec`` as the
campaign did: a release from the wheel cache (or ``sglang_wheel``), loaded standalone, never installed.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import torch

__all__ = ["ScriptError", "emit_script"]


class ScriptError(ValueError):
    """The finding cannot be written as a standalone script (one line)."""


def _encode(value, key: str, tensors: dict):
    """JSON-able description of one argument; tensors go to ``tensors`` under ``key``."""
    if isinstance(value, torch.Tensor):
        tensors[key] = value
        return {"tensor": key}
    if value is None or isinstance(value, (bool, int, str)):
        return {"value": value}
    if isinstance(value, float):
        return {"value": value if math.isfinite(value) else repr(value), "float": True}
    if isinstance(value, (list, tuple)):
        return {"list": [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)],
                "tuple": isinstance(value, tuple)}
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return {"object": type(value).__name__,
                "fields": {k: _encode(v, f"{key}.{k}", tensors) for k, v in fields.items()}}
    raise ScriptError(f"{key} is a {type(value).__name__}, which a standalone script cannot rebuild")


def _module_dir(target_path: str | None) -> str | None:
    """The folder the script puts first on ``sys.path`` to import ``target_path`` (a user's module, found
    where kernel-oracle found it: Note [Modules beside the user]); None for kernel-oracle's own code and for
    a module no folder holds here (a release's file, loaded from its wheel: Note [Where the script finds its
    target])."""
    from kernel_oracle.fuzz.targets.user_modules import module_root

    module = (target_path or "").partition(":")[0]
    if not module or module.split(".")[0] in ("kernel_oracle", "torch", "triton"):
        return None
    return module_root(module)


def _target_path(target, spec, op: str) -> tuple[str | None, str]:
    """(``module[:attr]`` the script imports, or None; a note for the script's header)."""
    from kernel_oracle.harness.targets import TargetSpec

    parsed = TargetSpec.parse(spec)
    spec = str(parsed)
    if parsed.kind == "module":
        return parsed.base, f"the target spec {spec!r}, resolved as kernel-oracle resolves module specs"
    fn = target.entry(op)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if (not module or "<locals>" in qualname or "<lambda>" in qualname or module.startswith("kernels_mutant_")
            or parsed.kind == "mutant"):  # a csgmv mutant is a patched release file: no release has it
        return None, (f"target {spec!r} exists only inside kernel-oracle ({module}.{qualname}); "
                      "pass --targets module:function of the kernel to test")
    origin = getattr(sys.modules.get(module), "__kernel_oracle_origin__", None)
    if origin:  # a release's own file, loaded standalone from its wheel: name the module as the release does
        configuration = target.reason.partition("configuration: ")[2]
        return f"{origin.split()[0]}:{qualname}", (
            f"the entry point of target {spec!r}: {origin}; import it where that release is installed"
            + (f", in the environment {configuration}" if configuration else ""))
    return f"{module}:{qualname}", f"the entry point of target {spec!r}"


def _rule(expected, family: str) -> dict:
    """The tolerance of this output with its numbers inlined (the allowance does not depend on the
    target's output: computed here on the reference rounded to the output dtype)."""
    from kernel_oracle.reference.tolerance import ASSERT_CLOSE_TOLERANCES, ERROR_MULTIPLIER, compare

    out_dtype = expected.out_dtype
    probe = compare(expected.value.to(out_dtype), expected.value, expected.defined, family=family,
                    baseline=expected.baseline, out_dtype=out_dtype)
    if probe.baseline_err is not None:
        k = ERROR_MULTIPLIER[family]
        floor = probe.allowed - k * probe.baseline_err
        return {"allowed": probe.allowed, "text": f"err <= {k:g} * baseline_err + floor = {k:g} * "
                                                  f"{probe.baseline_err:.6g} + {floor:.6g} = {probe.allowed:.6g}"}
    rtol, atol = ASSERT_CLOSE_TOLERANCES.get(out_dtype, ASSERT_CLOSE_TOLERANCES[torch.float32])
    return {"rtol": rtol, "atol": atol, "text": f"|a - r| <= {atol:g} + {rtol:g} * |r| (assert_close table)"}


def _untouched_rows(case, call) -> torch.Tensor | None:
    """Rows of the in-place output that no segment routes (a family whose locator gives the call's routing:
    LoRA); None when not applicable."""
    from kernel_oracle.harness.family import get_family
    from kernel_oracle.harness.opinfo import OP_DB

    inplace = OP_DB[case.op].inplace_arg
    locator = get_family(case.family).resolve("locator")
    route = locator(call)[1] if inplace is not None and locator is not None else None
    if route is None:  # no routing, or one unknowable: no untouched-row check (as the suite's judge)
        return None
    untouched = torch.ones(call.args[inplace].shape[0], dtype=torch.bool)
    untouched[route.rows] = False
    if route.undefined_rows.numel():
        untouched[route.undefined_rows] = False
    if route.all_undefined:
        untouched[:] = False
    return untouched


def _new_file(path: Path, force: bool):
    """A new file at ``path`` for writing bytes (Note [The script is data]); ``ScriptError`` when
    something is there and not ``force``."""
    if force and (path.is_symlink() or path.exists()):
        if path.is_dir() and not path.is_symlink():
            raise ScriptError(f"{path} is a directory; move it away")
        path.unlink()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        what = "a symlink" if path.is_symlink() else "a file"
        raise ScriptError(f"{path} exists ({what}); pass --force to replace it or another directory") from None
    return os.fdopen(fd, "wb")


def emit_script(out_dir, *, name: str, case, call, expected, target, target_spec: str,
                verdict=None, force: bool = False, sglang_wheel: str | None = None) -> tuple[Path, Path]:
    """Write ``<name>.py``, ``<name>.json`` and ``<name>.tensors.pt`` to ``out_dir`` (refusing to
    replace a file or follow a symlink there unless ``force``); returns the script's and the
    tensors' paths.  ``sglang_wheel``: where the release of ``target_spec`` came from (``--sglang-wheel``),
    recorded for the script (Note [Where the script finds its target])."""
    from kernel_oracle._version import __version__
    from kernel_oracle.harness.opinfo import OP_DB

    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "case"
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScriptError(f"cannot create {out}: {exc.strerror or exc}") from None
    if not out.is_dir():
        raise ScriptError(f"{out} is not a directory")
    tensors: dict = {}
    structure = {"args": [_encode(a, f"arg{i}", tensors) for i, a in enumerate(call.args)],
                 "kwargs": {k: _encode(v, f"kw_{k}", tensors) for k, v in call.kwargs.items()}}
    info = OP_DB[case.op]
    expect: dict = {"kind": expected.kind}
    if expected.kind == "result":
        tensors["expected"] = expected.value.detach().cpu()
        tensors["defined"] = expected.defined.detach().cpu()
        expect.update(_rule(expected, case.family), out_dtype=str(expected.out_dtype).replace("torch.", ""))
        untouched = _untouched_rows(case, call)
        if untouched is not None:
            tensors["untouched"] = untouched
    else:
        expect.update(type=expected.exc_type, message=expected.message,
                      described=verdict.expected if verdict is not None else expected.kind)
    tensors = {k: (v.detach().cpu() if k in ("expected", "defined", "untouched") else v.detach())
               for k, v in tensors.items()}
    target_path, target_note = _target_path(target, target_spec, case.op)
    files = {suffix: out / f"{stem}{suffix}" for suffix in (".py", ".json", ".tensors.pt")}
    data = {"target": target_path, "target_note": target_note, "tensors": files[".tensors.pt"].name,
            "target_spec": str(target_spec), "module_dir": _module_dir(target_path),
            "sglang_wheel": str(Path(sglang_wheel).expanduser().resolve()) if sglang_wheel else None,
            "meta": {"op": case.op, "entry": info.entry, "inplace": info.inplace_arg, "family": case.family,
                     "case": case.to_dict(), "suite_version": __version__,
                     "finding": verdict.kind if verdict is not None and not verdict.ok else None},
            "call": structure, "expect": expect}
    script = _TEMPLATE.replace("@STEM@", repr(stem))
    try:
        handles = {suffix: _new_file(path, force) for suffix, path in files.items()}
    except OSError as exc:
        raise ScriptError(f"cannot write to {out}: {exc.strerror or exc}") from None
    try:
        with handles[".tensors.pt"] as fh:
            torch.save(tensors, fh)
        with handles[".json"] as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
        with handles[".py"] as fh:
            fh.write(script.encode("utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot write to {out}: {exc.strerror or exc}") from None
    return files[".py"], files[".tensors.pt"]


_TEMPLATE = '''#!/usr/bin/env python3
"""Standalone reproduction of a kernel-oracle case; needs only torch and the target (a release that is not
installed is loaded from its wheel by kernel-oracle, when that is installed).

The case, the target and what to expect are in the JSON file beside this script (STEM.json), the
tensors in STEM.tensors.pt (weights-only); kernel-oracle rebuilds the case with
`kernel-oracle repro --case-json '<the JSON's meta.case>' --targets T`.

Run:   python STEM.py [--targets package.module:function] [--device cpu|cuda]
Exit:  1 the finding reproduces, 0 the target passes, 2 the script cannot run.
"""

import argparse
import importlib
import inspect
import json
import os
import sys
import types
from pathlib import Path

import torch

STEM = @STEM@
with open(Path(__file__).with_name(STEM + ".json"), encoding="utf-8") as _fh:
    DATA = json.load(_fh)
TARGET = DATA["target"]
TENSORS = DATA["tensors"]
META = DATA["meta"]
CALL = DATA["call"]
EXPECT = DATA["expect"]


def load_target(spec):
    """``package.module`` (its entry point by name) or ``package.module:attr`` (a function, an object
    with the entry point, or a class instantiated without arguments)."""
    module_name, _, attr = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        obj = obj()
    fn = getattr(obj, META["entry"], None)
    if callable(fn):
        return fn
    if callable(obj) and attr:
        return obj
    raise AttributeError(f"{spec} has no {META['entry']}")


def from_kernel_oracle(spec, device):
    """``(entry point, None)`` of target spec ``spec`` as kernel-oracle resolves it (a release from its
    wheel, never installed), or ``(None, why not)``."""
    if not spec:
        return None, "no target spec recorded"
    try:
        from kernel_oracle.fuzz.targets import TargetSources, resolve_target
    except ImportError as exc:
        return None, f"kernel-oracle, which loads {spec} from its wheel, is not importable ({exc})"
    target = resolve_target(spec, device, sources=TargetSources(sglang_wheel=DATA.get("sglang_wheel")))
    if not target.available:
        return None, f"{spec} is unavailable: {target.reason}"
    if not target.has(META["op"]):
        return None, f"{spec} has no {META['op']}"
    return target.entry(META["op"]), None


def build(desc, tensors):
    if "tensor" in desc:
        return tensors[desc["tensor"]]
    if "value" in desc:
        return float(desc["value"]) if desc.get("float") else desc["value"]
    if "list" in desc:
        items = [build(d, tensors) for d in desc["list"]]
        return tuple(items) if desc["tuple"] else items
    return types.SimpleNamespace(**{k: build(d, tensors) for k, d in desc["fields"].items()})


def check_output(out, tensors):
    """None when ``out`` passes, else what is wrong (the suite's rule, inlined)."""
    r = tensors["expected"].cpu().to(torch.float64)
    d = tensors["defined"].cpu()
    want_dtype = getattr(torch, EXPECT["out_dtype"])
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(r.shape) or out.dtype != want_dtype:
        return f"output is {out.dtype} {tuple(out.shape)}; expected {want_dtype} {tuple(r.shape)}"
    a = out.detach().cpu().to(torch.float64)
    r_out = r.to(want_dtype).to(torch.float64)
    special = d & ~torch.isfinite(r_out)  # inf/NaN where the reference in the output dtype is inf/NaN
    regular = d & ~special
    bad_special = special & ~((a == r_out) | (torch.isnan(a) & torch.isnan(r_out)))
    diff = torch.where(regular, (a - r).abs(), torch.zeros((), dtype=torch.float64))
    if "allowed" in EXPECT:
        allowed = torch.full_like(diff, EXPECT["allowed"])
    else:
        allowed = EXPECT["atol"] + EXPECT["rtol"] * r.abs()
    over = (regular & ~(diff <= allowed)) | bad_special
    n = int(over.sum())
    if n == 0:
        return None
    ratio = torch.where(over, diff / allowed.clamp_min(1e-300), torch.zeros((), dtype=torch.float64))
    ratio = torch.where(over & ~torch.isfinite(ratio), torch.full((), float("inf"), dtype=torch.float64), ratio)
    worst = tuple(int(i) for i in torch.unravel_index(torch.argmax(torch.nan_to_num(ratio, nan=float("inf"))), r.shape))
    return (f"not close: {n} / {int(d.sum())} elements over the allowance; worst at index {worst}: "
            f"got {float(a[worst]):.6g}, expected {float(r[worst]):.6g} (allowed |diff| "
            f"{float(allowed[worst]):.6g}); rule: {EXPECT['text']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", dest="target", default=TARGET, help="package.module[:attr] (default: %(default)s)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels on the CPU: the interpreter
    if not args.target:
        print("error: this target exists only inside kernel-oracle; pass --targets package.module:function",
              file=sys.stderr)
        return 2
    folder = DATA.get("module_dir")
    if folder and os.path.isdir(folder) and folder not in sys.path:
        sys.path.insert(0, folder)  # where the module was found, wherever the script runs from
    try:
        fn = load_target(args.target)
    except Exception as exc:  # noqa: BLE001 - one line: the script cannot run
        fn, why = from_kernel_oracle(DATA.get("target_spec") if args.target == TARGET else None, device)
        if fn is None:
            print(f"error: cannot load target {args.target}: {type(exc).__name__}: {exc}; {why}", file=sys.stderr)
            return 2
        print(f"{args.target} is not importable here; {DATA['target_spec']} loaded by kernel-oracle")
    tensors = torch.load(Path(__file__).with_name(TENSORS), map_location=device, weights_only=True)
    call_args = [build(d, tensors) for d in CALL["args"]]
    call_kwargs = {k: build(d, tensors) for k, d in CALL["kwargs"].items()}
    inplace = META["inplace"]
    before = call_args[inplace].detach().clone() if inplace is not None else None
    print(f"op {META['op']} ({META['entry']}) on {args.target}, device {device}; target: {DATA['target_note']}")
    if "text" in EXPECT:
        print(f"tolerance: {EXPECT['text']}")
    try:
        ret = fn(*call_args, **call_kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the target's error is the observation
        if EXPECT["kind"] == "result":
            print(f"REPRODUCED: raised {type(exc).__name__}({str(exc)!r}) on a valid input")
            return 1
        if type(exc).__name__ == EXPECT["type"] and EXPECT["message"] in (None, str(exc)):
            print(f"PASS: raised {type(exc).__name__}({str(exc)!r}) as expected")
            return 0
        print(f"REPRODUCED: raised {type(exc).__name__}({str(exc)!r}); expected {EXPECT['described']}")
        return 1
    if EXPECT["kind"] != "result":
        print(f"REPRODUCED: no error raised; expected {EXPECT['described']}")
        return 1
    out = ret
    if inplace is not None:
        out = call_args[inplace]
        if not (isinstance(ret, torch.Tensor) and ret.data_ptr() == out.data_ptr() and ret.shape == out.shape):
            print("REPRODUCED: the in-place step did not return its base_output")
            return 1
    problem = check_output(out, tensors)
    if problem is None and "untouched" in tensors:
        rows = tensors["untouched"].to(out.device)
        same = torch.equal(out[rows].contiguous().view(torch.uint8), before[rows].contiguous().view(torch.uint8))
        if not same:
            problem = "rows routed by no segment changed (must stay bit-identical)"
    if problem is not None:
        print(f"REPRODUCED: {problem}")
        return 1
    print("PASS: within the tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
