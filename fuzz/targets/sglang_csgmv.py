"""SGLang's chunked SGMV LoRA kernels (``--lora-backend csgmv``), loaded standalone from a release.

Note [Loading the csgmv kernels]
--------------------------------
Every release 0.5.10 - 0.5.23 ships the two entry points in two files (:data:`CSGMV_FILES`, newest
layout first; docs/csgmv.md): ``chunked_sgmv_shrink.py::chunked_sgmv_lora_shrink_forward`` and
``chunked_sgmv_expand.py::chunked_sgmv_lora_expand_forward``.  They are loaded the way the kv_b
files are (Note [Loading SGLang's kernels standalone] in :mod:`.sglang_wheel`, whose loader this
module uses): the release's own ``lora_tuning_config.py`` (0.5.11+: block sizes per GPU from the
``csgmv_configs/`` beside it, extracted with it) is loaded as a real module; the other ``sglang``
names get stand-ins (:data:`CSGMV_STAND_INS`):

* ``LoRABatchInfo``: the suite's mirror (a type annotation only);
* ``cached_triton_kernel(key_fn)``: Triton's own cache, which is what SGLang uses off CUDA (on CUDA it
  caches by ``key_fn`` alone: docs/csgmv.md says what that key leaves out);
* ``get_device_name()``: the CUDA device's name, else ``"cpu"`` (SGLang's returns None off CUDA and
  its config lookup would fail on ``None.replace``): no tuned config matches, so the defaults apply;
* ``envs`` (0.5.22+): ``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K`` and ``SGLANG_ENABLE_DETERMINISTIC_INFERENCE``
  as :class:`CsgmvConfiguration` sets them (both off by default, as the release's ``environ.py``
  declares them).

Identity: :func:`csgmv_identity` hashes the syntax trees of the two files and the tuning-config file
(docstrings, comments and the module paths of their ``sglang`` imports aside), so releases that
only moved the files have one identity.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from typing import Callable, Optional

from .sglang_wheel import STAND_INS, LoaderError, ReleaseFiles, code_identity, load_kernel_module, module_name

__all__ = ["CSGMV_FILES", "CSGMV_STAND_INS", "CsgmvConfiguration", "CsgmvEnvs", "CsgmvKernels", "csgmv_identity",
           "csgmv_slim_files", "load_csgmv", "locate_csgmv"]

# entry -> the file's path in each layout, newest first
CSGMV_FILES = {
    "shrink": ("sglang/kernels/ops/lora/dense/chunked_sgmv_shrink.py",  # 0.5.22 - 0.5.23
               "sglang/kernels/ops/gemm/chunked_sgmv_shrink.py",  # 0.5.16 - 0.5.21
               "sglang/srt/lora/triton_ops/chunked_sgmv_shrink.py"),  # 0.5.10 - 0.5.15.post1
    "expand": ("sglang/kernels/ops/lora/dense/chunked_sgmv_expand.py",
               "sglang/kernels/ops/gemm/chunked_sgmv_expand.py",
               "sglang/srt/lora/triton_ops/chunked_sgmv_expand.py"),
}
ENTRY_POINTS = {"shrink": "chunked_sgmv_lora_shrink_forward", "expand": "chunked_sgmv_lora_expand_forward"}
TUNING_FILE = "lora_tuning_config.py"
CONFIG_FOLDER = "csgmv_configs/"
# configuration key -> the ``envs`` switch it sets (sglang/srt/environ.py, 0.5.22+)
SWITCHES = {"split_k": "SGLANG_ENABLE_LORA_CSGMV_SPLIT_K", "deterministic": "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"}


@dataclass(frozen=True)
class CsgmvConfiguration:
    """The switches the csgmv files read: ``split_k`` (``SGLANG_ENABLE_LORA_CSGMV_SPLIT_K``: the split-K
    shrink for bf16 rank-32 adapters with K 4096 or 12288), ``deterministic``
    (``SGLANG_ENABLE_DETERMINISTIC_INFERENCE``: split-K forced off); ``device_name``: what
    ``get_device_name()`` answers (None: the hardware's), which picks a tuned block config."""

    split_k: bool = False
    deterministic: bool = False
    device_name: Optional[str] = None

    def describe(self) -> str:
        return ", ".join([f"{SWITCHES['split_k']}={int(self.split_k)}",
                          f"{SWITCHES['deterministic']}={int(self.deterministic)}"]
                         + ([f"device name {self.device_name!r}"] if self.device_name else []))


class _Switch:
    def __init__(self, name: str, value: bool) -> None:
        self.name, self.value = name, value

    def get(self) -> bool:
        return self.value

    def is_set(self) -> bool:
        return self.value

    def __repr__(self) -> str:
        return f"envs.{self.name} (reads {self.value})"


class CsgmvEnvs:
    """Stand-in for ``sglang.srt.environ.envs``: the two switches the csgmv files read, nothing else."""

    def __init__(self, config: CsgmvConfiguration) -> None:
        self._switches = {name: _Switch(name, getattr(config, key)) for key, name in SWITCHES.items()}

    def __getattr__(self, name: str):
        switches = self.__dict__.get("_switches", {})
        if name in switches:
            return switches[name]
        raise AttributeError(f"the csgmv stand-in of sglang.srt.environ.envs has no {name!r} (it answers "
                             f"{sorted(switches)}); teach fuzz/targets/sglang_csgmv.py")


def _cached_triton_kernel(release, config, module):
    def cached_triton_kernel(key_fn=None):
        return lambda fn: fn

    return cached_triton_kernel


def _device_name(release, config, module):
    def get_device_name(device_id: int = 0) -> str:
        if config.device_name is not None:
            return config.device_name
        import torch

        return torch.cuda.get_device_name(device_id) if torch.cuda.is_available() else "cpu"

    return get_device_name


CSGMV_STAND_INS: dict[str, Callable] = {
    "LoRABatchInfo": STAND_INS["LoRABatchInfo"],
    "cached_triton_kernel": _cached_triton_kernel,
    "get_device_name": _device_name,
    "envs": lambda release, config, module: CsgmvEnvs(config),
}


def locate_csgmv(release: ReleaseFiles) -> dict[str, str]:
    """``{"shrink": path, "expand": path}`` of ``release``: the known layouts first, then a search of its
    ``sglang/**.py`` files for the entry points.  Empty when it has none."""
    names = set(release.names)
    found = {}
    for entry, paths in CSGMV_FILES.items():
        hit = next((p for p in paths if p in names), None)
        if hit is None:
            mark = f"def {ENTRY_POINTS[entry]}("
            hit = next((n for n in sorted(names) if n.startswith("sglang/") and n.endswith(".py")
                        and "lora" in n and mark in release.read(n)), None)
        if hit is not None:
            found[entry] = hit
    return found if len(found) == 2 else {}


def _tuning_file(release: ReleaseFiles, module: str) -> Optional[str]:
    """The release's own ``lora_tuning_config.py`` when ``from <module> import ...`` names it, else None."""
    file = module.replace(".", "/") + ".py"
    return file if file in release.names and file.endswith("/" + TUNING_FILE) else None


def _tuning_files(release: ReleaseFiles, found: dict) -> list[str]:
    folder = found["shrink"].rsplit("/", 1)[0]
    return [f"{folder}/{TUNING_FILE}"] if f"{folder}/{TUNING_FILE}" in release.names else []


def _config_files(release: ReleaseFiles, found: dict) -> list[str]:
    """The tuned block configs (``csgmv_configs/**.json``) beside the release's tuning-config file."""
    folders = [t.rsplit("/", 1)[0] + "/" + CONFIG_FOLDER for t in _tuning_files(release, found)]
    return [n for n in release.names if n.endswith(".json") and any(n.startswith(f) for f in folders)]


def csgmv_slim_files(release: ReleaseFiles) -> list[str]:
    """What a slim wheel keeps of the csgmv code: the two files, the tuning-config file and its configs."""
    found = locate_csgmv(release)
    return [*found.values(), *_tuning_files(release, found), *_config_files(release, found)] if found else []


@dataclass
class CsgmvKernels:
    """One release's two entry points under one configuration.  ``identity``: :func:`csgmv_identity`;
    ``how``: one line naming the release, the modules and how they were loaded."""

    version: str
    shrink: Callable
    expand: Callable
    paths: dict
    identity: str
    how: str


def load_csgmv(release: ReleaseFiles, config: CsgmvConfiguration = CsgmvConfiguration()) -> CsgmvKernels:
    """Load ``release``'s shrink and expand files standalone (the Note); raises :class:`LoaderError`
    (one line) for a release without them or a file that does not load."""
    found = locate_csgmv(release)
    if not found:
        raise LoaderError(f"sglang {release.version} has no chunked SGMV LoRA kernels (no "
                          f"{ENTRY_POINTS['shrink']} / {ENTRY_POINTS['expand']})")
    for name in _config_files(release, found):  # the tuned block configs are read beside the tuning file
        release.disk(name)
    modules = {entry: load_kernel_module(release, path, "csgmv", config, own_file=_tuning_file,
                                         stand_ins=CSGMV_STAND_INS)
               for entry, path in found.items()}
    fns = {entry: getattr(modules[entry], ENTRY_POINTS[entry], None) for entry in found}
    missing = [ENTRY_POINTS[e] for e, fn in fns.items() if fn is None]
    if missing:
        raise LoaderError(f"sglang {release.version}: {', '.join(missing)} is not defined in its file")
    how = (f"sglang {release.version}: {module_name(found['shrink'])} and {module_name(found['expand'])}, loaded "
           f"standalone from the {release.origin}; {config.describe()}")
    return CsgmvKernels(str(release.version), fns["shrink"], fns["expand"], dict(found),
                        csgmv_identity(release), how)


def _file_identity(source: str) -> str:
    """One file's syntax tree without its module docstring, its ``from sglang... import`` statements reduced
    to the names they import (a moved helper is the same code)."""
    body, names = [], []
    for i, node in enumerate(ast.parse(source).body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sglang":
            names.extend(a.name for a in node.names)
        else:
            body.append(node)
    return code_identity(body, ",".join(sorted(names)))


def csgmv_identity(release: ReleaseFiles) -> str:
    """The identity of ``release``'s csgmv code: its two files and its tuning-config file, syntax trees
    only (docstrings, comments, layout and import paths aside)."""
    found = locate_csgmv(release)
    if not found:
        raise LoaderError(f"sglang {release.version} has no chunked SGMV LoRA kernels")
    files = [found["shrink"], found["expand"], *_tuning_files(release, found)]
    parts = [_file_identity(release.read(f)) for f in files]
    return hashlib.sha256(",".join(parts).encode()).hexdigest()[:16]
