"""The work behind the command line, by role (the CLI in :mod:`kernel_oracle.cli` only parses and prints):

* :mod:`.main_job` (with :mod:`.main_job_selfcheck`, :mod:`.main_job_campaigns`,
  :mod:`.main_job_record`): ``kernel-oracle run``, Note [The main job];
* :mod:`.selfcheck`: the references against independent formulations, Note [Selfcheck];
* :mod:`.matrix`: several releases side by side, Note [Release matrix]; :mod:`.bug_corpus`: the
  real upstream defects it replays, Note [Bug corpus];
* :mod:`.repro` and :mod:`.repro_script`: one finding re-run, and written as a standalone script;
* :mod:`.bench`: how fast the oracle is, Note [Benchmarking the oracle];
* :mod:`.reports`: a record rendered to Markdown and HTML; :mod:`.contracts_doc`: the contract
  table as Markdown (``python -m kernel_oracle.jobs.contracts_doc``).
"""
