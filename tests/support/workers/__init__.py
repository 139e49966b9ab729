"""Programs that tests spawn as subprocesses (run as scripts, never imported by tests)."""
