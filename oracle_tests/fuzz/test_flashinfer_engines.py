"""FlashInfer releases as an axis of the vision engine (Note [Engine versions]).

Each case runs in a fresh interpreter (one process holds one FlashInfer) over planted engine folders:
fake ``flashinfer`` / ``cudnn`` packages that only carry a version, so what is checked is which
release a process gets, not what the engine computes (that needs a GPU and the real wheels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kernel_oracle.fuzz.targets import TargetError, resolve_target
from kernel_oracle.fuzz.targets.flashinfer_engines import ENGINE_RELEASES, SITES_ENV
from kernel_oracle.jobs.matrix import expand_targets


def _plant(root, version, *, holds=None, cudnn="1.0"):
    """An engine folder ``root/version`` whose flashinfer says ``holds`` (default: ``version``)."""
    for name, v in (("flashinfer", holds or version), ("cudnn", cudnn)):
        pkg = root / version / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"__version__ = {v!r}\n")


def _run(root, code: str) -> dict:
    """``code`` (which sets ``out``) in a fresh interpreter with the engine folders under ``root``."""
    prog = "import json\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    env = {**os.environ, SITES_ENV: str(root)}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_named_release_is_the_one_this_process_imports(tmp_path):
    _plant(tmp_path, "0.6.18")
    _plant(tmp_path, "0.7.4", cudnn="1.32.0")
    out = _run(tmp_path, """
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        why = select_engine("0.7.4")
        import flashinfer, cudnn
        out = {"why": why, "fi": flashinfer.__version__, "cudnn": cudnn.__version__, "file": flashinfer.__file__,
               "again": select_engine("0.7.4")}
    """)
    assert out["why"] == "" and out["again"] == ""
    assert (out["fi"], out["cudnn"]) == ("0.7.4", "1.32.0")
    assert out["file"].startswith(str(tmp_path / "0.7.4"))


def test_a_second_release_in_one_process_is_refused_naming_both(tmp_path):
    _plant(tmp_path, "0.6.18")
    _plant(tmp_path, "0.7.4")
    out = _run(tmp_path, """
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        out = {"first": select_engine("0.6.18"), "second": select_engine("0.7.4")}
    """)
    assert out["first"] == ""
    assert out["second"].startswith("engine=0.7.4: this process already imported FlashInfer 0.6.18 from ")
    assert "leave --no-isolate off" in out["second"]


def test_a_folder_holding_another_release_is_refused(tmp_path):
    _plant(tmp_path, "0.7.4", holds="0.7.3")
    out = _run(tmp_path, """
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        out = {"why": select_engine("0.7.4")}
    """)
    assert out["why"] == (f"engine=0.7.4: {tmp_path / '0.7.4'} holds FlashInfer 0.7.3; reinstall it with "
                          "scripts/flashinfer_wheels.sh")


def test_a_cudnn_frontend_from_elsewhere_is_refused(tmp_path):
    _plant(tmp_path, "0.7.4")
    other = tmp_path / "elsewhere" / "cudnn"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("__version__ = '1.28.0'\n")
    out = _run(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(other.parent)!r})
        import cudnn
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        out = {{"why": select_engine("0.7.4")}}
    """)
    assert out["why"].startswith("engine=0.7.4: this process already imported cudnn 1.28.0 from ")


def test_a_release_not_installed_names_the_commands_that_install_it(tmp_path):
    out = _run(tmp_path, """
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        import sys
        out = {"why": select_engine("0.7.4"), "imported": "flashinfer" in sys.modules}
    """)
    assert out["why"] == (f"engine=0.7.4: FlashInfer 0.7.4 is not installed in {tmp_path / '0.7.4'} (where a "
                          "registry is reachable: bash scripts/flashinfer_wheels.sh download .whl/flashinfer 0.7.4; "
                          "then, on the GPU machine: bash scripts/flashinfer_wheels.sh install .whl/flashinfer 0.7.4)")
    assert out["imported"] is False


def test_the_target_takes_only_the_known_releases():
    assert set(ENGINE_RELEASES) >= {"0.6.18", "0.7.4"}
    with pytest.raises(TargetError, match=r"engine"):
        resolve_target("flashinfer-cudnn@engine=0.5.0", "cpu")


def test_the_target_with_an_engine_says_why_it_cannot_run_here(tmp_path, monkeypatch):
    monkeypatch.setenv(SITES_ENV, str(tmp_path))  # nothing installed: refused before any import
    t = resolve_target("flashinfer-cudnn@engine=0.7.4", "cpu")
    assert not t.available and t.name == "flashinfer-cudnn@engine=0.7.4"
    assert t.reason == ("FlashInfer's cuDNN prefill runs on CUDA GPUs only; device=cpu (run with --device cuda on a "
                        "GPU machine)")


PLANTED = "open({marker!r}, 'w').write('ran')\n__version__ = '0.7.4'\n"


