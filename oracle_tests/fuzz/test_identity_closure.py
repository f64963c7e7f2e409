"""The resume identity covers what the target runs (Note [Import closure] in fuzz/targets/import_closure.py):
a change anywhere in the target's import closure -- a module it re-exports, a compiled extension or its
sources, a helper imported inside a function, the wheel of a release -- is refused on resume in one line
naming --fresh.  Hashing only the target's own file resumed such a regression as clean."""

from __future__ import annotations

import importlib.machinery
import json
from pathlib import Path

import pytest

from oracle_tests.conftest import DEVICE

from kernel_oracle.cli import main as cli_main
from kernel_oracle.fuzz.targets.identity import code_hash
from kernel_oracle.fuzz.targets.import_closure import closure_files
from kernel_oracle.harness.targets import TargetSources, TargetSpec

# a right step_a_q (the reference's), kept in another module than the target's own file
IMPL = "from kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n\ndef step_a_q_fwd(*args):\n    return _ref(*args)\n"
BROKEN = IMPL.replace("return _ref(*args)", "return _ref(*args) * 1.25")


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A folder on sys.path, and a writer of modules in it (one name per test: imports are cached)."""
    root = tmp_path / "mods"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def write(name: str, text: str):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path
    return root, write


def _hash(module: str) -> str:
    return code_hash(TargetSpec.parse(module))


def _refused_after_the_edit(tmp_path, capsys, target: str, edited) -> Path:
    """Fuzz ``target`` into an --out, make ``edited`` (a module file) 1.25x wrong, rerun into the same --out:
    refused in one line naming --fresh.  Returns the --out."""
    out = tmp_path / "out"
    argv = ["fuzz", "--targets", target, "--op", "step_a_q", "--cases", "4", "--device", DEVICE,
            "--out", str(out), "--limits", "tiny", "--quiet", "--no-isolate"]
    assert cli_main(argv) == 0
    edited.write_text(BROKEN)
    capsys.readouterr()
    assert cli_main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"kernel-oracle fuzz: error: {out} holds a campaign of other code (target sources changed since it ran); "
        f"pass --fresh to start afresh or another --out"]
    return out


def test_editing_a_reexported_module_is_refused_on_resume(tmp_path, capsys, planted):
    """The probe: a plain module re-exporting another's entry point; the other is made 1.25x wrong
    between two runs into the same --out."""
    _, write = planted
    impl = write("ko_closure_impl.py", IMPL)
    write("ko_closure_front.py", "from ko_closure_impl import step_a_q_fwd  # re-exported\n")
    out = _refused_after_the_edit(tmp_path, capsys, "ko_closure_front", impl)
    assert json.loads((out / "summary.json").read_text())["findings"] == []  # nothing was judged with it


def test_a_plain_module_name_resumes_only_over_its_own_code(tmp_path, capsys, planted):
    """The probe: ``--targets kostepaq`` (one lower-case word, which parses as a built-in name) made wrong
    between two runs into the same --out: its identity is the module's, not the suite's."""
    _, write = planted
    _refused_after_the_edit(tmp_path, capsys, "kostepaq", write("kostepaq.py", IMPL))


def test_a_library_the_module_loads_with_ctypes_is_part_of_its_identity(planted):
    root, write = planted
    write("kolibfront.py", "import ctypes, os\n_LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "
                           "'libkoops.so'))\n" + IMPL)
    library = root / "libkoops.so"
    library.write_bytes(b"\x7fELF one build")
    first = _hash("kolibfront")
    assert library.resolve() in set(closure_files("kolibfront"))
    library.write_bytes(b"\x7fELF another build")
    assert _hash("kolibfront") != first


@pytest.mark.parametrize("how", ["import x", "from pkg import mod", "from . import sibling", "inside a function",
                                 "import_module literal", "star import"])
def test_every_kind_of_import_is_followed(planted, how):
    _, write = planted
    tag = "".join(c if c.isalnum() else "_" for c in how)
    deps = {
        "import x": (f"import ko_dep_{tag}\n", f"ko_dep_{tag}.py"),
        "from pkg import mod": (f"from ko_pkg_{tag} import mod\n", f"ko_pkg_{tag}/mod.py"),
        "from . import sibling": ("from . import sibling\n", f"ko_rel_{tag}/sibling.py"),
        "inside a function": (f"def f():\n    import ko_dep_{tag}\n", f"ko_dep_{tag}.py"),
        "import_module literal": (f"import importlib\nM = importlib.import_module('ko_dep_{tag}')\n", f"ko_dep_{tag}.py"),
        "star import": (f"from ko_dep_{tag} import *\n", f"ko_dep_{tag}.py"),
    }
    text, dep = deps[how]
    if how == "from pkg import mod":
        write(f"ko_pkg_{tag}/__init__.py", "")
    if how == "from . import sibling":
        write(f"ko_rel_{tag}/__init__.py", "")
        target = f"ko_rel_{tag}.front"
        write(f"ko_rel_{tag}/front.py", text)
    else:
        target = f"ko_front_{tag}"
        write(f"{target}.py", text)
    dep_path = write(dep, "X = 1\n")
    assert dep_path.resolve() in {p.resolve() for p in closure_files(target)}
    before = _hash(target)
    dep_path.write_text("X = 2\n")
    assert _hash(target) != before


def test_a_rebuilt_extension_and_its_sources_change_the_identity(planted):
    """A compiled extension is found by its file (never loaded here) and hashed with the sources beside it."""
    root, write = planted
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    write("ko_ext_front.py", "from ko_ext_pkg import _kernels\n")
    write("ko_ext_pkg/__init__.py", "")
    so = root / "ko_ext_pkg" / f"_kernels{suffix}"
    so.write_bytes(b"\x7fELF built once")
    source = write("ko_ext_pkg/kernels.cu", "__global__ void k() {}\n")
    assert {so, source} <= set(closure_files("ko_ext_front"))
    first = _hash("ko_ext_front")
    so.write_bytes(b"\x7fELF rebuilt")
    second = _hash("ko_ext_front")
    source.write_text("__global__ void k() { /* edited */ }\n")
    assert len({first, second, _hash("ko_ext_front")}) == 3


def test_the_environment_is_not_the_targets_code(planted):
    """The standard library and the suite's own dependencies stay outside the closure (they are the
    environment, recorded with the suite's version)."""
    _, write = planted
    write("ko_env_front.py", "import json, os, torch, numpy, triton, hypothesis\nfrom ko_env_dep import f\n")
    dep = write("ko_env_dep.py", "def f():\n    pass\n")
    files = closure_files("ko_env_front")
    assert dep in files
    assert not any(("site-packages/torch" in str(p) or "/json/" in str(p)) for p in files), files[:5]


def test_the_wheel_of_a_release_is_its_identity(tmp_path):
    from oracle_tests.harness.test_known_issues import raiser_wheel

    wheel = raiser_wheel(tmp_path, "9.8.7", "one")
    spec, sources = TargetSpec.parse("sglang==9.8.7"), TargetSources(sglang_wheel=str(wheel))
    first = code_hash(spec, sources)
    raiser_wheel(tmp_path, "9.8.7", "two")  # the same version, other bytes
    assert first.startswith("wheel:") and code_hash(spec, sources) != first
