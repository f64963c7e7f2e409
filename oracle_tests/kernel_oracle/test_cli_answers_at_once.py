"""The command line answers at once: ``--help``, ``--version`` and every usage error are decided before torch
(or Hypothesis, or numpy) is imported, so they take about as long as starting Python does."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

# what only the work needs: a usage error that imports one of them waits for it (seconds on a loaded machine)
HEAVY = ("torch", "hypothesis", "numpy", "triton")

# (argv, exit code): every usage error a command decides from its arguments alone, and the help texts
ANSWERS = [
    (["--version"], 0), (["--help"], 0), ([], 2), (["nosuchcommand"], 2),
    *[([c, "--help"], 0) for c in ("run", "selfcheck", "fuzz", "mutants", "repro", "report", "compare", "bench",
                                   "matrix")],
    (["run", "--op", "bogus"], 2), (["run", "--op", "step_a_q"], 2), (["run", "--time", "-1"], 2),
    (["run", "--db", "redis://h:6379/0"], 2), (["run", "--out", "{file}"], 2), (["run", "--device", "tpu"], 2),
    (["run", "--gpus", "2", "--scheduler", "tcp://h:8786"], 2),
    (["selfcheck", "--cases", "-1"], 2),
    (["fuzz", "--op", "lora", "--out", "o"], 2), (["fuzz", "--targets", "reference", "--op", "bogus", "--out", "o"], 2),
    (["fuzz", "--targets", "reference", "--op", "step_a_q,vision", "--out", "o"], 2),
    (["fuzz", "--targets", "reference,triton", "--op", "lora", "--out", "o"], 2),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "o", "--shards", "2"], 2),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "o", "--seeds", "2"], 2),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "o", "--time", "nan"], 2),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "o", "--with-malformed",
      "--upstream-contracts-only"], 2),
    (["fuzz", "--targets", "reference", "--op", "lora", "--out", "{file}"], 2),
    (["mutants", "--op", "bogus"], 2), (["mutants", "nosuchmutant"], 2), (["mutants", "--json", "{dir}"], 2),
    (["repro", "--targets", "reference"], 2), (["repro", "{dir}/none.pt", "--targets", "reference"], 2),
    (["repro", "--case-json", "{{bad", "--targets", "reference"], 2),
    (["repro", "x.pt", "--targets", "reference,triton"], 2),
    (["report", "{dir}/none.json"], 2), (["compare", "{dir}/a.json", "{dir}/b.json"], 2),
    (["bench", "--op", "bogus"], 2), (["bench", "--out", "{file}"], 2),
    (["matrix", "--targets", "sglang==0.5.12", "--op", "bogus"], 2),
    (["matrix", "--targets", "sglang==0.5.12,sglang==0.5.12"], 2),
]

# runs each argv through main() in one process, noting after each the heavy modules imported so far
_PROBE = """
import contextlib, io, json, sys
from kernel_oracle.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    out.append({"argv": argv, "code": code, "stderr": err.getvalue(),
                "heavy": [m for m in %r if m in sys.modules]})
print(json.dumps(out))
""" % (HEAVY,)


def test_help_version_and_usage_errors_import_no_torch(tmp_path):
    (tmp_path / "afile").write_text("")
    argvs = [[a.format(file=tmp_path / "afile", dir=tmp_path) for a in argv] for argv, _ in ANSWERS]
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for got, (_, code) in zip(json.loads(proc.stdout), ANSWERS):
        # the first answer that imported a heavy module is the one that did it: each is checked in order
        assert not got["heavy"], f"{got['argv']} imported {got['heavy']} before answering"
        assert got["code"] == code, got
        if code == 2 and got["argv"]:
            assert got["stderr"].count("\n") == 1 and "Traceback" not in got["stderr"], got


def _fastest(argv: list, runs: int = 3) -> float:
    """The fastest of ``runs`` wall-clock times of ``argv`` (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, timeout=120)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("argv", [["--version"], ["fuzz", "--help"], ["fuzz", "--op", "lora"]],
                         ids=["version", "help", "usage-error"])
def test_the_command_line_answers_within_a_second_of_starting_python(argv):
    """Against ``python -c pass`` measured here and now, so a loaded machine slows both alike."""
    python = _fastest([sys.executable, "-c", "pass"])
    answer = _fastest([sys.executable, "-m", "kernel_oracle", *argv])
    assert answer - python < 1.0, f"kernel-oracle {' '.join(argv)}: {answer:.2f}s, python -c pass: {python:.2f}s"
