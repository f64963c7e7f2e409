"""pytest plugin: ``--oracle-record PATH`` writes a result record (kind ``"pytest"``) of the run.

Loaded by :mod:`kernel_oracle.pytest.plugin` (the ``pytest11`` entry point ``kernel_oracle``), or
alone with ``-p kernel_oracle.pytest.record``.

Note [pytest records]
---------------------
Each test outcome lands in one group ``target x op x dtype x shape_class``.  The plugin reads them,
first match wins, from

1. the test's ``user_properties`` (``record_property("op", "step_a_q")``; also ``target``, ``dtype``,
   ``shape_class``, ``precision``, and ``error_ratio`` (err / allowed), ``finding_kind``, ``repro``);
2. the test's parametrization: a parameter named ``op``/``op_info``/``opinfo``/``info`` (an OpInfo
   gives its ``name``), ``dtype`` or ``prec`` (``torch.bfloat16`` and ``bf16`` -> ``bfloat16``),
   ``target``, ``shape_class`` or a ``sample``/``case``/``bname`` (a Sample gives its ``name``);
3. the plugin's ``--oracle-target`` option for the target;

and a test that says nothing goes in the group ``op="suite"``.  A passed test is a passing case;
a failed one (or one whose set-up or tear-down errored) is a case and a finding whose repro is the
pytest command selecting that test.  The finding kind comes from ``finding_kind`` when given, else
from the test's name (``contract``/``error``: ``contract``; ``strict``/``validation``:
``validation-gap``), else from the exception (``AssertionError``: ``mismatch``; anything else:
``crash``).  Skips and xfails are counted in ``summary`` and never count as passes.

``PATH`` is never overwritten (Note [Result records]); an existing directory gets
``pytest-<UTC time>.json`` inside it.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from kernel_oracle.harness.schema import FINDING_KINDS, add_finding, add_group, new_record, save

__all__ = ["RecordWriter", "group_fields"]

_OP_KEYS = ("op", "op_info", "opinfo", "info", "op_name")
_DTYPE_KEYS = ("dtype", "prec", "precision_name")
_SAMPLE_KEYS = ("shape_class", "sample", "case", "bname", "batch", "shape")
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "fp64": "float64",
                  "fp32-tf32": "float32", "tf32": "float32"}
_PROPERTY_KEYS = ("target", "op", "dtype", "shape_class", "precision")


def pytest_addoption(parser):
    group = parser.getgroup("kernel-oracle")
    group.addoption("--oracle-record", metavar="PATH", default=None,
                    help="write a kernel-oracle result record (JSON, kind 'pytest') of this run to PATH "
                         "(never overwritten; an existing directory gets pytest-<UTC time>.json); "
                         "render it with `kernel-oracle report PATH`")


def pytest_configure(config):
    path = config.getoption("--oracle-record", default=None)
    if not path or hasattr(config, "workerinput"):  # xdist workers report to the controller
        return
    p = Path(path)
    if p.is_dir() or str(path).endswith(("/", "\\")):
        p = p / f"pytest-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    if p.exists():
        raise pytest.UsageError(f"--oracle-record {path}: the file exists and results are never overwritten; "
                                f"pass a new path, or a directory to get a timestamped file in it")
    config.pluginmanager.register(RecordWriter(config, p), "kernel-oracle-record")


def _name_of(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    s = str(value)
    s = s[len("torch."):] if s.startswith("torch.") else s
    return s if len(s) <= 60 else s[:57] + "..."


def group_fields(params: dict, properties: dict, default_target: Optional[str]) -> dict:
    """target, op, dtype, shape_class, precision of one test (Note [pytest records])."""
    out = {k: properties.get(k) for k in _PROPERTY_KEYS}
    if out["op"] is None:
        for k in _OP_KEYS:
            if k in params:
                out["op"] = _name_of(params[k])
                break
    if out["dtype"] is None:
        for k in _DTYPE_KEYS:
            if k in params:
                name = _name_of(params[k])
                out["dtype"] = _DTYPE_ALIASES.get(name, name)
                if out["precision"] is None and name and "tf32" in name:
                    out["precision"] = "tf32"
                break
    if out["target"] is None and "target" in params:
        out["target"] = _name_of(params["target"])
    if out["shape_class"] is None:
        for k in _SAMPLE_KEYS:
            if k in params:
                out["shape_class"] = _name_of(params[k])
                break
    out["target"] = str(out["target"] or default_target or "suite")
    out["op"] = str(out["op"] or "suite")
    out["dtype"] = str(out["dtype"] or "-")
    out["shape_class"] = str(out["shape_class"] or "-")
    return out


def _finding_kind(nodeid: str, properties: dict, crash_message: str) -> str:
    kind = properties.get("finding_kind")
    if kind in FINDING_KINDS:
        return kind
    name = nodeid.split("::")[-1].split("[")[0].lower()
    if "contract" in name or "error" in name:
        return "contract"
    if "strict" in name or "validation" in name:
        return "validation-gap"
    assertion = crash_message.startswith(("AssertionError", "assert ")) or not crash_message
    return "mismatch" if assertion else "crash"


class RecordWriter:
    def __init__(self, config, path: Path):
        self.config = config
        self.path = path
        self.params: dict = {}  # nodeid -> parametrization
        self.outcomes: dict = {}  # nodeid -> dict(outcome, properties, message, longrepr)
        self.started = time.time()
        targets = config.getoption("--oracle-target", default=None)
        self.targets = [str(t) for t in targets] if isinstance(targets, (list, tuple)) else []
        self.default_target = ",".join(self.targets) or None

    # ---- collection and outcomes -------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        for item in items:
            callspec = getattr(item, "callspec", None)
            self.params[item.nodeid] = dict(callspec.params) if callspec is not None else {}

    def pytest_runtest_logreport(self, report):
        entry = self.outcomes.setdefault(report.nodeid, {"outcome": None, "properties": {}, "message": "",
                                                         "when": None})
        entry["properties"].update({k: v for k, v in report.user_properties})
        if report.failed:
            if entry["outcome"] != "failed":  # keep the first failure (call before teardown)
                entry.update(outcome="failed", when=report.when, message=_crash_message(report))
        elif report.skipped:
            if entry["outcome"] is None:
                entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        elif report.when == "call" and entry["outcome"] is None:
            entry["outcome"] = "passed"

    # ---- the record --------------------------------------------------------------------------
    def build_record(self, exitstatus: int = 0) -> dict:
        seed = self.config.getoption("hypothesis_seed", default=None)
        rec = new_record("pytest", seeds={"hypothesis": seed} if seed is not None else {})
        counts = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
        n = 0
        for nodeid, e in self.outcomes.items():
            outcome = e["outcome"] or "skipped"
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome not in ("passed", "failed"):
                continue
            props = e["properties"]
            fields = group_fields(self.params.get(nodeid, {}), props, self.default_target)
            ratio = props.get("error_ratio", props.get("ratio"))
            ratios = [float(ratio)] if isinstance(ratio, (int, float)) else []
            if outcome == "passed":
                add_group(rec, **fields, cases=1, passes=1, ratios=ratios)
                continue
            kind = "crash" if e["when"] != "call" else _finding_kind(nodeid, props, e["message"])
            add_group(rec, **fields, cases=1, passes=0, findings={kind: 1}, ratios=ratios)
            n += 1
            add_finding(rec, {
                "id": f"pytest-{n:04d}", "target": fields["target"], "op": fields["op"], "dtype": fields["dtype"],
                "shape_class": fields["shape_class"], "kind": kind,
                "message": (f"[{e['when']}] " if e["when"] != "call" else "") + (e["message"] or "test failed"),
                "figures": {"ratio": ratios[0]} if ratios else {},
                "repro": props.get("repro") or self._repro(nodeid), "nodeid": nodeid,
            })
        rec["targets"] = [{"name": t, "available": True, "reason": None, "entry_points": [], "precision": None}
                          for t in sorted({g["target"] for g in rec["groups"]})]
        rec["summary"] = {**counts, "exitstatus": int(exitstatus), "duration_s": round(time.time() - self.started, 2),
                          "args": list(self.config.invocation_params.args)}
        return rec

    def _repro(self, nodeid: str) -> str:
        cmd = ["python", "-m", "pytest", nodeid]
        for target in self.targets:
            cmd += ["--oracle-target", target]
        return " ".join(shlex.quote(c) for c in cmd)

    def pytest_sessionfinish(self, session, exitstatus):
        save(self.build_record(int(exitstatus)), self.path)

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_line(f"kernel-oracle result record: {self.path} "
                                    f"(render: kernel-oracle report {self.path})")


def _crash_message(report) -> str:
    """The exception line and message, e.g. ``AssertionError: Tensor-likes are not close! ...``."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, lineno, message)
        return str(longrepr[2])
    return str(longrepr or "")
