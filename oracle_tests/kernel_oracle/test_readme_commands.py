"""Every command block of the README runs as written (issue: no README command may fail again).

The README's ``bash`` blocks are run line by line in order, on the CPU, each with a tiny budget
(``--time`` 3 s for a campaign, 2 s per matrix campaign, 40 s for the main job, which needs that to
reach every part; ``--cases`` 1 for a campaign), and every path under ``runs/`` or
``reports/out`` lands in a temporary directory (the same one for every line, so ``report runs/mine``
reads what ``fuzz ... --out runs/mine`` wrote).  ``my_kernels``, the README's stand-in for the
reader's module, is a module that re-exports the example project's plain-torch kernels
(``examples/external_tests/toy_kernels``).  The ``python`` block is the reader's test file: it runs
under pytest.  Lines that need a GPU (``--device cuda``) are parsed by the command line's own
parser only.  ``bash scripts/test.sh`` is this suite: it is checked to exist, not run again.
Every line must exit 0, except one whose comment says ``exit 1`` (a command that finds a known bug
of a release): 0 or 1 there, since the tiny budget may not reach the bug; never 2 (usage) or 3.  A
tiny budget is short on a busy or slow machine: a line that stopped only for want of time (exit 3, its
output saying ``pass a larger --time``) runs again with twice the time, up to :data:`BUDGET_DOUBLINGS`
times, so the verdict holds on a machine ten times slower.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_oracle.cli import build_parser

from oracle_tests._scripts import ROOT
from oracle_tests.conftest import HAS_CUDA

README = ROOT / "README.md"
TIME = {"fuzz": "3", "matrix": "2", "run": "40"}  # seconds of --time per subcommand
BUDGET_DOUBLINGS = 4  # 16 times the time at most: enough for a machine ten times slower
OUT_PREFIXES = ("runs/", "reports/out")
MY_KERNELS = "from toy_kernels.lora import step_a_q_fwd, step_a_v_fwd  # noqa: F401\n"


def blocks(language: str) -> list[str]:
    """The bodies of the README's fenced blocks of ``language``."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def commented_lines() -> list[tuple[str, str]]:
    """``(command, comment)`` of every line of the ``bash`` blocks."""
    lines = []
    for body in blocks("bash"):
        for line in body.splitlines():
            command, _, comment = line.partition("  #")
            if command.strip() and not command.strip().startswith("#"):
                lines.append((command.strip(), comment.strip()))
    return lines


def command_lines() -> list[str]:
    """Every command of the ``bash`` blocks, comments dropped."""
    return [command for command, _ in commented_lines()]


def tiny(argv: list[str], tmp: Path) -> list[str]:
    """``argv`` (a subcommand and its options) with the budget made tiny and the output paths moved
    under ``tmp``."""
    out = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] == "--time":
            arg = TIME[argv[0]]
        elif i and argv[i - 1] == "--cases" and argv[0] in TIME:  # a campaign's cases (a mutant needs its own)
            arg = "1"
        elif arg.startswith(OUT_PREFIXES):
            arg = str(tmp / arg)
        out.append(arg)
    return out


def needs_gpu(argv: list[str]) -> bool:
    return "--device" in argv and argv[argv.index("--device") + 1] == "cuda"


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    paths = [str(tmp / "modules"), str(ROOT / "examples" / "external_tests"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, as CI has it
    return env


def run_line(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """Run one README line; again with twice its ``--time`` while it stops only for want of time."""
    for _ in range(BUDGET_DOUBLINGS):
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 3 or "pass a larger --time" not in done.stdout + done.stderr or "--time" not in argv:
            return done
        at = argv.index("--time") + 1
        argv = [*argv[:at], f"{2 * float(argv[at]):g}", *argv[at + 1:]]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def test_the_readme_has_the_five_minute_path_and_the_two_set_up_commands():
    lines = command_lines()
    assert "bash scripts/main.sh" in lines and "bash scripts/test.sh" in lines
    assert any(line.startswith("kernel-oracle fuzz --targets my_kernels") for line in lines)
    assert any(line.startswith("kernel-oracle report ") for line in lines)
    assert any("assert_matches" in body for body in blocks("python"))
    assert len(README.read_text().splitlines()) < 120


def test_every_kernel_oracle_line_parses():
    parser = build_parser()
    for line in command_lines():
        argv = shlex.split(line)
        if argv[0] == "kernel-oracle":
            parser.parse_args(argv[1:])  # a usage error exits 2: SystemExit fails the test with the line


@pytest.mark.skipif(HAS_CUDA, reason="the README's lines run here as on a CPU machine (CUDA hidden): on a GPU host "
                                     "bash scripts/main.sh would build a CPU-torch .venv into this checkout (pip, "
                                     "network) and the kernels would run under this host's Triton interpreter")
def test_every_readme_command_runs_as_written(tmp_path):
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "my_kernels.py").write_text(MY_KERNELS)
    env, failed = _env(tmp_path), []
    for body in blocks("python"):
        test_file = tmp_path / "modules" / "test_my_kernels.py"
        test_file.write_text(body)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode:
            failed.append(("the python block", done.stdout[-2000:] + done.stderr[-2000:]))
    for line, comment in commented_lines():
        argv = shlex.split(line)
        allowed = {0, 1} if re.search(r"\bexit 1\b", comment) else {0}
        if argv[:2] == ["bash", "scripts/test.sh"]:
            assert (ROOT / "scripts" / "test.sh").is_file()  # this suite: not run again
            continue
        if needs_gpu(argv):
            continue  # parsed by test_every_kernel_oracle_line_parses
        if argv[:2] == ["bash", "scripts/main.sh"]:
            argv = argv + ["--time", TIME["run"], "--out", str(tmp_path / "reports/out")]
        elif argv[0] == "kernel-oracle":
            argv = [sys.executable, "-m", "kernel_oracle", *tiny(argv[1:], tmp_path)]
        done = run_line(argv, env)
        if done.returncode not in allowed:
            failed.append((f"{line} (exit {done.returncode})", done.stdout[-2000:] + done.stderr[-2000:]))
    assert not failed, "\n\n".join(f"README: {what}\n{out}" for what, out in failed)


_NEEDS_80_S = ("import sys\n"  # argv: LOG WHY --time SECONDS
               "open(sys.argv[1], 'a').write(sys.argv[4] + ' ')\n"
               "if sys.argv[2] == 'budget' and float(sys.argv[4]) < 80:\n"
               "    print('note: time budget exhausted: campaigns not run for x; pass a larger --time'); sys.exit(3)\n"
               "sys.exit(3 if sys.argv[2] == 'broken' else 0)\n")


@pytest.mark.parametrize("why, runs, code", [("budget", "40 80 ", 0), ("broken", "40 ", 3)])
def test_a_line_short_of_time_on_a_slow_machine_runs_again_with_twice_the_time(tmp_path, why, runs, code):
    """A machine on which 40 s reach only part of the job (exit 3, "pass a larger --time"): the line runs again
    with 80 s and passes; a line that exits 3 for another reason runs once."""
    log = tmp_path / "runs"
    done = run_line([sys.executable, "-c", _NEEDS_80_S, str(log), why, "--time", "40"], dict(os.environ))
    assert done.returncode == code and log.read_text() == runs, (done, log.read_text())
