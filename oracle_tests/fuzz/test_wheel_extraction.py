"""Extracting a release's files to the cache from several processes at once, as pytest's workers and a
matrix's campaigns do on a GPU machine: every process gets every file whole.  And a wheel is data (Note
[Wheel members as data] in fuzz/targets/sglang_wheel.py): no member is written outside the extraction
folder or through a link, and none is read past its size bound."""

from __future__ import annotations

import multiprocessing
import stat
import zipfile

import pytest

from kernel_oracle.fuzz.targets import sglang_wheel
from kernel_oracle.fuzz.targets.sglang_wheel import LoaderError, wheel_release

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


def _wheel(tmp_path, members: dict, *, links: tuple = ()):
    """``sglang-9.9.9-py3-none-any.whl`` holding ``members`` (name -> text) and ``links`` (names stored as
    symbolic links to ``/etc/passwd``)."""
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n")
        for name, text in members.items():
            zf.writestr(name, text)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return wheel


# a name under the folder the v2 loader extracts whole (its plan tables), climbing out of the cache's
# extraction folder (cache/extracted/sglang-9.9.9-<digest>/) into the cache itself
CLIMBING = "sglang/srt/lora/dense/configs/" + "../" * 7 + "escaped.py"


def test_a_member_named_outside_the_extraction_folder_refuses_the_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_ORACLE_CACHE", str(tmp_path / "cache"))
    wheel = _wheel(tmp_path, {"sglang/kernels/k.py": "x = 1\n", CLIMBING: "print('planted')\n"})
    with pytest.raises(LoaderError) as refused:
        wheel_release(wheel).disk(CLIMBING)  # what a loader does with the folder's files
    assert str(refused.value) == (f"{wheel}: member {CLIMBING!r} has an empty, '.' or '..' part: it would be written "
                                  f"outside the extraction folder; no wheel the suite reads has one (refused, nothing "
                                  f"extracted)")
    assert not (tmp_path / "cache" / "escaped.py").exists()


@pytest.mark.parametrize("name", ["/tmp/absolute.py", "sglang\\..\\win.py", "C:/drive.py", "sglang//empty.py"])
def test_every_name_that_is_no_plain_relative_path_is_refused(tmp_path, name):
    with pytest.raises(LoaderError, match="no wheel the suite reads has one"):
        wheel_release(_wheel(tmp_path, {name: "x = 1\n"}))


def test_a_member_stored_as_a_link_refuses_the_wheel(tmp_path):
    wheel = _wheel(tmp_path, {}, links=("sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py",))
    with pytest.raises(LoaderError) as refused:
        wheel_release(wheel)
    assert str(refused.value) == (f"{wheel}: member 'sglang/kernels/ops/lora/dense/kv_b_lora_absorbed.py' is a "
                                  f"symbolic link; no wheel the suite reads has one (refused, nothing extracted)")


def test_a_link_planted_in_the_extraction_folder_is_never_written_through(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_ORACLE_CACHE", str(tmp_path / "cache"))
    release = wheel_release(_wheel(tmp_path, {"sglang/kernels/k.py": "x = 1\n"}))
    first = release.disk("sglang/kernels/k.py")
    root = first.parent.parent.parent  # cache/extracted/sglang-9.9.9-<digest>
    outside = tmp_path / "outside"
    outside.mkdir()
    first.unlink()
    first.parent.rmdir()
    (root / "sglang" / "kernels").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LoaderError, match=r"leaves .* \(a link in the cache\)"):
        release.disk("sglang/kernels/k.py")
    assert list(outside.iterdir()) == []


def test_a_member_past_the_size_bound_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_wheel, "MAX_MEMBER_BYTES", 4096)
    wheel = _wheel(tmp_path, {"sglang/srt/lora/dense/configs/big.json": "0" * 2**20})
    with pytest.raises(LoaderError) as refused:
        wheel_release(wheel).read("sglang/srt/lora/dense/configs/big.json")
    assert str(refused.value) == (f"{wheel}: member 'sglang/srt/lora/dense/configs/big.json' holds 1048576 bytes, "
                                  f"more than the 4096 a file the suite reads may have")


def test_a_wheel_of_more_members_than_any_wheel_has_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_wheel, "MAX_MEMBERS", 10)
    wheel = _wheel(tmp_path, {f"sglang/m{i}.py": "" for i in range(20)})
    with pytest.raises(LoaderError) as refused:
        wheel_release(wheel)
    assert str(refused.value) == f"{wheel} holds 21 members, more than the 10 of any wheel the suite reads"


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
