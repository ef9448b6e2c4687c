"""Batch-norm layers with several parameter sets, one chosen per forward (MDProp, AdvProp-D)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from ._torch import _torch


class _BatchNormSets:
    """A batch-norm layer with several parameter sets, one chosen per forward (``active``)."""

    def __new__(cls, bn: Any, sets: int):
        torch = _torch()
        import copy

        class BatchNormSets(torch.nn.Module):
            def __init__(self, bn, sets):
                super().__init__()
                self.sets = torch.nn.ModuleList([copy.deepcopy(bn) for _ in range(sets)])
                self.active = 0

            def forward(self, x):
                return self.sets[self.active](x)

        return BatchNormSets(bn, sets)


def _is_batch_norm(m: Any) -> bool:
    torch = _torch()
    return isinstance(m, torch.nn.modules.batchnorm._BatchNorm)


def split_batch_norm(model: Any, sets: int) -> Any:
    """Gives every batch-norm layer of ``model`` ``sets`` parameter sets (each a copy of the
    layer as it is: MDProp starts the auxiliary sets from the main one), chosen per forward by
    ``batch_norm_set`` and saved in the module's own ``state_dict`` (``….sets.K.weight``); set 0
    is the clean one, used at inference. Returns ``model``, changed in place."""
    if int(sets) < 1:
        raise ValueError(f"sets: {sets}; expected ≥ 1")
    for name, child in list(model.named_children()):
        if _is_batch_norm(child):
            setattr(model, name, _BatchNormSets(child, int(sets)))
        elif not type(child).__name__ == "BatchNormSets":
            split_batch_norm(child, sets)
    return model


@contextlib.contextmanager
def batch_norm_set(model: Any, k: int) -> Iterator[None]:
    """Every split batch-norm layer of ``model`` uses set ``k`` inside the block."""
    layers = [m for m in model.modules() if type(m).__name__ == "BatchNormSets"]
    for m in layers:
        if k >= len(m.sets):
            raise ValueError(f"batch-norm set {k}: the model's layers have {len(m.sets)} set(s)")
    before = [m.active for m in layers]
    for m in layers:
        m.active = int(k)
    try:
        yield
    finally:
        for m, b in zip(layers, before):
            m.active = b


def _sets_of(model: Any) -> Optional[int]:
    """The batch-norm sets ``model`` was split into; 0 if it has plain batch norm, None if none."""
    split = [len(m.sets) for m in model.modules() if type(m).__name__ == "BatchNormSets"]
    if split:
        return min(split)
    return 0 if any(_is_batch_norm(m) for m in model.modules()) else None
