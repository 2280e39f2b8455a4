"""``Closing``: the context-manager half every resource here shares."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """``with x:`` returns ``x`` and calls ``x.close()`` on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
