"""Campaigns over many GPUs and machines: shards of :func:`fuzz.campaign.run_campaign` on a Dask cluster.

Note [Cluster campaigns]
------------------------
The work is cut into *shards*, one per target x op x dtype x seed (an SGLang release is part of the
target: ``sglang==0.5.23``).  Each shard is one ordinary campaign (:func:`fuzz.campaign.run_campaign`
of the shared :class:`~fuzz.campaign_config.CampaignConfig` with the shard's target, op, seed and
dtype: :meth:`Shard.config`) in its own directory ``<out>/shards/<shard>/``, run as a Dask task:

* **one node** (``--gpus N|all``): a local cluster of N worker processes, one thread each, each
  pinned to one GPU through ``CUDA_VISIBLE_DEVICES`` set before the worker starts (dask-cuda's
  ``LocalCUDACluster`` when it is importable, else ``distributed``'s ``SpecCluster`` of nannies with
  the same per-worker environment; both offer the resource ``GPU=1`` per worker);
* **many machines** (``--scheduler tcp://HOST:8786``): the tasks go to an existing cluster (``dask
  worker --resources GPU=1`` per GPU, dask-jobqueue, dask-kubernetes); docs/scaling.md shows a launch.

A worker that dies mid-shard (killed, out of memory, a segfault in a kernel) is restarted by its
nanny and Dask reschedules the task (``allowed-failures``); the rescheduled campaign resumes in the
same shard directory (the lock dies with the process; :class:`fuzz.state.CampaignState` recovers
torn files), so no saved finding is lost; a task that raises is retried ``RETRIES`` times.  Every task
returns its record and the bytes of its case files, written into the coordinator's shard directory
when that is not the directory the worker wrote (another host), so findings always land in the
coordinator's ``--out``.  The shards' records merge into one bucketed ``summary.json`` and
``findings.jsonl`` (:func:`merge_records`: a finding whose bucket, :mod:`harness.buckets`, is
covered by an earlier shard's finding adds its count to it instead of being listed twice).

``--db redis://HOST:6379/N`` gives every shard one Hypothesis example database
(``hypothesis.extra.redis.RedisExampleDatabase``, keys prefixed per target x family) through which
campaigns share their findings' cases (Note [Campaigns]): a failure one worker finds, every other
worker replays first.  dask, distributed, redis and dask-cuda are optional (the ``cluster`` extra)
and imported only here, only when used.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Optional

from kernel_oracle.fuzz.campaign_config import CampaignConfig
from kernel_oracle.harness.targets import TargetSpec

__all__ = ["ClusterError", "RETRIES", "Shard", "gpu_count", "merge_records", "open_database", "plan_shards",
           "resolve_gpus", "run_cluster", "run_shard", "start_local_cluster"]

# retries of a shard whose task raised (a worker's death is rescheduled by Dask on top of these)
RETRIES = 2


class ClusterError(ValueError):
    """A usage error of a cluster campaign (exit code 2 in the CLI): no GPU, no dask, a bad URL."""


@dataclass(frozen=True, order=True)
class Shard:
    """One campaign of the plan: ``target`` x ``op`` (a family or one op) x ``dtype`` (None: all) x ``seed``."""

    target: str
    op: str
    dtype: Optional[str]
    seed: int

    @property
    def name(self) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.target)
        return f"{safe}--{self.op}--{self.dtype or 'all'}--s{self.seed}"

    def config(self, settings: CampaignConfig, out_dir) -> CampaignConfig:
        """This shard's campaign: ``settings`` with its target, op, seed and dtype, in
        ``out_dir/shards/<name>``, without a progress bar."""
        return replace(settings, target=self.target, op=self.op, seed=self.seed, progress=False,
                       dtypes=(self.dtype,) if self.dtype else None, out_dir=Path(out_dir) / "shards" / self.name)


def plan_shards(targets: Iterable, ops: Iterable[str], dtypes: Optional[Iterable[str]],
                seeds: Iterable[int]) -> list[Shard]:
    """Every target x op x dtype x seed (``dtypes`` None: one shard covers all dtypes); targets are
    spec strings or :class:`~kernel_oracle.harness.targets.TargetSpec` (kept as canonical strings)."""
    specs = [str(TargetSpec.parse(t)) for t in targets]
    return [Shard(t, o, d, s) for t in specs for o in ops for d in (list(dtypes) if dtypes else [None])
            for s in seeds]


def gpu_count() -> int:
    """GPUs torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_gpus(spec: str, available: Optional[int] = None) -> int:
    """``--gpus N|all`` -> the number of workers; :class:`ClusterError` (one line) when this machine
    has fewer GPUs, none included."""
    have = gpu_count() if available is None else available
    if spec == "all":
        n = have
    else:
        try:
            n = int(spec)
        except ValueError:
            raise ClusterError(f"--gpus {spec!r}: expected a positive integer or 'all'") from None
        if n < 1:
            raise ClusterError(f"--gpus {spec!r}: expected a positive integer or 'all'")
    if have == 0:
        raise ClusterError(f"--gpus {spec}: this machine has no GPU (torch sees none); run without --gpus, "
                           f"or pass --scheduler tcp://HOST:8786 to use a cluster's workers")
    if n > have:
        raise ClusterError(f"--gpus {spec}: this machine has only {have} GPU(s); pass --gpus {have} or --gpus all")
    return n


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ClusterError(f"{module} is not installed; install the cluster extra: "
                           f"pip install 'kernel-oracle[cluster]'") from None


