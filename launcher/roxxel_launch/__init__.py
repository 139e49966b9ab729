"""roxxel-launch: render, validate and submit multi-host JAX jobs (JobSet, Indexed Job, local)."""
