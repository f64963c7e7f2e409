"""pytest plugin that writes a result record of the run (filled in by the reports issue)."""