def test_an_engine_folder_is_never_imported_where_the_target_cannot_run(tmp_path):
    _plant(tmp_path, "0.7.4")
    marker = tmp_path / "imported"
    (tmp_path / "0.7.4" / "flashinfer" / "__init__.py").write_text(PLANTED.format(marker=str(marker)))
    out = _run(tmp_path, """
        import sys
        from kernel_oracle.fuzz.targets import resolve_target
        t = resolve_target("flashinfer-cudnn@engine=0.7.4", "cpu")
        out = {"available": t.available, "reason": t.reason, "imported": "flashinfer" in sys.modules}
    """)
    assert out["available"] is False and out["imported"] is False, out
    assert "runs on CUDA GPUs only" in out["reason"]
    assert not marker.exists()


def test_the_default_engine_folder_is_in_the_users_cache(tmp_path, monkeypatch):
    from kernel_oracle.fuzz.targets.flashinfer_engines import sites_root

    monkeypatch.delenv(SITES_ENV, raising=False)
    monkeypatch.setenv("KERNEL_ORACLE_CACHE", str(tmp_path / "cache"))
    assert sites_root() == tmp_path / "cache" / "flashinfer-sites"


def test_an_engine_folder_other_users_can_write_is_refused_before_any_import(tmp_path):
    root = tmp_path / "sites"
    _plant(root, "0.7.4")
    marker = tmp_path / "imported"
    init = root / "0.7.4" / "flashinfer" / "__init__.py"
    init.write_text(PLANTED.format(marker=str(marker)))
    (root / "0.7.4" / "flashinfer").chmod(0o777)  # any local user could have planted __init__.py
    out = _run(root, """
        import sys
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        out = {"why": select_engine("0.7.4"), "imported": "flashinfer" in sys.modules}
    """)
    assert out["imported"] is False and not marker.exists()
    assert out["why"] == (f"engine=0.7.4: not imported from {root / '0.7.4'}: {root / '0.7.4' / 'flashinfer'} "
                                 f"is writable by other users, so another user could have put code there; install "
                                 f"the release into a folder of your own ({SITES_ENV}, or the cache's default)"), out["why"]


@pytest.mark.skipif(os.getuid() != 0, reason="planting a folder of another user needs root (chown)")
def test_an_engine_folder_of_another_user_is_refused(tmp_path):
    root = tmp_path / "sites"
    _plant(root, "0.7.4")
    os.chown(root / "0.7.4", 65534, 65534)  # nobody's
    out = _run(root, """
        from kernel_oracle.fuzz.targets.flashinfer_engines import select_engine
        out = {"why": select_engine("0.7.4")}
    """)
    assert f"{root / '0.7.4'} is owned by uid 65534, not by you" in out["why"]


def test_the_matrix_gives_every_engine_release_a_column():
    cols = expand_targets(["flashinfer-cudnn"], configurations=True)
    assert cols == [f"flashinfer-cudnn@engine={v}" for v in ENGINE_RELEASES]


def test_the_wheels_script_reads_the_pins_of_a_release():
    here = os.path.dirname(__file__)
    engines = os.path.join(here, "..", "..", "fuzz", "targets", "flashinfer_engines.py")
    done = subprocess.run([sys.executable, engines, "wheels", "0.7.4"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == list(ENGINE_RELEASES["0.7.4"])
    bad = subprocess.run([sys.executable, engines, "wheels", "9.9"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage:" in bad.stderr


def test_a_known_flashinfer_issue_holds_only_in_the_releases_it_lists():
    from kernel_oracle.harness.known_issues import match_known

    finding = {"op": "vision", "kind": "contract", "message": "cuDNN: CUDNN_STATUS_BAD_PARAM_NULL_POINTER"}
    on = {v: match_known(finding, f"flashinfer-cudnn@engine={v}", v) for v in ("0.6.18", "0.7.4")}
    assert on["0.6.18"] is not None and on["0.6.18"].id == "flashinfer-cudnn-empty-batch"
    assert on["0.7.4"] is None  # not rechecked on 0.7.4: a finding there is new
    assert match_known(finding, "flashinfer-cudnn", "0.6.18").id == "flashinfer-cudnn-empty-batch"


def test_the_vision_wrappers_flashinfer_release_is_part_of_its_identity():
    """``sglang==X.Y.Z@engine=V`` runs the wrapper on FlashInfer V: on CUDA a column of its own in the matrix;
    on the CPU both run the pure-torch engine, the same code."""
    from kernel_oracle.fuzz.targets.sglang import release_identity

    from oracle_tests._sglang_releases import release_files

    release_files("0.5.23")  # skips without the wheel
    on_cuda = {spec: release_identity(spec, "vision", "cuda") for spec in ("sglang==0.5.23", "sglang==0.5.23@engine=0.7.4")}
    assert on_cuda["sglang==0.5.23@engine=0.7.4"].endswith("on the cuda FlashInfer 0.7.4 engine"), on_cuda
    assert len(set(on_cuda.values())) == 2
    assert release_identity("sglang==0.5.23@engine=0.7.4", "vision", "cpu") == release_identity("sglang==0.5.23", "vision", "cpu")
