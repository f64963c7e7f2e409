"""Cluster campaigns for real: a real Redis server on loopback and a real local Dask cluster
of two CPU worker processes; never a mock.

The target is a planted-bug user module (pure torch: the reference's ``step_a_q_fwd`` made wrong for
fp32 batches of 3+ tokens), run in the Dask worker's process (``isolate=False``) so a case costs
milliseconds.  .ci/run installs ``redis-server`` and the cluster extra and sets
``KERNEL_ORACLE_REQUIRE=cluster``, so there a missing piece fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_oracle.fuzz.campaign_config import CampaignConfig

from ..conftest import REQUIRED as REQUIRED_PIECES

REQUIRED = "cluster" in REQUIRED_PIECES
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"

PLANTED = '''"""A LoRA step A with a planted bug: fp32 batches of 3 or more tokens come out wrong."""
import time

import torch

from kernel_oracle.reference.lora import step_a_q_fwd as _reference

KERNEL_ORACLE_STRICT = True
SLEEP_S = float(__import__("os").environ.get("PLANTED_SLEEP_S", "0"))


def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    time.sleep(SLEEP_S)
    out = _reference(q_nope, B_buf, batch_info, full_K_per_head)
    if q_nope.dtype == torch.float32 and q_nope.shape[0] >= 3:
        out = out + 1.0
    return out
'''
TARGET = "planted_pkg.buggy"


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        if REQUIRED:
            raise
        pytest.skip(f"{module} is not installed (pip install 'kernel-oracle[cluster]'; .ci/run installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    """A real redis-server on a free loopback port, no persistence; stopped in teardown."""
    redis = _need("redis")
    if not os.path.exists(REDIS_SERVER):
        if REQUIRED:
            pytest.fail(f"{REDIS_SERVER} is missing; .ci/run installs the Debian package redis-server")
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    port = _free_port()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail(f"redis-server did not answer on port {port}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    (root / "planted_pkg").mkdir()
    (root / "planted_pkg" / "__init__.py").write_text("")
    (root / "planted_pkg" / "buggy.py").write_text(PLANTED)
    return root


@pytest.fixture(scope="module")
def client(planted_dir):
    """A real local Dask cluster: two single-threaded CPU worker processes with small memory limits."""
    _need("dask")
    distributed = _need("distributed")
    import dask

    env = {"TRITON_INTERPRET": "1", "PLANTED_SLEEP_S": "0.03", "OMP_NUM_THREADS": "1"}
    # spawned worker processes (a restarted one too) start with this process's sys.path
    sys.path.insert(0, str(planted_dir))
    # non-daemonic workers: a campaign with isolate=True (the main job's) starts its target worker process
    with dask.config.set({"distributed.scheduler.allowed-failures": 3, "distributed.worker.daemon": False}):
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           memory_limit="1.5GiB", dashboard_address=None, env=env)
        c = distributed.Client(cluster)
        try:
            c.wait_for_workers(2, timeout=120)
            yield c
        finally:
            c.close()
            cluster.close()
            sys.path.remove(str(planted_dir))


def _settings(out_dir, **kw) -> CampaignConfig:
    """What every shard of these tests shares (each shard replaces its target, op, seed and dtype)."""
    return CampaignConfig(target=TARGET, op="step_a_q", out_dir=out_dir, device="cpu", isolate=False, limits="tiny",
                          shrink_allowance=40, **kw)


def _findings(path: Path) -> list:
    p = path / "findings.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def test_a_failure_found_by_one_worker_is_replayed_by_the_other_through_redis(client, redis_url, tmp_path):
    from kernel_oracle.fuzz.cluster import Shard, run_shard

    a_addr, b_addr = sorted(client.scheduler_info()["workers"])
    a = client.submit(run_shard, Shard(TARGET, "step_a_q", "float32", 1), _settings(tmp_path, budget=60),
                      out_dir=str(tmp_path / "a"), db_url=redis_url, workers=[a_addr], pure=False).result()
    found = [f for f in a["record"]["findings"] if f["kind"] == "mismatch"]
    assert found, a["record"]["findings"]
    # worker B, another seed, one case: without the shared database it does not meet the bug ...
    alone = client.submit(run_shard, Shard(TARGET, "step_a_q", "float32", 2), _settings(tmp_path, budget=1),
                          out_dir=str(tmp_path / "alone"), workers=[b_addr], pure=False).result()
    assert alone["record"]["findings"] == []
    # ... with it, its first case is A's finding, replayed
    b = client.submit(run_shard, Shard(TARGET, "step_a_q", "float32", 2), _settings(tmp_path, budget=1),
                      out_dir=str(tmp_path / "b"), db_url=redis_url, workers=[b_addr], pure=False).result()
    assert b["pid"] != a["pid"]
    assert [f["problem"] for f in b["record"]["findings"]] == [found[0]["problem"]]
    assert b["record"]["findings"][0]["bucket"] == found[0]["bucket"]
    assert b["record"]["campaign"]["executed"] == 1


def test_killing_a_worker_mid_campaign_loses_no_finding(client, tmp_path):
    from kernel_oracle.fuzz.cluster import Shard, merge_records, run_shard

    shard = Shard(TARGET, "step_a_q", "float32", 5)
    fut = client.submit(run_shard, shard, _settings(tmp_path, budget=120), out_dir=str(tmp_path), pure=False)
    shard_dir = tmp_path / "shards" / shard.name
    deadline = time.monotonic() + 60
    while not _findings(shard_dir) and time.monotonic() < deadline and not fut.done():
        time.sleep(0.05)
    before = _findings(shard_dir)
    assert before and not fut.done(), "the campaign should have found the bug and still be running"
    pid = int((shard_dir / ".lock").read_text())
    saved = shard_dir / "state.json"
    executed_at_kill = json.loads(saved.read_text())["executed"] if saved.exists() else 0
    os.kill(pid, signal.SIGKILL)  # the worker process running the campaign
    res = fut.result(timeout=120)  # rescheduled on a (restarted) worker, resumed in the shard directory
    assert res["pid"] != pid
    merged = merge_records([res], tmp_path, "cpu")
    ids = {f["id"].split("/")[-1] for f in merged["findings"]}
    assert {f["id"] for f in before} <= ids
    assert _findings(tmp_path)  # the merged findings.jsonl in the coordinator's out dir
    assert res["record"]["campaign"]["executed"] > executed_at_kill  # resumed, not restarted from nothing


def test_run_cluster_merges_shards_into_one_bucketed_report(client, redis_url, tmp_path):
    from kernel_oracle.fuzz.cluster import plan_shards, run_cluster

    shards = plan_shards([TARGET], ["step_a_q"], ["float32"], [11, 12])
    rec = run_cluster(shards, _settings(tmp_path, budget=30), client=client, db_url=redis_url)
    # both shards meet the one planted defect: one finding, found by both, counted for both
    mism = [f for f in rec["findings"] if f["kind"] == "mismatch"]
    assert len(mism) == 1 and len(mism[0]["shards"]) == 2, rec["findings"]
    assert sum(g["cases"] for g in rec["groups"]) == sum(s["executed"] for s in rec["campaign"]["shards"])
    assert (tmp_path / "summary.json").exists() and len(_findings(tmp_path)) == len(rec["findings"])


def test_gpus_on_a_cpu_only_machine_is_one_line_and_exit_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the message is for CPU-only machines")
    proc = subprocess.run([sys.executable, "-m", "kernel_oracle", "fuzz", "--targets", "reference", "--op", "lora",
                           "--cases", "1", "--out", str(tmp_path / "o"), "--gpus", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("kernel-oracle fuzz: error: --gpus 2: this machine has no GPU (torch sees none); run "
                           "without --gpus, or pass --scheduler tcp://HOST:8786 to use a cluster's workers\n")


def test_a_plain_fuzz_run_imports_no_dask(tmp_path):
    code = ("import sys; from kernel_oracle.cli import main; "
            "rc = main(['fuzz', '--targets', 'reference', '--op', 'vision', '--cases', '2', '--out', sys.argv[1], "
            "'--quiet', '--device', 'cpu']); "
            "bad = [m for m in ('dask', 'distributed', 'redis') if m in sys.modules]; "
            "print(rc, bad)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "o")], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "0 []", proc.stdout + proc.stderr


FAILING_PROPERTY = '''from hypothesis import given, settings, strategies as st


@settings(max_examples=200)
@given(st.integers(0, 10**6))
def test_small(x):
    assert x < 1000
'''


def test_oracle_db_makes_pytest_properties_share_failures_through_redis(redis_url, tmp_path):
    import redis

    (tmp_path / "test_prop.py").write_text(FAILING_PROPERTY)
    client = redis.Redis.from_url(redis_url)
    before = set(client.keys("kernel-oracle-pytest:*"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--oracle-db", redis_url,
           str(tmp_path / "test_prop.py")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert first.returncode == 1 and "x=1000" in first.stdout, first.stdout[-2000:]
    assert set(client.keys("kernel-oracle-pytest:*")) - before  # the shrunk failure is in Redis
    # another checkout (no local .hypothesis directory) replays it from Redis as its first example
    other = tmp_path / "other"
    other.mkdir()
    (other / "test_prop.py").write_text(FAILING_PROPERTY.replace("max_examples=200", "max_examples=1"))
    again = subprocess.run([*cmd[:-1], str(other / "test_prop.py")], capture_output=True, text=True, timeout=120,
                           cwd=other)
    assert again.returncode == 1 and "x=1000" in again.stdout, again.stdout[-2000:]


def test_xdist_workers_are_pinned_one_gpu_each():
    from kernel_oracle.pytest.plugin import pin_xdist_worker

    env = {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert pin_xdist_worker(env) == "5" and env["CUDA_VISIBLE_DEVICES"] == "5"
    env = {"PYTEST_XDIST_WORKER": "gw2", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert pin_xdist_worker(env) == "2" and env["CUDA_VISIBLE_DEVICES"] == "2"
    one = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "7"}
    assert pin_xdist_worker(one) is None and one["CUDA_VISIBLE_DEVICES"] == "7"  # one GPU: untouched
    assert pin_xdist_worker({"CUDA_VISIBLE_DEVICES": "0,1"}) is None  # not an xdist worker


def test_fuzz_and_run_take_a_scheduler_and_a_shared_db(client, redis_url, tmp_path, capsys):
    from kernel_oracle.cli import main as cli_main
    from kernel_oracle.harness.schema import load

    addr = client.scheduler.address
    rc = cli_main(["fuzz", "--targets", TARGET, "--op", "step_a_q", "--cases", "20", "--shards", "2",
                   "--dtypes", "float32", "--device", "cpu", "--no-isolate", "--limits", "tiny", "--quiet",
                   "--scheduler", addr, "--db", redis_url, "--out", str(tmp_path / "fuzz")])
    out = capsys.readouterr().out
    assert rc == 1, out
    summary = load(tmp_path / "fuzz" / "summary.json")
    assert [s["seed"] for s in summary["campaign"]["shards"]] == [0, 1]
    assert any(f["kind"] == "mismatch" for f in summary["findings"]) and "FINDING" in out
    rc = cli_main(["run", "--scheduler", addr, "--targets", "reference", "--op", "vision", "--device", "cpu",
                   "--time", "12", "--no-selfcheck", "--quiet", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0, out
    latest = load(tmp_path / "run" / "latest.json")
    assert sum(g["cases"] for g in latest["groups"] if g["target"] == "reference") > 0
    assert latest["summary"]["campaigns"] == [{"target": "reference", "family": "vision", "seed": 0,
                                               "out_dir": latest["summary"]["run_dir"]}]


def test_the_gpu_cluster_pins_one_gpu_per_worker_before_it_starts():
    """The --gpus cluster, built here without GPUs: each worker process sees only its own GPU id and
    offers GPU=1 (dask-cuda when importable, else distributed's nannies with the same environment)."""
    distributed = _need("distributed")
    from kernel_oracle.fuzz.cluster import start_local_cluster

    with start_local_cluster(2, gpus=True, memory_limit="1GiB") as cluster, distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=120)
        seen = c.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        resources = [w["resources"] for w in c.scheduler_info()["workers"].values()]
    assert sorted(seen.values()) == ["0", "1"]
    assert resources == [{"GPU": 1}, {"GPU": 1}]


def test_an_unreachable_redis_is_one_line_and_exit_2(tmp_path, capsys):
    _need("redis")
    from kernel_oracle.cli import main as cli_main

    port = _free_port()  # nothing listens there
    rc = cli_main(["fuzz", "--targets", "reference", "--op", "vision", "--cases", "1", "--device", "cpu",
                   "--quiet", "--db", f"redis://127.0.0.1:{port}/0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"kernel-oracle fuzz: error: --db redis://127.0.0.1:{port}/0: cannot reach Redis (")
