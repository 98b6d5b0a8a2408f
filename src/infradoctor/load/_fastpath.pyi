"""Types of the compiled fast path (``_fastpath.c``)."""

from array import array
from collections.abc import Callable, Iterable
from typing import Any

class Sink:
    """One driver's buffer of fast-path latencies, with the window and budget they are taken in."""

    until: float
    last: float
    left: int
    @property
    def counted(self) -> bool: ...
    def __init__(self, counted: bool = False) -> None: ...
    def __len__(self) -> int: ...
    def append(self, value: float, /) -> None: ...
    def take(self) -> array[float]: ...

class Reader:
    """A connection's compiled ``data_received``."""

    write: Callable[[bytes], Any] | None
    enabled: bool
    @property
    def taken(self) -> int: ...
    def __init__(
        self,
        sink: Sink,
        conn: Any,
        general: Callable[[Any, bytes], Any],
        request: bytes,
        capture: Iterable[bytes] | None = (),
        clock: Callable[[], float] | None = None,
    ) -> None: ...
    def feed(self, data: bytes, /) -> None: ...

def scan(data: bytes, capture: tuple[bytes, ...] = (), /) -> int: ...
