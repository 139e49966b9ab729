"""Where a job runs: a Kubernetes cluster (JobSet / Indexed Job) or local processes."""
