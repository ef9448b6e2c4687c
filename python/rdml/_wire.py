"""The transport to rdml's library: a job's request as JSON under the library's field names, its
float32 arrays as bytes, and the answer back as a dict and bytes (``rdml::wire::call``); a loop
piece's calls on its session the same way. Nothing is computed or defaulted here: a field left
as ``None`` is dropped, and the library takes its default.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from . import _rdml


_POOL_SIZED = False


def follow_torch_threads() -> None:
    """Tells the library PyTorch's thread count before rdml's first CPU work; the library decides
    whether its pool follows it (``rdml::device::cpu_threads_beside``)."""
    global _POOL_SIZED
    if _POOL_SIZED:
        return
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return  # not yet: a later call may find torch loaded (the library's pool may be running then)
    _POOL_SIZED = True
    _rdml.cpu_threads(int(torch.get_num_threads()))


def open_session(kind: str, request: Dict[str, Any], device: Any) -> Any:
    """A loop piece's session (``rdml.Defense``'s, ``rdml.Loss``'s) on ``request``."""
    follow_torch_threads()
    return _rdml.Session(kind, encoded(request), device)


def run(job: str, request: Dict[str, Any], arrays: Sequence[bytes] = (), *, device: Any = None, model: Any = None,
        surrogate: Any = None, group: Any = None, timeout: Any = None, reached: Any = None) -> Tuple[Any, List[bytes]]:
    """The library's job ``job`` on ``request`` with float32 ``arrays``: the answer, and its arrays;
    ``group`` (``_ranks.TorchGroup``) splits it over ranks, every rank joining within ``timeout``
    s; ``reached()`` is called as the library takes the call (a failure after it is the
    library's to tell the other ranks)."""
    follow_torch_threads()
    req = encoded(drop_none(request))
    wait = None if timeout is None else float(timeout)
    if reached is not None:
        reached()
    out, arrays = _rdml.run(job, req, list(arrays), device, model, surrogate, group, wait)
    return json.loads(out), arrays


def session_call(session: Any, method: str, request: Dict[str, Any], arrays: Sequence[bytes] = (),
                 models: Sequence[Any] = ()) -> Tuple[Any, List[bytes]]:
    """``method`` of a loop piece's session (``rdml.Defense``'s, ``rdml.Loss``'s)."""
    out, raw = session.call(method, encoded(request), list(arrays), list(models))
    return json.loads(out), raw


def encoded(request: Dict[str, Any]) -> str:
    """``request`` as JSON. JSON has no NaN or infinity, so a keyword holding one is named here,
    in the words the library uses for a number out of range, rather than failing as text."""
    try:
        return json.dumps(request, default=plain, allow_nan=False)
    except ValueError:
        bad = _non_finite(request, ())
        if bad is None:
            raise
        path, v = bad
        raise ValueError(f"{path[-1] if path else 'request'}: {v}; expected a finite number") from None


def _non_finite(v: Any, path: Tuple[str, ...]) -> Any:
    """The first NaN or infinite number in ``v`` (a request's values) and the keys to it."""
    if isinstance(v, (float, np.floating)) and not np.isfinite(v):
        return path, float(v)
    if isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.floating) and not np.isfinite(v).all():
        return path, float(v[~np.isfinite(v)].flat[0])
    if isinstance(v, dict):
        for k, x in v.items():
            found = _non_finite(x, path + (str(k),))
            if found is not None:
                return found
    if isinstance(v, (list, tuple)):
        for x in v:
            found = _non_finite(x, path)
            if found is not None:
                return found
    return None


def plain(v: Any) -> Any:
    """A NumPy scalar or array in a request (``set={"loss.margin": np.float32(0.1)}``) as JSON."""
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    raise ValueError(f"a {type(v).__name__} in a request: expected numbers, strings, booleans, lists or dicts")


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
