"""Scoring split over a torch.distributed process group: the group as the library's ranks
(``rdml::ranks``), which split the work, compare what each rank was asked, and tell every rank
another's failure. This room only moves bytes with torch's collectives, on the backend's device
(the current CUDA device for NCCL, the host for gloo), each waited on at most the library's
time; rdml has no transport of its own.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Iterator, List, Optional

from . import _rdml


class TorchGroup:
    """A torch.distributed process group as the library calls it: ``rank``, ``size`` and
    ``all_gather(bytes, timeout) -> list[bytes]``. Under NCCL the bytes travel on the scored
    model's CUDA device, else the current one (``torch.cuda.set_device(local_rank)`` first, as
    torch's NCCL collectives need)."""

    def __init__(self, group: Any):
        import torch
        import torch.distributed as dist

        self._torch, self._dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.nccl = str(dist.get_backend(group)).lower() == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.nccl else torch.device("cpu")

    def beside(self, model: Any) -> None:
        """Under NCCL, the bytes travel on the device of the model scored (a ``TorchModel``)
        when it is a CUDA device, as its tensors do."""
        where = getattr(model, "device", None)
        if self.nccl and where is not None and getattr(where, "type", None) == "cuda":
            self.device = where

    def all_gather(self, payload: bytes, timeout: Optional[float]) -> List[bytes]:
        """Every rank's ``payload``, waiting at most ``timeout`` s in all (``None``: the group's
        own timeout)."""
        torch, dist = self._torch, self._dist
        deadline = None if timeout is None else time.monotonic() + timeout
        n = torch.tensor([len(payload)], dtype=torch.int64, device=self.device)
        sizes = [torch.zeros(1, dtype=torch.int64, device=self.device) for _ in range(self.size)]
        self._wait(dist.all_gather(sizes, n, group=self.group, async_op=True), deadline, timeout)
        lengths = [int(s.item()) for s in sizes]
        width = max(max(lengths), 1)
        buf = torch.zeros(width, dtype=torch.uint8)
        if payload:
            buf[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        buf = buf.to(self.device)
        parts = [torch.empty(width, dtype=torch.uint8, device=self.device) for _ in range(self.size)]
        self._wait(dist.all_gather(parts, buf, group=self.group, async_op=True), deadline, timeout)
        return [p[:k].cpu().numpy().tobytes() for p, k in zip(parts, lengths)]

    def _wait(self, work: Any, deadline: Optional[float], timeout: Optional[float]) -> None:
        pause = 0.0005
        while deadline is not None and not work.is_completed():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the other ranks did not reach this exchange within {timeout:g} s: every rank of the group "
                    "must make the same rdml call (group=False scores on this rank alone; group_timeout= waits "
                    "longer); the process group may be unusable for further collectives (under NCCL its "
                    "watchdog may end the process)")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        work.wait()


def group_of(group: Any) -> Optional[TorchGroup]:
    """The ranks a call is split over: ``group`` (a torch.distributed process group), the default
    group when ``None`` and one is initialised, none for ``False`` or a group of one."""
    if group is False:
        return None
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    ready = dist is not None and dist.is_available() and dist.is_initialized()
    if not ready:
        if group is None:
            return None
        raise ValueError("group: no torch.distributed process group is initialised "
                         "(torch.distributed.init_process_group first, or leave group out)")
    if group is not None and group is not True and not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"group: expected a torch.distributed process group, True, False or None, "
                         f"got {type(group).__name__}")
    g = TorchGroup(dist.group.WORLD if group is None or group is True else group)
    if g.rank < 0:
        raise ValueError("group: this process is not one of the group's ranks")
    return g if g.size > 1 else None


@contextlib.contextmanager
def told(group: Optional[TorchGroup], timeout: Optional[float]) -> Iterator[Any]:
    """Runs a call's preparation and library call: an exception raised before the library took
    the call (``reached()`` not yet called: this rank's input refused here) is told to the other
    ranks, so that they stop rather than wait for this one."""
    state = {"reached": False}

    def reached() -> None:
        state["reached"] = True

    try:
        yield reached
    except BaseException as e:
        if group is not None and not state["reached"]:
            try:
                _rdml.tell_failure(group, f"{type(e).__name__}: {e}", timeout)
            except BaseException:  # noqa: BLE001 - this rank's own exception is the one raised
                pass
        raise
