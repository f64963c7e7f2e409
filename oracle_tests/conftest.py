"""Suite-wide set-up.

Without a GPU the Triton kernels run under the interpreter, which must be switched on before any
kernel module is imported: this conftest is loaded first, so it sets ``TRITON_INTERPRET=1`` here.
"""

from __future__ import annotations

import os

import torch

HAS_CUDA = torch.cuda.is_available()
# pieces of the test environment that must be present rather than skipped: KERNEL_ORACLE_REQUIRE is a
# comma-separated list of sglang-wheels, chromium, cluster (.ci/run sets all three)
REQUIRE_ENV = "KERNEL_ORACLE_REQUIRE"
REQUIRED = frozenset(p.strip() for p in os.environ.get(REQUIRE_ENV, "").split(",") if p.strip())
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

DEVICE = "cuda" if HAS_CUDA else "cpu"

# The kernel-oracle plugin (--oracle-target, --oracle-record, Hypothesis profiles, the oracle_target
# fixture) is not named here: installing the project registers it through the pytest11 entry point,
# and naming it again would register it twice.  pyproject's ini sets oracle_profile = "auto".


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="run realistic-shape tests (on by default on a GPU)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA or config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="realistic shapes need a GPU (or --run-slow): the CPU interpreter runs ~25 small cases/s")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return DEVICE


# ---- TRITON_INTERPRET never leaks between tests --------------------------------------------------
# Triton reads the switch when a kernel module is imported (harness.device, Note [Device switch]): a
# test that flips it in this process (configure_process("cpu") through a CLI's --device cpu, an
# os.environ write) would make every later import interpreted -- on a GPU machine, silently.  Each
# test must leave it as it found it; a leak is restored (so later tests run right) and reported as
# an error of the test that leaked it.
_INTERPRET = "TRITON_INTERPRET"


@pytest.fixture(autouse=True)
def _triton_interpret_unchanged():
    before = os.environ.get(_INTERPRET)
    yield
    after = os.environ.get(_INTERPRET)
    if after != before:
        if before is None:
            os.environ.pop(_INTERPRET, None)
        else:
            os.environ[_INTERPRET] = before
        pytest.fail(f"this test changed {_INTERPRET} from {before!r} to {after!r} and did not restore it; "
                    "run device-specific work in a worker (harness.device.worker_env) or use monkeypatch.setenv",
                    pytrace=False)
