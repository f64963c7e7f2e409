"""Files the suite reads back and the pages it writes, handled as data: bounded parsing, no write
through a symlink.

Note [Files as data]
--------------------
Every file the suite reads back may have been written by something else: a campaign's ``state.json``,
``findings.jsonl`` and ``identity.json``, a result record given to ``report`` or ``compare``, a
known-issues or corpus TOML file, a case given to ``repro`` as JSON.  Python's ``json`` and ``tomllib``
recurse once per level of nesting, so a file of a hundred thousand ``[`` raises ``RecursionError`` --
not a ``ValueError``: it escaped every reader's ``except ValueError`` as a traceback with exit status 1,
which the commands mean as "new findings" or "a regression".  So every reader parses through
:func:`loads_json` / :func:`loads_toml` / :func:`read_text`: at most :data:`MAX_BYTES` bytes, nesting at
most :data:`MAX_DEPTH` levels (the suite's own records nest under 12), and any failure is a
:class:`DataFileError` -- a ``ValueError`` naming the file -- which each command already reports in one
line with exit status 2 (a campaign's state sets an unreadable line aside instead, Note [Campaign state]).
Only regular files are read: a FIFO named where a file belongs would block ``open()`` for ever, so every
file is opened without waiting and refused when it is not one.

Pages and records are written by :func:`write_text`: a new file created beside the destination and
renamed over it.  A rename replaces the directory entry, so a symlink planted where ``report.html``
belongs is replaced by the page, never followed: its target, outside ``--out``, is untouched.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Union

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["DataFileError", "MAX_BYTES", "MAX_DEPTH", "loads_json", "loads_toml", "read_text", "write_bytes",
           "write_text"]

# the largest file read back (a long campaign's findings.jsonl holds a few MB)
MAX_BYTES = 256 * 2**20
# the deepest nesting accepted in a JSON or TOML document
MAX_DEPTH = 64

PathLike = Union[str, "os.PathLike[str]"]
# the process's umask, read once (setting it is the only way to read it): written pages get the usual mode
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class DataFileError(ValueError):
    """A file (or text) that cannot be read as the data it should hold; the message names it."""


def _depth(value: Any) -> int:
    """The nesting depth of parsed JSON/TOML (containers only), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        todo.extend((v, level + 1) for v in items)
    return deepest


def _checked(value: Any, source: str) -> Any:
    if _depth(value) > MAX_DEPTH:
        raise DataFileError(f"{source}: nested deeper than {MAX_DEPTH} levels; not a file kernel-oracle writes")
    return value


def _size_checked(text: Union[str, bytes], source: str) -> None:
    if len(text) > MAX_BYTES:
        raise DataFileError(f"{source}: {len(text)} bytes, more than the {MAX_BYTES} read back; not a file "
                            f"kernel-oracle writes")


def loads_json(text: Union[str, bytes], source: str) -> Any:
    """``json.loads(text)`` bounded (Note [Files as data]); :class:`DataFileError` naming ``source``."""
    _size_checked(text, source)
    try:
        value = json.loads(text)
    except RecursionError:
        raise DataFileError(f"{source}: nested deeper than {MAX_DEPTH} levels; not a file kernel-oracle "
                            f"writes") from None
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{source}: not valid JSON ({exc})") from None
    return _checked(value, source)


def loads_toml(text: str, source: str) -> Any:
    """``tomllib.loads(text)`` bounded (Note [Files as data]); :class:`DataFileError` naming ``source``."""
    _size_checked(text, source)
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise DataFileError(f"{source}: nested deeper than {MAX_DEPTH} levels; not valid here") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataFileError(f"{source}: not valid TOML ({exc})") from None
    return _checked(value, source)


def read_text(path: PathLike, what: str = "") -> str:
    """The text of ``path`` (UTF-8), at most :data:`MAX_BYTES` bytes; :class:`DataFileError` for a file
    too large, not text or not a regular file (a FIFO would block the read for ever: it is opened without
    waiting and refused), ``OSError`` when it cannot be read."""
    source = str(path) + (f" ({what})" if what else "")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            it = "a FIFO" if stat.S_ISFIFO(kind) else "a directory" if stat.S_ISDIR(kind) else "a device or socket"
            raise DataFileError(f"{source}: is {it}, not a regular file; pass a file")
        data = fh.read(MAX_BYTES + 1)
    _size_checked(data, source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DataFileError(f"{source}: not a text file (not UTF-8)") from None


def write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a new file renamed over it: a symlink at ``path`` is replaced,
    never followed (Note [Files as data]).  ``OSError`` when the directory cannot take it."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` as :func:`write_text` does: through a new file of a name no other writer
    has (processes writing one path at once each rename a whole file over it), renamed over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
