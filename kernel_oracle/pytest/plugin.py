"""The pytest plugin of kernel-oracle, registered through the ``pytest11`` entry point ``kernel_oracle``.

Note [pytest plugin]
--------------------
Installing kernel-oracle makes every pytest run in that environment load this module (turn it off
with ``-p no:kernel_oracle``), so it must stay cheap and never change a project that does not ask
for it: importing it loads no torch and no harness, every option is namespaced ``--oracle-*``, and
Hypothesis settings are touched only when a profile is asked for.

Options (group "kernel-oracle"), each with an ini twin for a project's pytest configuration:

* ``--oracle-target TARGET`` (repeatable; ini ``oracle_targets``; default ``reference`` and
  ``triton``): parametrizes every test that takes the ``oracle_target`` fixture (``fuzz_target`` is
  the same fixture under our suite's older name).  Given on the command line, it also deselects every
  test that takes no target: ``pytest oracle_tests --oracle-target my_kernels`` runs the differential
  tests of ``my_kernels`` only, each with ``target=my_kernels`` in its id, and judges it as
  ``kernel-oracle fuzz`` does (a validation gap of a module without strict validation is no failure:
  :func:`kernel_oracle.harness.malformed.in_gap_table`).  TARGET is a built-in name (``reference``,
  ``triton``, ``sglang``, ``torch-varlen``, ``flashinfer-cudnn``, ``mutant:NAME``) or
  ``package.module[:attr]``.  A target that is unavailable is skipped *with its reason* (never
  silently passed); the terminal summary lists each selected target with its entry points, fp32
  precision, excluded dtypes and missing entry points.
* ``--oracle-device cpu|cuda`` (ini ``oracle_device``): the ``oracle_device`` fixture and the device
  targets resolve on; given explicitly, it also throws the one interpreter switch
  (:func:`kernel_oracle.harness.device.configure_process`: ``cpu`` runs Triton kernels under
  ``TRITON_INTERPRET=1``).  Default: ``cuda`` when available, else ``cpu``, switching nothing.
* ``--oracle-profile ci|dev|campaign|auto`` (ini ``oracle_profile``; default: none): loads our
  Hypothesis profile ``kernel-oracle-<name>`` unless ``--hypothesis-profile`` chose one.
* ``--oracle-record PATH``: :mod:`kernel_oracle.pytest.record`, loaded from here.
* ``--oracle-db redis://HOST:6379/N`` (ini ``oracle_db``): every property's Hypothesis example
  database is that Redis (``hypothesis.extra.redis.RedisExampleDatabase``; the ``cluster`` extra),
  shared by all pytest-xdist workers and machines: a failure found by one is replayed first by all.

Note [xdist on many GPUs]
-------------------------
``pytest -n auto`` (pytest-xdist) on a machine with several GPUs: when this plugin is imported in an
xdist worker (``PYTEST_XDIST_WORKER=gwK``), before any conftest or test can start CUDA, it sets
``CUDA_VISIBLE_DEVICES`` to GPU ``K mod <GPUs>`` (of the parent's ``CUDA_VISIBLE_DEVICES`` list when
set, else of the GPUs the NVIDIA driver lists in /proc), so each worker has one GPU of its own.  It
touches nothing with one GPU or none (``CUDA_VISIBLE_DEVICES`` naming one GPU keeps every worker on it).  Triton's
kernel cache (``TRITON_CACHE_DIR``, default ``~/.triton/cache``) is left shared: its writes are
atomic, so one worker's compiled kernel is every worker's.

Note [Profiles]
---------------
* ``ci``: fast and derandomized (the same examples every run, no database), few examples; what
  ``auto`` picks under ``CI=true`` and whenever there is no GPU (the CPU interpreter runs ~25 small
  cases/s).
* ``dev``: randomized, more examples, the example database in ``.hypothesis/`` so a failure found
  once is replayed first next time; what ``auto`` picks on a GPU machine.
* ``campaign``: many examples, for long runs (``kernel-oracle fuzz`` drives Hypothesis itself).

They are registered as ``kernel-oracle-ci`` etc., so a project's own ``ci`` profile is never
replaced.  :data:`EXAMPLES` scales the number of examples per target kind (an interpreted Triton
target costs ~100x the reference per case): :func:`examples_for`.
"""

