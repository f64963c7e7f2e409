"""Compiled kernels persist by default (Note [Kernel cache] in harness/device.py): where a compiling
worker's ``TRITON_CACHE_DIR`` points, and what wins over the default."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernel_oracle.harness.device import cache_root, worker_env


def test_a_compiling_worker_gets_the_user_cache(tmp_path):
    base = {"PATH": "/bin", "KERNEL_ORACLE_CACHE": str(tmp_path / "ko")}
    env = worker_env("cuda", base)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "ko" / "triton")
    assert (tmp_path / "ko" / "triton").is_dir()
    assert "TRITON_CACHE_DIR" not in base  # the caller's mapping is untouched
    assert "TRITON_CACHE_DIR" not in worker_env("cpu", base)  # the interpreter compiles nothing


def test_without_the_variable_the_cache_is_under_the_home():
    assert cache_root({"KERNEL_ORACLE_CACHE": "~/x"}) == os.path.expanduser("~/x")
    assert cache_root({}) == os.path.expanduser("~/.cache/kernel-oracle")


def test_the_users_triton_cache_dir_wins(tmp_path):
    mine = str(tmp_path / "mine")
    env = worker_env("cuda", {"TRITON_CACHE_DIR": mine, "KERNEL_ORACLE_CACHE": str(tmp_path / "ko")})
    assert env["TRITON_CACHE_DIR"] == mine and not (tmp_path / "ko").exists()


def test_the_triton_cache_option_wins(tmp_path):
    env = worker_env("cuda", {"TRITON_CACHE_DIR": "/elsewhere", "KERNEL_ORACLE_CACHE": str(tmp_path / "ko")},
                     triton_cache=tmp_path / "opt")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "opt")


def test_an_unwritable_cache_root_leaves_tritons_default(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the cache root's directory would go
    assert "TRITON_CACHE_DIR" not in worker_env("cuda", {"KERNEL_ORACLE_CACHE": str(blocker)})


def _child_env(code: str, env: dict) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("preset", [None, "user", "option"])
def test_a_compiling_process_and_its_workers_share_one_cache(tmp_path, preset):
    """configure_process("cuda") (a CLI command, a GPU test session) sets the default before anything
    compiles, after ``--triton-cache`` (use_triton_cache) or the user's variable; workers inherit it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_INTERPRET")}
    env["KERNEL_ORACLE_CACHE"] = str(tmp_path / "ko")
    want = str(tmp_path / "ko" / "triton")
    code = "from kernel_oracle.harness.device import configure_process, use_triton_cache, worker_env\n"
    if preset == "user":
        env["TRITON_CACHE_DIR"] = want = str(tmp_path / "user")
    elif preset == "option":
        code += f"use_triton_cache({str(tmp_path / 'opt')!r})\n"
        want = str(tmp_path / "opt")
    code += "import os; configure_process('cuda'); print(os.environ['TRITON_CACHE_DIR'], worker_env('cuda')['TRITON_CACHE_DIR'])"
    assert _child_env(code, env).split() == [want, want]
