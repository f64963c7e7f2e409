"""The ``kernel-oracle`` command line (see :mod:`kernel_oracle.cli`)."""

__version__ = "0.1.0"