def open_database(url: str, target: str, family: str):
    """The shared Hypothesis example database of ``redis://HOST:PORT/N`` for ``target`` x ``family``."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ClusterError(f"--db {url!r}: expected redis://HOST:6379/N")
    redis = _need("redis")
    from hypothesis.extra.redis import RedisExampleDatabase

    client = redis.Redis.from_url(url)
    try:  # a bad URL or a Redis that is down: one clear error before any work
        client.ping()
    except redis.RedisError as exc:
        raise ClusterError(f"--db {url}: cannot reach Redis ({exc})") from None
    return RedisExampleDatabase(client, key_prefix=f"kernel-oracle:{target}:{family}:".encode())


def start_local_cluster(n_workers: int, *, gpus: bool, memory_limit: str = "auto"):
    """A local cluster of ``n_workers`` single-threaded worker processes; with ``gpus`` each is pinned
    to GPU i (``CUDA_VISIBLE_DEVICES=i``) and offers the resource ``GPU=1``.  Workers are not daemonic
    so a campaign may start its isolated target worker process."""
    dask = _need("dask")
    _need("distributed")
    dask.config.set({"distributed.worker.daemon": False})
    if gpus:
        try:
            from dask_cuda import LocalCUDACluster

            return LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(n_workers)), threads_per_worker=1,
                                    resources={"GPU": 1}, memory_limit=memory_limit)
        except ImportError:
            pass
        from distributed import Nanny, Scheduler, SpecCluster

        workers = {f"gpu{i}": {"cls": Nanny, "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)},
                                                         "resources": {"GPU": 1}, "memory_limit": memory_limit}}
                   for i in range(n_workers)}
        return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}})
    from distributed import LocalCluster

    return LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, memory_limit=memory_limit,
                        dashboard_address=None)


def _files_of(shard_dir: Path) -> dict:
    """The shard's case files (``cases/*``) by relative path -> bytes: what the coordinator needs to repro."""
    cases = shard_dir / "cases"
    return {f"cases/{p.name}": p.read_bytes() for p in sorted(cases.iterdir())} if cases.is_dir() else {}


def run_shard(shard: Shard, settings: CampaignConfig, *, out_dir: str, db_url: Optional[str] = None) -> dict:
    """Run one shard's campaign (on a Dask worker) in ``out_dir/shards/<name>``, resuming what a killed
    attempt left; ``settings``: what every shard shares (:meth:`Shard.config`).  Returns ``{"shard",
    "record", "files", "host", "pid", "dir"}``."""
    import multiprocessing
    import socket

    from kernel_oracle.fuzz.campaign import run_campaign
    from kernel_oracle.harness.family import campaign_ops

    if settings.isolate and multiprocessing.current_process().daemon:
        raise ClusterError("this Dask worker is a daemonic process and cannot start the campaign's target worker "
                           "process; start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False "
                           "(docs/scaling.md) or pass --no-isolate")
    config = shard.config(settings, out_dir)
    database = open_database(db_url, shard.target, campaign_ops(shard.op)[0]) if db_url else None
    record = run_campaign(config, database=database)
    return {"shard": asdict(shard), "record": record, "files": _files_of(config.out_dir), "host": socket.gethostname(),
            "pid": os.getpid(), "dir": str(config.out_dir.resolve())}


