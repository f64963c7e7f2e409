"""kernel-oracle's pytest plugin (:mod:`.plugin`, the ``pytest11`` entry point ``kernel_oracle``) and
its result record (:mod:`.record`, ``--oracle-record PATH``)."""