from __future__ import annotations

import os
from typing import Optional

import pytest
from hypothesis import HealthCheck, Phase, settings

__all__ = ["DEFAULT_TARGETS", "EXAMPLES", "PROFILE_PREFIX", "default_profile", "examples_for", "pin_xdist_worker",
           "selected_targets"]

# --oracle-record lives in its own module (also usable alone: -p kernel_oracle.pytest.record)
pytest_plugins = ["kernel_oracle.pytest.record"]

DEFAULT_TARGETS = ("reference", "triton")
PROFILE_PREFIX = "kernel-oracle-"
PROFILES = ("ci", "dev", "campaign")
DEVICES = ("cpu", "cuda")
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.differing_executors]

settings.register_profile(PROFILE_PREFIX + "ci", max_examples=12, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_HEALTH, print_blob=True,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
settings.register_profile(PROFILE_PREFIX + "dev", max_examples=60, deadline=None, suppress_health_check=_HEALTH,
                          print_blob=True)
settings.register_profile(PROFILE_PREFIX + "campaign", max_examples=2000, deadline=None,
                          suppress_health_check=_HEALTH, print_blob=True)

def _gpu_ids(environ) -> list:
    """The GPUs this machine offers, without starting CUDA: the ``CUDA_VISIBLE_DEVICES`` list, else the
    NVIDIA driver's /proc entries (no driver: none)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


def pin_xdist_worker(environ=os.environ) -> Optional[str]:
    """Pin this pytest-xdist worker to one GPU (Note [xdist on many GPUs]); returns the GPU, or None."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    gpus = _gpu_ids(environ)
    if len(gpus) < 2:
        return None
    gpu = gpus[int(worker[2:]) % len(gpus)]
    environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


pin_xdist_worker()  # at import: the plugin loads before any conftest, so before CUDA can start

# examples per property per profile, by kind of target: (cheap targets, interpreted Triton)
EXAMPLES = {"ci": (25, 12), "dev": (60, 30), "campaign": (2000, 300)}


def default_profile() -> str:
    """What ``auto`` means here: ``ci`` under ``CI=true`` or without a GPU, else ``dev``."""
    import torch

    if os.environ.get("CI", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available():
        return "ci"
    return "dev"


_ACTIVE: dict = {"profile": None}


def examples_for(target_name: str, *, scale: float = 1.0) -> int:
    """Examples for one property on ``target_name`` under the active (or the ``auto``) profile."""
    import torch

    profile = _ACTIVE["profile"] or default_profile()
    cheap, interp = EXAMPLES.get(profile, EXAMPLES["dev"])
    slow = (not torch.cuda.is_available()) and target_name != "reference" and not target_name.startswith("torch")
    return max(1, int((interp if slow else cheap) * scale))


def pytest_addoption(parser):
    group = parser.getgroup("kernel-oracle", "kernel-oracle: targets, device, Hypothesis profiles, result records")
    group.addoption("--oracle-target", action="append", default=None, metavar="TARGET",
                    help="target the oracle_target fixture runs (repeatable): reference, triton, sglang, "
                         "torch-varlen, flashinfer-cudnn, mutant:NAME or package.module[:attr]; "
                         "default: ini oracle_targets, else reference and triton")
    group.addoption("--oracle-device", choices=DEVICES, default=None,
                    help="device of the oracle_device fixture and of the targets (cpu runs Triton kernels "
                         "under TRITON_INTERPRET=1); default: ini oracle_device, else cuda when available")
    group.addoption("--oracle-profile", choices=(*PROFILES, "auto"), default=None,
                    help="load kernel-oracle's Hypothesis profile (auto: ci without a GPU or under CI=true, "
                         "else dev) unless --hypothesis-profile is given; default: ini oracle_profile, else none")
    group.addoption("--oracle-db", default=None, metavar="redis://HOST:6379/N",
                    help="one Hypothesis example database in Redis for every property, shared by all xdist "
                         "workers and machines (needs the cluster extra); default: ini oracle_db, else Hypothesis's")
    parser.addini("oracle_db", default="", help="kernel-oracle: shared example database (redis://HOST:6379/N)")
    parser.addini("oracle_targets", type="args", default=[],
                  help="kernel-oracle: default targets of the oracle_target fixture (space separated)")
    parser.addini("oracle_device", default="", help="kernel-oracle: default device (cpu or cuda)")
    parser.addini("oracle_profile", default="", help="kernel-oracle: Hypothesis profile (ci, dev, campaign, auto)")
    parser.addini("oracle_gpu_workers", default="",
                  help="kernel-oracle: on a machine with a GPU, run this many pytest-xdist workers when -n is not "
                       "given (auto: half the CPU cores, 2..16); empty: off (Note [Parallel on a GPU machine])")


# ---- Note [Parallel on a GPU machine] ---------------------------------------------------------------
# On a GPU machine a test run is bound by Triton compilations (about a second each, single-threaded)
# and by workers that start CUDA, not by the GPU: measured on the H200, our suite ran 2,376 tests in
# 264 s on 12 xdist workers where one process had done a quarter of them in 450 s.  A project that
# sets the ini ``oracle_gpu_workers`` (ours: ``auto``) gets ``-n N`` added to its command line when
# a GPU is visible, pytest-xdist is installed and the command has no -n / --numprocesses / -p no:xdist
# / --pdb of its own; the workers are pinned to GPUs as Note [xdist on many GPUs] says.  Never inside an
# xdist worker (nested runs stay serial); ``KERNEL_ORACLE_GPU_WORKERS=N`` overrides the ini (0: off).
_SERIAL_FLAGS = ("-n", "--numprocesses", "--pdb", "--trace")


def gpu_workers(ini_value: str, args, environ=os.environ, cpu_count: Optional[int] = None) -> int:
    """How many xdist workers to add (0: none) for ``args`` on this machine (Note [Parallel on a GPU machine])."""
    value = environ.get("KERNEL_ORACLE_GPU_WORKERS", ini_value or "").strip()
    if not value or value == "0" or environ.get("PYTEST_XDIST_WORKER") or not _gpu_ids(environ):
        return 0
    if any(a in _SERIAL_FLAGS or a.startswith(("-n", "--numprocesses=")) for a in args):
        return 0
    if any(a == "no:xdist" or a == "-pno:xdist" for a in args):
        return 0
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return 0
    if value == "auto":
        return max(2, min(16, (cpu_count or os.cpu_count() or 2) // 2))
    if not value.isdigit():  # "0" returned above; negative numbers and words land here
        raise pytest.UsageError(f"oracle_gpu_workers={value!r} is not a number of workers; use auto, 0 or N >= 1")
    return int(value)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    n = gpu_workers(early_config.getini("oracle_gpu_workers"), args)
    if n:
        args[:] = ["-n", str(n), *args]
        early_config._oracle_gpu_workers = n


def _device_option(config) -> Optional[str]:
    device = config.getoption("--oracle-device") or config.getini("oracle_device") or None
    if device is not None and device not in DEVICES:
        raise pytest.UsageError(f"oracle_device={device!r} is unknown; the only valid values are {list(DEVICES)}")
    return device


def pytest_configure(config):
    profile = config.getoption("--oracle-profile") or config.getini("oracle_profile") or None
    if profile is not None and profile not in (*PROFILES, "auto"):
        raise pytest.UsageError(f"oracle_profile={profile!r} is unknown; the only valid values are "
                                f"{[*PROFILES, 'auto']}")
    if profile is not None and not config.getoption("hypothesis_profile", default=None):
        profile = default_profile() if profile == "auto" else profile
        settings.load_profile(PROFILE_PREFIX + profile)
        _ACTIVE["profile"] = profile
    db = config.getoption("--oracle-db") or config.getini("oracle_db") or None
    if db is not None:
        _use_shared_database(db)
    device = _device_option(config)
    if device is not None:
        from kernel_oracle.harness.device import configure_process

        try:
            configure_process(device)
        except RuntimeError as exc:
            raise pytest.UsageError(f"--oracle-device {device}: {exc}") from None
    config._oracle_targets = {}


def _use_shared_database(url: str) -> None:
    """Make ``url``'s Redis the example database of every property (on top of the loaded profile)."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise pytest.UsageError(f"--oracle-db {url!r}: expected redis://HOST:6379/N")
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise pytest.UsageError("--oracle-db needs the redis package: pip install 'kernel-oracle[cluster]'") from None
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise pytest.UsageError(f"--oracle-db {url}: cannot reach Redis ({exc})") from None
    db = RedisExampleDatabase(client, key_prefix=b"kernel-oracle-pytest:")
    settings.register_profile(PROFILE_PREFIX + "shared-db", parent=settings.default, database=db)
    settings.load_profile(PROFILE_PREFIX + "shared-db")


def oracle_device_of(config) -> str:
    """The device of this session: ``--oracle-device``, ini ``oracle_device``, else cuda when available."""
    device = _device_option(config)
    if device is not None:
        return device
    from kernel_oracle.harness.device import default_device

    return default_device()


def selected_targets(config) -> list[str]:
    return list(config.getoption("--oracle-target") or config.getini("oracle_targets") or DEFAULT_TARGETS)


def pytest_collection_modifyitems(config, items):
    """``--oracle-target`` on the command line runs the tests of that target only (Note [pytest plugin]):
    every collected test that takes no target is deselected, and the header says how many."""
    if not config.getoption("--oracle-target"):
        return
    keep = [item for item in items if "oracle_target_name" in getattr(item, "fixturenames", ())]
    dropped = [item for item in items if "oracle_target_name" not in getattr(item, "fixturenames", ())]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    config._oracle_deselected = len(dropped)


def pytest_generate_tests(metafunc):
    if "oracle_target_name" in metafunc.fixturenames:
        names = selected_targets(metafunc.config)
        metafunc.parametrize("oracle_target_name", names, ids=[f"target={n}" for n in names])


@pytest.fixture(scope="session")
def oracle_device(pytestconfig) -> str:
    """``"cuda"`` or ``"cpu"`` (Note [pytest plugin])."""
    return oracle_device_of(pytestconfig)


@pytest.fixture
def oracle_target(request, oracle_target_name, oracle_device):
    """The resolved :class:`kernel_oracle.fuzz.targets.Target` of one ``--oracle-target``; skipped
    with the reason when unavailable; its name and precision go into the test's user properties."""
    from kernel_oracle.fuzz.targets import TargetError, resolve_target

    try:
        target = resolve_target(oracle_target_name, oracle_device)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    request.config._oracle_targets[oracle_target_name] = target
    if not target.available:
        pytest.skip(f"target {oracle_target_name!r} is unavailable: {target.reason}")
    request.node.user_properties.append(("target", oracle_target_name))
    request.node.user_properties.append(("precision", target.precision_summary()))
    return target


@pytest.fixture
def fuzz_target(oracle_target):
    """The same as ``oracle_target`` (the name our own suite's fuzz properties use)."""
    return oracle_target


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    targets = getattr(config, "_oracle_targets", {})
    if not targets:
        return
    tr = terminalreporter
    tr.section("kernel-oracle targets")
    tr.write_line(f"hypothesis profile: {_ACTIVE['profile'] or 'not set by kernel-oracle'}")
    for name, t in targets.items():
        if not t.available:
            tr.write_line(f"{name}: UNAVAILABLE ({t.reason})")
            continue
        line = (f"{name}: entry points {sorted(t.entries)}; fp32 precision {t.precision_summary()}; "
                f"strict validation {t.strict}")
        if t.excluded_dtypes:
            line += "; excluded " + ", ".join(f"{d} ({why})" for d, why in t.excluded_dtypes.items())
        if t.notes:
            line += "; missing " + ", ".join(f"{op} ({why})" for op, why in t.notes.items())
        if t.status is not None:
            line += f"; {t.status()}"
        tr.write_line(line)


def pytest_report_collectionfinish(config, items):
    dropped = getattr(config, "_oracle_deselected", 0)
    if dropped:
        return (f"kernel-oracle: --oracle-target runs the {len(items)} tests that take a target; {dropped} others "
                f"deselected (run without --oracle-target for the whole suite)")
    return None


def pytest_report_header(config):
    n = getattr(config, "_oracle_gpu_workers", 0)
    if n:
        return (f"kernel-oracle: {n} pytest-xdist workers on this GPU machine (ini oracle_gpu_workers; "
                f"-n 0 or KERNEL_ORACLE_GPU_WORKERS=0 runs serially)")
    return None
