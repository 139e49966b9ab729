"""The local backend: a job spec's rendered pods as workers on this machine.

:mod:`.backend` is the :class:`~roxxel_launch.backends.base.Backend`; see its docstring for
the module map. Importing this package loads none of them (``policy`` and ``manifest`` are
read by the Kubernetes test server without the process code).
"""
