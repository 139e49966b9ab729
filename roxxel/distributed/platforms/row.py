"""One row of the worker platform table: when a platform applies, how its environment is read, and
where its convention comes from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from roxxel.distributed.identity import Detected

Reading = tuple[Detected, dict[str, str]]
"""What a platform's reader returns: the values, and for each of ``coordinator_address``,
``num_processes`` and ``process_id`` the variables it came from (named in error messages)."""


@dataclasses.dataclass(frozen=True)
class Platform:
    """A worker platform: a row of :data:`roxxel.distributed.platforms.PLATFORMS`.

    Attributes:
        source: the :attr:`Detected.source` its reader reports (two rows may share one).
        applies: whether the environment is this platform's; the first row that applies in
            precedence order is read, and the later ones are not consulted.
        read: the environment's values and their origins; raises ``ValueError`` naming the
            variable and the fix when the environment applies but is incomplete or inconsistent.
        convention: where the variables and the coordinator's address come from (the API or
            controller that sets them), for the documentation.
        coordinator_from_jax: the coordinator is left to ``jax.distributed.initialize()``'s own
            cluster detection (the reader reports ``None``), and so are the count and id.
    """

    source: str
    applies: Callable[[Mapping[str, str]], bool]
    read: Callable[[Mapping[str, str]], Reading]
    convention: str
    coordinator_from_jax: bool = False
