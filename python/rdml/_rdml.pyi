"""Type stubs of the compiled part of rdml (see rdml/__init__.py and rdml/_loop.py for the
documented API). Every job goes through one function, `run`; the jobs that live across the calls
of a training loop (`rdml.Defense`, `rdml.Loss`) are a `Session`."""

from typing import Any, List, Optional, Sequence, Tuple

__version__: str

class RdmlWarning(UserWarning): ...

def run(
    job: str, request: str, arrays: Sequence[bytes], device: Optional[str], model: Optional[Any], surrogate: Optional[Any]
) -> Tuple[str, List[bytes]]: ...

def cpu_threads(n: int) -> bool: ...
def cpu_pool() -> int: ...

class Session:
    def __init__(self, kind: str, request: str, device: Optional[str] = None) -> None: ...
    def call(self, method: str, request: str, arrays: Sequence[bytes], models: Sequence[Any]) -> Tuple[str, List[bytes]]: ...
