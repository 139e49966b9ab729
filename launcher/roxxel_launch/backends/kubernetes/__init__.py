"""The Kubernetes backend: JobSets (or an Indexed Job + headless Service) through the API server.

:mod:`.backend` is the :class:`~roxxel_launch.backends.base.Backend`; the rest are its
helpers, each of one responsibility: :mod:`.api` (credentials, requests, errors, CRUD by
kind, pagination), :mod:`.retry` (timeouts, backoff), :mod:`.status` (objects and pods ->
``JobStatus``), :mod:`.watch` (``wait``), :mod:`.logs` (``logs``) and :mod:`.preflight` (the
JobSet CRD, Kueue LocalQueue and WorkloadPriorityClass checks). Importing this package loads
none of them.
"""
