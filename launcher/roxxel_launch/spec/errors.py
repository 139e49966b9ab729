"""SpecError, the one error of the job spec, and the helpers that collect several of them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from roxxel.wording import as_clause


class SpecError(ValueError):
    """An invalid job spec. ``field`` is the dotted path of the offending field.

    ``also``: further problems found in the same pass (other fields of the spec, each checked
    on its own), so that one run of ``validate`` names every field to fix, one line each;
    ``field``, ``problem`` and ``fix`` describe the first.
    """

    def __init__(self, field: str, problem: str, fix: str = "", *, also: Sequence[SpecError] = ()):
        self.field = field
        self.problem = problem
        self.fix = fix
        self.also = tuple(one for err in also for one in err.each())
        message = f"{field}: {problem}" if field else problem
        line = f"{as_clause(message)}. {fix}" if fix else message
        if self.also:
            line = f"{1 + len(self.also)} problems:\n  " + "\n  ".join([line] + [str(e) for e in self.also])
        super().__init__(line)

    def each(self) -> list[SpecError]:
        """Every problem, each as a SpecError of its own."""
        return [SpecError(self.field, self.problem, self.fix) if self.also else self, *self.also]

    @classmethod
    def joined(cls, errors: Sequence[SpecError]) -> SpecError:
        """One error for several (the first, with the others in ``also``)."""
        flat = [one for err in errors for one in err.each()]
        first = flat[0]
        return first if len(flat) == 1 else cls(first.field, first.problem, first.fix, also=flat[1:])

    def mapped(self, change: Callable[[SpecError], SpecError]) -> SpecError:
        """The same problems, each passed through ``change`` (to re-path or annotate it)."""
        return SpecError.joined([change(err) for err in self.each()])


@contextlib.contextmanager
def _within(prefix: str):
    """Prefixes the field path of a SpecError raised inside a nested spec object."""
    try:
        yield
    except SpecError as err:
        if not prefix:
            raise
        raise err.mapped(lambda e: SpecError(f"{prefix}.{e.field}" if e.field else prefix, e.problem, e.fix)) from err


class _Problems:
    """Runs independent checks, each in ``with problems.check():``, and keeps what each one
    raised, so that all of them are reported together by :meth:`raise_any`."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    @contextlib.contextmanager
    def check(self):
        try:
            yield
        except SpecError as err:
            self.errors.append(err)

    def failed(self, field: str) -> bool:
        """Whether a check of ``field`` has failed."""
        return any(err.field == field for err in self.errors)

    def raise_any(self) -> None:
        if self.errors:
            raise SpecError.joined(self.errors)


def _check(field: str, problem: str | None, fix: str = "") -> None:
    if problem:
        raise SpecError(field, problem, fix)
