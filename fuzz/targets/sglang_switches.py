"""The upstream switches that select a code path in SGLang's kv_b files, as target configuration.

Note [SGLang switches]
----------------------
The TRT-LLM-style kv_b file reads two kinds of switch (read from every release, 0.5.13 - 0.5.23):

* ``lora_envs.SGLANG_OPT_LORA_CUBLAS`` / ``lora_envs.SGLANG_OPT_LORA_CUBLAS_KV_B`` in
  ``step_a_q_fwd``: either one on (and one resident LoRA slot) selects a cuBLAS ``torch.bmm`` path
  instead of the Triton kernel.  ``lora_envs`` (``sglang/srt/lora/trtllm_lora_temp/environ.py``)
  declares every switch as ``_GatedBool(NAME, default)``: it reads ``False`` unless the master
  switch ``SGLANG_EXPERIMENTAL_LORA_OPTI`` is on, and then the environment value or the default;
* ``is_arch_support_pdl()`` (through ``get_pdl_launch_metadata`` of its ``kernel_utils.py``):
  programmatic dependent launch on SM90+ CUDA.

The default kv_b file reads none.  A spec names them after ``@`` (:data:`CONFIGURATION`):
``sglang-trt==0.5.23@lora_opti=on,cublas_kv_b=on,pdl=off``.  ``lora_opti`` defaults to ``on`` when
the spec turns a gated switch on (otherwise the switch would have no effect), to ``off`` otherwise;
``lora_opti=off,cublas=on`` is the gated-off spelling, and tests exactly that.  The stand-in
``lora_envs`` (:class:`LoraEnvs`) answers every switch the release's own ``environ.py`` declares,
with the release's defaults, gated as SGLang gates them; ``pdl`` absent means what the hardware
says.  :func:`switches_read` scans a kernel file for the switches it reads, so a release that reads
one no configuration key sets says so in one line (:func:`unknown_switch_note`).

Where a variant runs: the cuBLAS path is torch matmuls and runs anywhere (on the CPU too);
``pdl=on`` needs compiled Triton on SM90+ CUDA (the interpreter cannot run ``gdc_wait``), so there
it is an unavailable target with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

__all__ = ["CONFIGURATION", "MASTER_SWITCH", "SWITCH_KEYS", "LoraEnvs", "ReleaseConfiguration", "declared_switches",
           "hardware_pdl", "switches_read", "unknown_switch_note"]

MASTER_SWITCH = "SGLANG_EXPERIMENTAL_LORA_OPTI"
# configuration key -> the lora_envs switch it sets
SWITCH_KEYS = {"cublas": "SGLANG_OPT_LORA_CUBLAS", "cublas_kv_b": "SGLANG_OPT_LORA_CUBLAS_KV_B"}
# the configuration keys of sglang-trt targets and their values (the registry refuses anything else)
CONFIGURATION = {"lora_opti": ("on", "off"), "pdl": ("on", "off"), **{k: ("on", "off") for k in SWITCH_KEYS}}
PDL_READ = "is_arch_support_pdl"


@dataclass(frozen=True)
class ReleaseConfiguration:
    """The switches of one target: ``switches`` env name -> on/off as the spec sets them, ``master``
    (``SGLANG_EXPERIMENTAL_LORA_OPTI``), ``pdl`` (None: the hardware's answer)."""

    switches: tuple[tuple[str, bool], ...] = ()
    master: bool = False
    pdl: Optional[bool] = None

    @classmethod
    def from_spec(cls, spec) -> "ReleaseConfiguration":
        """From a :class:`~kernel_oracle.harness.targets.TargetSpec`'s ``@key=value`` items (already
        checked against :data:`CONFIGURATION` by the registry)."""
        on = {k: v == "on" for k, v in spec.configuration}
        switches = tuple(sorted((SWITCH_KEYS[k], v) for k, v in on.items() if k in SWITCH_KEYS))
        master = on.get("lora_opti", any(v for _, v in switches))
        return cls(switches, master, on.get("pdl"))

    def reads(self, name: str, default: bool) -> bool:
        """What ``lora_envs.<name>.get()`` returns: off unless the master switch is on, then the
        spec's value or the release's default."""
        return self.master and dict(self.switches).get(name, default)

    def describe(self) -> str:
        """One line for the record: every switch as SGLang's environment would spell it."""
        parts = [f"{MASTER_SWITCH}={int(self.master)}"] + [f"{n}={int(v)}" for n, v in self.switches]
        parts.append("PDL " + ("as the hardware allows" if self.pdl is None else "on" if self.pdl else "off"))
        return ", ".join(parts)


class _GatedSwitch:
    def __init__(self, name: str, value: bool) -> None:
        self.name, self.value = name, value

    def get(self) -> bool:
        return self.value

    def __repr__(self) -> str:
        return f"lora_envs.{self.name} (reads {self.value})"


class LoraEnvs:
    """Stand-in for ``sglang.srt.lora.trtllm_lora_temp.environ.lora_envs``: every switch the release's
    ``environ.py`` declares (``declared``: name -> default), read as :class:`ReleaseConfiguration` says."""

    def __init__(self, declared: dict, config: ReleaseConfiguration) -> None:
        self._switches = {name: _GatedSwitch(name, config.reads(name, default)) for name, default in declared.items()}

    def __getattr__(self, name: str):
        switches = self.__dict__.get("_switches", {})
        if name in switches:
            return switches[name]
        raise AttributeError(f"'_LoraEnvs' object has no attribute {name!r} (the release's environ.py does not "
                             f"declare it)")


def declared_switches(source: Optional[str]) -> dict:
    """name -> default of every ``NAME = _GatedBool("NAME", default)`` in an ``environ.py`` source;
    the two cuBLAS switches off when the release has no such file (SGLang's own default)."""
    if source is None:
        return {name: False for name in SWITCH_KEYS.values()}
    out = {}
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "_GatedBool"
                and len(node.value.args) == 2 and isinstance(node.value.args[1], ast.Constant)):
            out[node.targets[0].id] = bool(node.value.args[1].value)
    return out


def switches_read(source: str) -> set[str]:
    """The switches a kernel file reads: ``lora_envs.X`` / ``envs.X`` attributes, names in
    ``os.environ`` / ``os.getenv`` / ``get_bool_env_var`` calls, and ``is_arch_support_pdl``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("lora_envs",
                                                                                                      "envs"):
            found.add(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            if fn in ("os.environ.get", "os.getenv", "get_bool_env_var", "get_int_env_var") and node.args \
                    and isinstance(node.args[0], ast.Constant):
                found.add(f"{fn}({node.args[0].value!r})")
            elif fn.rpartition(".")[2] == PDL_READ:
                found.add(PDL_READ)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.slice, ast.Constant):
            found.add(f"os.environ[{node.slice.value!r}]")
    return found


def unknown_switch_note(path: str, reads: set[str]) -> str:
    """One line naming the switches ``path`` reads that no configuration key sets ("" when none)."""
    known = {f"lora_envs.{n}" for n in SWITCH_KEYS.values()} | {PDL_READ}
    unknown = sorted(reads - known)
    if not unknown:
        return ""
    return (f"{path} reads {', '.join(unknown)}, which no configuration key sets: it runs at the release's "
            f"default (a lora_envs switch reads off unless lora_opti=on); teach fuzz/targets/sglang_switches.py")


def hardware_pdl() -> bool:
    """SGLang's ``is_arch_support_pdl()``: CUDA (not HIP) SM90+, never under the Triton interpreter."""
    from kernel_oracle.harness.device import interpreting

    import torch

    if interpreting() or not torch.cuda.is_available() or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability()[0] >= 9
