"""A pytest plugin of the GPU check (scripts/gpu_check.sh, not installed): a suite stopped by a device
call's limit goes on in the next call where it stopped, never from scratch.

``python -m pytest -p pytest_resume --resume-log FILE ...`` (with ``scripts/`` on ``PYTHONPATH``) appends
one line per finished test to FILE (``outcome<TAB>nodeid``, written by the controlling process as each
report arrives, so a run killed at its limit keeps every test it finished) and, at collection,
deselects the tests FILE already holds.  Failures are kept in FILE too: a continued run does not run
them again, and ``failures`` lists every one of all the runs.  Each failure's short traceback goes to
FILE.tb as it arrives: pytest prints tracebacks only at the session's end, which a stopped run never reaches.
"""

from __future__ import annotations

import os
import sys

import pytest


def pytest_addoption(parser):
    parser.addoption("--resume-log", default=None, metavar="FILE",
                     help="record finished tests in FILE and deselect those it already holds")


def _done(path) -> dict:
    out = {}
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                outcome, _, nodeid = line.rstrip("\n").partition("\t")
                if nodeid:
                    out[nodeid] = outcome
    return out


def pytest_collection_modifyitems(config, items):
    done = _done(config.getoption("--resume-log"))
    if not done:
        return
    keep = [i for i in items if i.nodeid not in done]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in done])
        items[:] = keep


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    config = _CONFIG.get("config")
    path = config.getoption("--resume-log") if config is not None else None
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes, once per test
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{outcome}\t{report.nodeid}\n")
        if report.failed:
            with open(path + ".tb", "a", encoding="utf-8") as fh:
                fh.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext[-6000:]}\n")


_CONFIG: dict = {}


def pytest_configure(config):
    _CONFIG["config"] = config


def failures(path: str) -> list:
    """The node ids FILE records as failed (every run of a continued suite)."""
    return sorted(n for n, o in _done(path).items() if o == "failed")


if __name__ == "__main__":  # python scripts/pytest_resume.py FILE: counts by outcome, then the failures
    done = _done(sys.argv[1])
    counts: dict = {}
    for outcome in done.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    print(", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "nothing recorded")
    for nodeid in failures(sys.argv[1]):
        print(f"FAILED {nodeid}")
