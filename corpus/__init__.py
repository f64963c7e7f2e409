"""The real-bug corpus, installed as package data: one TOML file per entry (Note [Bug corpus] in
:mod:`kernel_oracle.jobs.bug_corpus`, which locates the files with :mod:`importlib.resources`)."""
