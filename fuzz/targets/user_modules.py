"""A user's module found where the user stands: the current directory first, as ``python -m`` does.

Note [Modules beside the user]
------------------------------
A user writes ``my_kernels.py``, stays in its folder and runs ``kernel-oracle fuzz --targets
my_kernels``.  ``python -m pytest`` and ``python -m kernel_oracle`` would find it there (``-m`` puts
the current directory first on ``sys.path``), but a console script's ``sys.path`` starts with the
folder of the script, so a plain ``import`` does not.  Every place that looks a module target up
(:func:`find_spec`: the registry's "is this a module?", the campaign identity's hash of its files;
:func:`import_module`: the adapter that imports it, in whichever process runs the target) searches
the current directory first and then ``sys.path``.  Only a module that *is* in the current directory
puts that directory on ``sys.path`` (first, as ``-m`` does, so the module's own sibling imports
work); otherwise ``sys.path`` is left as it is.  An import that finds nothing says where it looked
and how to make it look elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from typing import Optional

__all__ = ["find_spec", "import_module", "module_root", "where_looked"]


def _here() -> Optional[str]:
    try:
        return os.getcwd()
    except OSError:  # the current directory was deleted under us: nothing to search there
        return None


def _in_current_directory(top: str) -> Optional[str]:
    """The current directory when the top-level module ``top`` is there, else None."""
    here = _here()
    if here is None or not top.isidentifier():
        return None
    try:
        found = importlib.machinery.PathFinder.find_spec(top, [here])
    except (ImportError, ValueError):
        return None
    return here if found is not None else None


def find_spec(name: str):
    """The import spec of the top-level module of ``name`` (``pkg`` of ``pkg.mod``), searched in the
    current directory first, then on ``sys.path``; None when neither has it.  Nothing is imported."""
    top = name.split(".")[0]
    here = _in_current_directory(top)
    if here is not None and top not in sys.modules:
        return importlib.machinery.PathFinder.find_spec(top, [here])
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def module_root(name: str) -> Optional[str]:
    """The folder an import of ``name`` finds its top-level module in (the ``sys.path`` entry, or the
    current directory, that holds ``top.py`` or ``top/``), as an absolute path; None for a module of no
    file (a namespace package, a built-in)."""
    spec = find_spec(name)
    origin = getattr(spec, "origin", None)
    if not origin or not os.path.isfile(origin):
        return None
    folder = os.path.dirname(os.path.abspath(origin))
    return os.path.dirname(folder) if spec.submodule_search_locations is not None else folder


def where_looked(name: str) -> str:
    """Where an import of ``name`` looked, in words, with the way to make it look elsewhere."""
    here = _here()
    paths = [p for p in sys.path if p] or ["(none)"]
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    top = name.split(".")[0]
    return (f"looked in the current directory ({here or 'deleted'}), then on {sys.executable}'s sys.path ({shown}); "
            f"run kernel-oracle from the folder that holds {top}.py or {top}/, or add that folder to PYTHONPATH")


def import_module(name: str):
    """``(module, None)``, or ``(None, why)`` when importing ``name`` fails; the current directory is
    searched first (Note [Modules beside the user])."""
    here = _in_current_directory(name.split(".")[0])
    if here is not None and (not sys.path or sys.path[0] != here):
        sys.path.insert(0, here)
    from kernel_oracle.harness.target_raises import signals_noted

    with signals_noted() as noted:  # an exit() at import is its failure too (Note [The target's BaseException])
        try:
            return importlib.import_module(name), None
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if missing and (name == missing or name.startswith(missing + ".")):  # the target, not one it imports
                return None, f"import {name} failed: ModuleNotFoundError: {exc}; {where_looked(name)}"
            return None, f"import {name} failed: ModuleNotFoundError: {exc}"
        except BaseException as exc:  # noqa: BLE001 - the reason is reported, not swallowed
            if not noted.targets(exc):
                raise
            return None, f"import {name} failed: {type(exc).__name__}: {exc}"
