"""The installed distribution's version, read once from its metadata (pyproject.toml is the source)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("kernel-oracle")
except _metadata.PackageNotFoundError:  # a bare checkout, never installed
    __version__ = "0+unknown"
