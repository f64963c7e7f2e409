"""Extracting a release's files to the cache from several processes at once, as pytest's workers and a
matrix's campaigns do on a GPU machine: every process gets every file whole."""

from __future__ import annotations

import multiprocessing
import zipfile

import pytest

WRITERS = 6
FILES = 32


def _extract_all(wheel: str, cache: str, barrier, results) -> None:
    import os

    os.environ["KERNEL_ORACLE_CACHE"] = cache
    from kernel_oracle.fuzz.targets.sglang_wheel import wheel_release

    release = wheel_release(wheel)
    names = [n for n in release.names if n.endswith(".py")]
    barrier.wait()  # every writer starts on the first file together
    try:
        sizes = [release.disk(n).stat().st_size for n in names]
        results.put(("ok", sizes))
    except Exception as exc:  # noqa: BLE001 - the result the test asserts on
        results.put(("failed", f"{type(exc).__name__}: {exc}"))


def test_processes_extracting_one_release_at_once_each_get_every_file_whole(tmp_path):
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    body = {f"sglang/kernels/k{i}.py": ("x = %d\n" % i) * (150000 + 97 * i) for i in range(FILES)}
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in body.items():
            zf.writestr(name, text)
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_extract_all, args=(str(wheel), str(tmp_path / "cache"), barrier, results))
             for _ in range(WRITERS)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    failed = [why for status, why in got if status != "ok"]
    assert failed == [], f"{len(failed)} of {WRITERS} writers failed: {failed[:2]}"
    want = [len(body[n].encode()) for n in sorted(body)]
    assert all(sorted(sizes) == sorted(want) for _, sizes in got)
    leftovers = sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.name.endswith(".tmp"))
    assert leftovers == [], f"temporary files left in the cache: {leftovers}"


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
