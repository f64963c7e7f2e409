"""pytest plugin of the fuzzer: ``--target`` and Hypothesis profiles (filled in by the fuzz issue)."""