def merge_records(results: list, out_dir: Path, device: str, wall_s: Optional[float] = None) -> dict:
    """One bucketed campaign record of the shards' results (in plan order), saved as
    ``out_dir/summary.json`` and ``out_dir/findings.jsonl``; each finding keeps its shard's ``repro``
    (its case file is in ``out_dir/shards/<shard>/cases``) and says which shard found it.  ``wall_s``:
    the cluster's wall-clock time, giving ``campaign.cases_per_s`` (all workers together)."""
    from kernel_oracle.harness.buckets import bucket_of_record
    from kernel_oracle.harness.headline import headline
    from kernel_oracle.harness.schema import add_finding, add_group, add_note, add_target, new_record, save
    from kernel_oracle.harness.tile_coverage import CoverageTable

    merged = new_record("campaign", seeds={"shards": [r["shard"] for r in results]}, device=device)
    kept: list = []  # (bucket, finding) of the merged findings
    coverage = CoverageTable()  # the shards' cases together (Note [Tile coverage] in harness.tile_coverage)
    for res in results:
        rec, name = res["record"], Shard(**res["shard"]).name
        for g in rec["groups"]:
            add_group(merged, target=g["target"], op=g["op"], dtype=g["dtype"], shape_class=g["shape_class"],
                      cases=g["cases"], passes=g["passes"], findings=g["findings"],
                      ratios=g["error_ratio"]["values"], precision=g.get("precision"))
        for t in rec.get("targets") or []:
            add_target(merged, name=t["name"], available=t.get("available", True), reason=t.get("reason"),
                       entry_points=t.get("entry_points"), precision=t.get("precision"))
        for note in rec.get("notes") or []:
            add_note(merged, f"{name}: {note}")
        coverage.merge(CoverageTable.from_record(rec.get("coverage")))
        for f in rec["findings"]:
            bucket = bucket_of_record(f)
            same = next((k for b, k in kept if b.covers(bucket) and k["target"] == f["target"]), None)
            if same is not None:  # one root cause, whichever shard (op, dtype, seed) showed it
                same["count"] = same.get("count", 1) + f.get("count", 1)
                same["ops"] = list(dict.fromkeys(op for x in (same, f) for op in x.get("ops") or [x.get("op")]))
                same.setdefault("shards", []).append(name)
                same["headline"] = headline(same)
                continue
            f = {**f, "id": f"{name}/{f['id']}", "shards": [name]}
            kept.append((bucket, f))
    for _, f in kept:
        add_finding(merged, f)
    new = sum(1 for _, f in kept if not f.get("known"))
    merged["summary"].update(status="finished", new_findings=new, known_findings=len(kept) - new,
                             shards=len(results))
    merged["coverage"] = coverage.to_record()
    merged["campaign"] = {"shards": [{**r["shard"], "host": r["host"], "pid": r["pid"],
                                      "executed": r["record"]["campaign"]["executed"],
                                      "elapsed_s": r["record"]["campaign"]["elapsed_s"]} for r in results]}
    if wall_s:
        cases = sum(g["cases"] for g in merged["groups"])
        merged["campaign"].update(wall_s=round(wall_s, 3), cases_per_s=round(cases / wall_s, 3))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "findings.jsonl", "w") as fh:
        for _, f in kept:
            fh.write(json.dumps(f, sort_keys=True, default=str) + "\n")
    save(merged, out_dir / "summary.json", overwrite=True)
    return merged


def _land(result: dict, out_dir: Path) -> None:
    """Write a shard's case files into the coordinator's shard directory (a worker on another host wrote
    its own copy)."""
    shard_dir = out_dir / "shards" / Shard(**result["shard"]).name
    if shard_dir.resolve() == Path(result["dir"]):
        return
    for rel, data in result["files"].items():
        path = shard_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def run_cluster(shards: list, settings: CampaignConfig, *, gpus: Optional[int] = None,
                scheduler: Optional[str] = None, client=None, db_url: Optional[str] = None, log=None) -> dict:
    """Run ``shards`` on a cluster and merge them (Note [Cluster campaigns]).  ``settings``: the
    campaign configuration every shard shares (budget, time, limits, device, the SGLang wheel, ...;
    its ``out_dir`` is the cluster's: each shard replaces its target, op, seed, dtype and directory,
    :meth:`Shard.config`).  Exactly one of ``gpus`` (a local cluster of that many pinned GPU
    workers), ``scheduler`` (an existing cluster's address) and ``client`` (a started
    ``distributed.Client``, e.g. of a CPU test cluster) says where.  Returns the merged record (saved
    in ``settings.out_dir``)."""
    if sum(x is not None for x in (gpus, scheduler, client)) != 1:
        raise ClusterError("pass exactly one of gpus=, scheduler=, client=")
    if db_url is not None:
        open_database(db_url, "check", "check")  # a bad URL or a Redis that is down: ClusterError now
    out = Path(settings.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = settings.device
    distributed = _need("distributed")
    cluster = own_client = None
    try:
        if client is None:
            if gpus is not None:
                cluster = start_local_cluster(gpus, gpus=True)
                own_client = client = distributed.Client(cluster)
            else:
                own_client = client = distributed.Client(scheduler)
        gpu_workers = any((w.get("resources") or {}).get("GPU") for w in client.scheduler_info()["workers"].values())
        resources = {"GPU": 1} if gpu_workers and device == "cuda" else None
        started, token = time.monotonic(), uuid.uuid4().hex[:8]  # keys unique on a shared scheduler
        futures = [client.submit(run_shard, s, settings, out_dir=str(out), db_url=db_url, retries=RETRIES,
                                 resources=resources, key=f"shard-{s.name}-{token}", pure=False)
                   for s in shards]
        results = []
        for s, fut in zip(shards, futures):
            res = fut.result()
            _land(res, out)
            if log is not None:
                c = res["record"]["campaign"]
                log(f"{s.name}: {c['executed']} cases, {len(res['record']['findings'])} findings "
                    f"({res['host']} pid {res['pid']})")
            results.append(res)
        wall_s = time.monotonic() - started
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()
    return merge_records(results, out, device, wall_s)
