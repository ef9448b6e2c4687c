"""``rdml.Attack``: rdml's attacks as a torchattacks attack."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _keywords, _wire
from ._inputs import queries_and_gallery
from ._model import frozen, model_args
from ._torch import _torch


class Attack:
    """An rdml attack as a torchattacks attack: ``atk = rdml.Attack("ES", eps=8/255)`` takes a
    spec as ``rdml attack`` names it (``CA+``, ``QA-``, ``ES``, ``TMA``, ``GTM``, …, with
    ``:eps=…`` budgets) and the scoring keywords of ``rdml.attack``; ``x_adv = atk(model, images,
    labels)`` returns the adversarial images as a tensor on the images' device, in their dtype:
    every image the attack moves (``queries=`` the first that many), the others as they were.
    An attack that moves the ranked candidates (CA±) with a ``gallery=`` returns the gallery's
    images. ``return_scores=True`` also returns ``Run.attack``'s dict, with ``attacked`` (the
    items moved); ``only_attacked=True`` returns the moved images alone, in ``attacked``'s order.
    ``output=`` says which of what the model returns is the embedding (``rdml.robustness``'s).
    The model runs in eval mode with its parameters frozen for the call (both restored after);
    rdml's objectives, selections and budgets do the rest, and the projected steps run on the
    model's device (``route`` in the dict says what crossed).
    """

    def __init__(self, spec: str, *, eps: Optional[float] = None, step: Optional[float] = None,
                 steps: Optional[int] = None, norm: Optional[str] = None, random_start: bool = False,
                 method: str = "white-box", seed: int = 0, batch: int = 128, profile: str = "rob28",
                 robrank_compat: bool = False, surrogate: Any = None, differentiable: bool = True,
                 device: Optional[str] = None, output: Any = None, quiet: bool = True):
        self.spec = str(spec)
        self.options = dict(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                            method=method, batch=batch, seed=seed, robrank_compat=robrank_compat)
        self.surrogate, self.differentiable, self.device, self.quiet = surrogate, differentiable, device, quiet
        self.output = output

    def __repr__(self) -> str:
        return f"rdml.Attack({self.spec!r})"

    def __call__(self, model: Any, images: Any, labels: Any, *, gallery: Any = None, gallery_labels: Any = None,
                 queries: Optional[int] = None, only_attacked: bool = False, return_scores: bool = False) -> Any:
        torch = _torch()
        arrays, shaped, g = queries_and_gallery(images, labels, gallery, gallery_labels)
        m = model_args(model, self.device, bool(self.differentiable), self.output)
        s = model_args(self.surrogate, self.device) if self.surrogate is not None else dict(model=None, run=None)
        options = _wire.drop_none(_keywords.options(queries=queries, **self.options))
        request = dict(spec=self.spec, options=options, progress=not self.quiet, model_run=m["run"],
                       surrogate_run=s["run"], images=shaped, gallery=g, adversarial=True,
                       every_item=queries is None)
        with frozen(m["model"]), frozen(s["model"]):
            answer, (raw,) = _wire.run("score_model", request, arrays, device=m["device"], model=m["model"],
                                  surrogate=s["model"])
        like = gallery if answer["of_gallery"] else images
        shape = shaped["shape"] if not answer["of_gallery"] else g["shape"]
        adv = torch.from_numpy(np.frombuffer(raw, dtype="<f4").reshape(shape).copy())
        if only_attacked:
            adv = adv[torch.as_tensor(answer["attacked"], dtype=torch.int64)]
        if isinstance(like, torch.Tensor):
            adv = adv.to(device=like.device, dtype=like.dtype if like.is_floating_point() else torch.float32)
        return (adv, answer) if return_scores else adv
