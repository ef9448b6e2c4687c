"""What rdml's loop pieces share (``_loss.py``, ``_defense.py``, ``_attack.py``): the autograd
node of a loss rdml computed, and tensors crossed to float32 bytes and back. In your own PyTorch
training loop ``loss = loss_fn(embeddings, labels)`` and ``loss = defense(model, images, labels)``
return a torch scalar on the embeddings' device whose ``backward()`` carries rdml's gradient on
the embeddings on through your model, with your optimizer, scheduler, AMP and DDP. rdml computes
the loss's value and its gradient with respect to the embeddings (the library's
``harden``); these modules move tensors to bytes and back, and keep your model's state as
they found it. Every check of what you pass beyond its Python type is the library's.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from ._inputs import META
from ._torch import _torch


class _Pulled:
    """The autograd node of a loss rdml computed: its value in forward, and in backward the
    gradients rdml returned with it (scaled by the incoming gradient)."""

    _fn = None

    @classmethod
    def apply(cls, value: float, grads: Sequence[Any], inputs: Sequence[Any]) -> Any:
        torch = _torch()
        if cls._fn is None:

            class Fn(torch.autograd.Function):
                @staticmethod
                def forward(ctx, value, grads, *inputs):
                    ctx.grads = grads
                    return value

                @staticmethod
                def backward(ctx, g):
                    return (None, None) + tuple(None if gr is None else g * gr for gr in ctx.grads)

            cls._fn = Fn
        # float32 whatever the embeddings' type (bf16 or fp16 under autocast): rdml computed it
        # so, and autograd casts the gradients back to each input's type.
        first = inputs[0]
        v = torch.tensor(value, dtype=torch.float32, device=first.device)
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs) or not torch.is_grad_enabled():
            return v
        return cls._fn.apply(v, list(grads), *inputs)


def embeddings_of(e: Any, what: str) -> Any:
    """``e`` as a 2-D floating torch tensor (its graph kept)."""
    torch = _torch()
    if not isinstance(e, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor of N × D embeddings, got {type(e).__name__}")
    if e.ndim != 2:
        raise ValueError(f"{what}: expected N × D embeddings, got shape {tuple(e.shape)}")
    if e.device.type == "meta":
        raise ValueError(f"{what}: {META}")
    if not e.is_floating_point():
        raise ValueError(f"{what}: {e.dtype} values; expected floating-point embeddings")
    if torch.is_grad_enabled() and not e.requires_grad:
        raise ValueError(
            f"{what}: they carry no graph (computed under torch.no_grad(), or detached), so the loss could not "
            "train the model; compute them with gradients, or call the loss under torch.no_grad() for its value alone")
    return e


def torch_scalar_like(v: float, like: Any) -> Any:
    torch = _torch()
    return torch.tensor(float(v), dtype=like.dtype, device=like.device)


def eager(fn: Any) -> Any:
    """``fn`` run eagerly inside a ``torch.compile``d step: a graph break at rdml's call (its
    work is the library's, on host arrays, which no graph can hold), the autograd node it returns
    joining the compiled graph's backward. ``fn`` itself where torch is not loaded."""
    disable = getattr(getattr(sys.modules.get("torch"), "compiler", None), "disable", None)
    return fn if disable is None else disable(fn)
