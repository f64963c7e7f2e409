"""The README's five-minute path, walked as written from where a user stands: a scratch folder holding
the user's module (``my_kernels.py``) and the README's test file, ``kernel-oracle`` on the PATH as
``. .venv/bin/activate`` puts it there, no PYTHONPATH, nothing of this repository in the folder.

A correct module passes the test file and the fuzz campaign (exit 0), and ``report`` writes the page;
a planted bug (each segment's last row of ``step_a_q`` left zero, oracle_tests/_user_kernels.py) fails
the test file and is exactly one finding of the campaign, printed with its ``Where:`` and ``repro``
lines (exit 1).  The only change to the README's lines is a shorter ``--time`` (CI's budget)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from oracle_tests._scripts import ROOT
from oracle_tests._user_kernels import write_user_module
from oracle_tests.conftest import HAS_CUDA

README = ROOT / "README.md"
CI_TIME = "8"  # seconds of the README's `--time 60` here


def five_minute_section() -> str:
    text = README.read_text()
    start = text.index("## Test your changed kernel (five minutes)")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _block(section: str, language: str) -> str:
    (body,) = re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.S | re.M)
    return body


def _user_env(folder: Path) -> dict:
    """The environment of a user with the venv activated: its bin first on PATH, no PYTHONPATH, CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "TRITON_INTERPRET")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["HOME"] = env.get("HOME", str(folder))
    return env


def _walk(folder: Path, plant: str) -> list:
    """``(line, completed process)`` of every step of the five-minute path in ``folder``."""
    section = five_minute_section()
    test_file = _block(section, "python")
    first = test_file.splitlines()[0]  # "# test_my_kernels.py: python -m pytest test_my_kernels.py"
    name, _, command = first.lstrip("# ").partition(": ")
    write_user_module(folder, "my_kernels", plant)
    (folder / name).write_text(test_file)
    env, steps = _user_env(folder), []
    for line in [command, *(ln for ln in _block(section, "bash").splitlines() if ln.strip())]:
        argv = shlex.split(line)
        if argv[0] == "python":
            argv[0] = sys.executable  # the venv's python, as `python` is once it is activated
        argv = [CI_TIME if i and argv[i - 1] == "--time" else a for i, a in enumerate(argv)]
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        steps.append((line, done))
    return steps


@pytest.mark.skipif(HAS_CUDA, reason="the path is walked on the CPU as CI has it (CUDA hidden would not hide a "
                                     "GPU build of torch from the README's DEVICE line)")
def test_a_correct_module_walks_the_five_minute_path_clean(tmp_path):
    for line, done in _walk(tmp_path, ""):
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs" / "mine" / "report.html").is_file()


@pytest.mark.skipif(HAS_CUDA, reason="the path is walked on the CPU as CI has it")
def test_a_planted_bug_fails_the_test_and_is_one_finding(tmp_path):
    steps = dict((line.split()[0] + " " + line.split()[1], done) for line, done in _walk(tmp_path,
                                                                                     "step_a_drops_segment_end"))
    pytest_run, fuzz, report = steps["python -m"], steps["kernel-oracle fuzz"], steps["kernel-oracle report"]
    assert pytest_run.returncode == 1, pytest_run.stdout[-3000:]
    assert "Where: token=" in pytest_run.stdout and "Reproduce:" in pytest_run.stdout, pytest_run.stdout[-3000:]
    assert fuzz.returncode == 1, fuzz.stdout[-3000:] + fuzz.stderr[-2000:]
    ids = set(re.findall(r"^FINDING (F\d+-[\w-]+):", fuzz.stdout, flags=re.M))  # printed when found and at the end
    assert ids == {"F0001-mismatch-step_a_q"}, fuzz.stdout[-3000:]
    assert "  Where: token=" in fuzz.stdout and "  repro: kernel-oracle repro runs/mine/cases/" in fuzz.stdout
    assert report.returncode == 0 and (tmp_path / "runs" / "mine" / "report.html").is_file()
