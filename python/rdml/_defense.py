"""``rdml.Defense``: an rdml defense as a piece of your own loop."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Mapping, Optional

import numpy as np

from ._bn import _sets_of, batch_norm_set
from ._inputs import (image_tensor, images_and_labels, integer, labels as label_list, mapping, tensor_like, to_bytes,
                      triplet_rows)
from ._loop import _Pulled, eager, embeddings_of, torch_scalar_like
from ._loss import Loss
from ._torch import TorchModel, _torch, check_output, embedding_of, unwrapped
from ._wire import open_session, run, session_call


class _SetModel(TorchModel):
    """The model as the library asks it, inferring with batch-norm set ``bn_set``."""

    def __init__(self, model: Any, bn_set: int, output: Any = None):
        super().__init__(model, output=output)
        self.bn_set = bn_set

    def _forward(self, x):
        with batch_norm_set(self.model, self.bn_set):
            return super()._forward(x)


@contextlib.contextmanager
def _attacking(model: Any, inner: str) -> Iterator[None]:
    """The inner maximisation's model state: eval mode (``inner="eval"``) or its modes as they
    are (``"train"``: batch statistics, dropout), its parameters without gradient; every mode,
    flag and buffer (batch-norm running statistics) as it was, after, whatever happened."""
    torch = _torch()
    modes = [(m, m.training) for m in model.modules()]
    needs = [(p, p.requires_grad) for p in model.parameters()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()] if inner == "train" else []
    if inner == "eval":
        model.eval()
    for p, _ in needs:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, r in needs:
            p.requires_grad_(r)
        for m, t in modes:
            m.training = t
        with torch.no_grad():
            for b, v in buffers:
                b.copy_(v)


def _like(x: Any, images: Any) -> Any:
    """``x`` on ``images``' device, in their dtype and memory format (``channels_last`` kept)."""
    torch = _torch()
    x = x.to(device=images.device, dtype=images.dtype)
    if not images.is_contiguous() and images.is_contiguous(memory_format=torch.channels_last):
        x = x.contiguous(memory_format=torch.channels_last)
    return x


class Defense:
    """An rdml defense as a piece of your own loop: ``rdml.Defense(kind="act", eps=77/255,
    step=3/255, steps=8, loss=rdml.Loss(kind="triplet"))`` takes the keys of a config's
    ``[defense]`` table (and its ``[loss]``: an ``rdml.Loss`` or a dict; robrank's triplet loss
    when none), and ``loss = defense(model, images, labels)`` runs the inner maximisation on
    ``model`` (eval mode by default, ``inner="train"`` for its modes as they are; nothing of the
    model changed after), then the training-mode forward of what the defense trains on through
    ``model`` as given (a DDP wrapper included: the attack goes through ``model.module``), and
    returns the loss to ``.backward()``. Images are N × C × H × W in [0, 1] (the model normalises
    them itself, so budgets are in pixels), on any device. ``start_epoch(epoch, epochs)`` tells
    the defense's schedules where training stands (CA-TRIDE's, which refuses to run without it)
    and moves its random stream to the epoch's, as ``rdml train`` draws; MDProp's UX also embeds
    the training set there (``model=``, ``images=``, ``labels=``; then pass ``indices=`` with each
    batch; ``triplets=(anchors, positives, negatives)``, rows of the batch, replays the triplets
    another code mined in place of the loss's miner: ACT, HM, Madry, the positive-perturbation
    defenses). ``last`` holds the step's diagnostics (collapseness, hardness, the adversarial loss)
    and ``route``, what crossed between rdml and the model in the inner maximisation (bytes and
    calls at its start and end and per step, passes through the model);
    ``state_dict()``/``load_state_dict()`` keep the defense's state for your checkpoints. The
    loss's β (the margin loss's) is ``defense.loss.beta``; ``parameters()`` yields it for your
    optimizer. Where the defense's outer loss is its loss alone (EST, MDProp, AdvProp-D), ``loss=``
    may be any callable of PyTorch metric learning's signature (a PML loss), with its miner as
    ``miner=``; ``last`` then holds the steps and the adversarial loss alone (the diagnostics are
    those of rdml's losses). ``perturb(model, images, labels)`` runs the inner maximisation alone
    and returns the perturbed rows and their roles for your own forward and loss (any loss, a CE
    head beside the embedding). ``output=`` says which of what the model returns is the
    embedding (``rdml.robustness``'s).
    """

    def __init__(self, kind: Optional[str] = None, *, loss: Any = None, miner: Any = None, seed: int = 0,
                 inner: str = "eval", device: Optional[str] = None, output: Any = None, **table: Any):
        if inner not in ("eval", "train"):
            raise ValueError(f"inner: {inner!r}; expected \"eval\" (robrank's, torchattacks') or \"train\"")
        if kind is None:
            raise ValueError("kind: missing; name the defense (rdml's [defense] kinds: act, est, hm, madry, …)")
        self.table = dict(kind=kind, **table)
        check_output(output)
        self.output = output
        if isinstance(loss, Loss) and loss.gather:
            raise ValueError("loss: gather=True; a defense trains each rank on its own batch (robrank's behaviour "
                             "under DDP), so its loss gathers nothing")
        if isinstance(loss, Loss) and loss.seed not in (0, int(seed)):
            raise ValueError(f"seed: the defense draws its mining from its own stream; give seed={loss.seed} to "
                             "rdml.Defense, not to its loss")
        if isinstance(loss, Mapping):
            loss = Loss(**loss, seed=int(seed))  # the defense owns the loss's β (the margin loss's)
        self.loss = loss if isinstance(loss, Loss) else None
        # A loss of the caller's own (PML's signature), in place of the defense's outer loss.
        self._own = loss if callable(loss) and not isinstance(loss, (Loss, Mapping)) else None
        if miner is not None and self._own is None:
            raise ValueError("miner: goes with a loss of your own (loss=a PML loss); rdml's losses mine themselves")
        self._miner = miner
        loss_table = loss.table if isinstance(loss, Loss) else (None if self._own is not None else loss)
        if loss_table is not None and not isinstance(loss_table, Mapping):
            raise TypeError("loss: expected an rdml.Loss, a [loss] table as a dict, or a callable of PML's signature")
        request = dict(defense=self.table, seed=int(seed))
        if loss_table is not None:
            request["loss"] = dict(loss_table)
        self.inner = inner
        self._session = open_session("defense", request, device)
        self.info = session_call(self._session, "info", {})[0]
        if self._own is not None and not self.info["outer_is_the_loss"]:
            raise ValueError(
                f"loss: defense {kind} trains on rdml's triplet loss over what it perturbs; a loss of your own "
                "cannot take its place (pass an rdml.Loss or a [loss] table)")
        self.last: Optional[Dict[str, Any]] = None
        self._eager = eager(self._step)

    @classmethod
    def preset(cls, name: str, **kw: Any) -> "Defense":
        """The defense of an rdml preset (``rdml.Defense.preset("fashion-c2f2-act")``), with its loss."""
        t = run("preset_tables", dict(name=str(name)))[0]
        if t["defense"] is None:
            raise ValueError(f"{name!r}: the preset trains without a defense; rdml.Loss(**its loss table) is its loss")
        table = {**t["defense"], **kw}  # a keyword given here takes the preset's place (steps=8, …)
        loss = table.pop("loss", t["loss"])
        return cls(table.pop("kind"), loss=loss, **table)

    def __repr__(self) -> str:
        return f"rdml.Defense({', '.join(f'{k}={v!r}' for k, v in self.table.items())})"

    def _models(self, model: Any) -> List[Any]:
        sets = int(self.info["bn_sets"])
        have = _sets_of(model)
        if sets > 1 and have == 0:
            raise ValueError(
                f"model: defense {self.table['kind']} trains each distribution through its own batch-norm set "
                f"({sets} sets); split the model's batch norm first: rdml.split_batch_norm(model, {sets})")
        if sets > 1 and have is not None and have < sets:
            raise ValueError(f"model: its batch norm has {have} set(s); defense {self.table['kind']} needs {sets}")
        return [_SetModel(model, k if have else 0, self.output) for k in range(sets)]

    def _batch(self, model: Any, images: Any, labels: Any, indices: Any, triplets: Any):
        """The batch as the session's request, the images as a tensor, and the model the inner
        maximisation asks (inside a DDP wrapper) with one oracle per batch-norm set."""
        torch = _torch()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        images = image_tensor(images)
        n = images.shape[0]
        request = dict(shape=[int(s) for s in images.shape], labels=label_list(labels, n))
        if indices is not None:
            request["indices"] = label_list(indices, n, "indices")
        if triplets is not None:
            request["triplets"] = triplet_rows(triplets)
        inner = unwrapped(model)
        return images, request, inner, self._models(inner)

    def perturb(self, model: Any, images: Any, labels: Any, *, indices: Any = None, triplets: Any = None) -> Any:
        """The inner maximisation alone: ``x_adv, rows = defense.perturb(model, images, labels)``
        returns the perturbed rows on the images' device, in their dtype (the stacked anchors,
        positives and negatives of a triplet defense's triplets; the batch itself for EST; a
        defense of several batch-norm sets, MDProp or AdvProp-D, is refused), and their roles: ``rows.anchors``, ``rows.positives``, ``rows.negatives``
        (index tensors into ``x_adv``; ``None`` where the batch itself is perturbed),
        ``rows.indices_tuple`` (the three, for PML's losses), ``rows.labels`` and ``rows.source``
        (the batch row each came from). Your own forward and loss then train on them (a CE head
        beside the embedding, a PML loss). The step is counted as the defense's own; a defense
        whose memory remembers each step's adversarial loss (HM's LGA) waits for it:
        ``defense.finish(loss)`` before the next step (``last["awaiting_loss"]`` says so)."""
        torch = _torch()
        images, request, inner, models = self._batch(model, images, labels, indices, triplets)
        with _attacking(inner, self.inner):
            answer, (raw,) = session_call(self._session, "perturb", request, [to_bytes(images)], models)
        x = torch.from_numpy(np.frombuffer(raw, dtype="<f4").reshape(answer["shape"]).copy())
        x = _like(x, images)
        self.last = dict(steps_done=answer["steps_done"], route=answer["route"], awaiting_loss=answer["awaiting_loss"])
        return x, Rows(answer, images.device)

    def finish(self, adversarial_loss: Any) -> None:
        """Ends a ``perturb`` step whose defense remembers its adversarial loss (HM's LGA): the
        loss your own step computed on the perturbed rows (a number or a scalar tensor)."""
        v = float(adversarial_loss.detach()) if hasattr(adversarial_loss, "detach") else float(adversarial_loss)
        done = session_call(self._session, "finish", dict(adversarial_loss=v))[0]
        if self.last is not None:
            self.last.update(steps_done=done["steps_done"], awaiting_loss=False)

    def __call__(self, model: Any, images: Any, labels: Any, *, indices: Any = None, triplets: Any = None) -> Any:
        # Eager inside a torch.compile'd step (a graph break at rdml's call; see _loop.eager).
        if "_eager" not in self.__dict__:
            self._eager = eager(self._step)
        return self._eager(model, images, labels, indices, triplets)

    def _step(self, model: Any, images: Any, labels: Any, indices: Any, triplets: Any) -> Any:
        torch = _torch()
        images, request, inner, models = self._batch(model, images, labels, indices, triplets)
        n = images.shape[0]
        with _attacking(inner, self.inner):
            answer, raw = session_call(self._session, "inner", request, [to_bytes(images)], models)
        embeddings = []
        for f, r in zip(answer["forwards"], raw):
            x = torch.from_numpy(np.frombuffer(r, dtype="<f4").reshape(f["shape"]).copy())
            x = _like(x, images)
            with batch_norm_set(inner, f["bn_set"]) if f["bn_set"] else contextlib.nullcontext():
                e = embedding_of(model(x), self.output)
            embeddings.append(embeddings_of(e, "model"))
        if self._own is not None:
            return self._own_loss(embeddings, labels, n, answer["route"])
        request = dict(rows=[int(e.shape[0]) for e in embeddings], dtype=str(embeddings[0].dtype).replace("torch.", ""))
        beta = self.loss.beta if self.loss is not None else None
        if beta is not None:
            request["beta"] = float(beta.detach())
        stepped, grads = session_call(self._session, "outer", request, [to_bytes(e) for e in embeddings])
        self.last = dict(stepped, route=answer["route"])
        inputs = list(embeddings)
        tensors = [tensor_like(g, e) for g, e in zip(grads, embeddings)]
        if beta is not None:
            inputs.append(beta)
            tensors.append(torch_scalar_like(stepped["beta_grad"], beta))
        return _Pulled.apply(stepped["loss"], tensors, inputs)

    def parameters(self) -> Iterator[Any]:
        """The defense's loss's own trainable parameters (the margin loss's β)."""
        if self.loss is not None:
            yield from self.loss.parameters()

    def _own_loss(self, embeddings: List[Any], labels: Any, n: int, route: Dict[str, int]) -> Any:
        """The caller's loss summed over the batches the forwards hold (each whole batches of the
        labels: EST's shifted batch, MDProp's clean and generated distributions), mined by its
        miner when given."""
        torch = _torch()
        y = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(np.asarray(labels))
        batches = [b for e in embeddings for b in e.split(n)]
        losses = []
        for b in batches:
            yb = y.to(b.device)
            tuples = self._miner(b, yb) if self._miner is not None else None
            losses.append(self._own(b, yb, tuples) if tuples is not None else self._own(b, yb))
        adversarial = losses[1:] if len(losses) > 1 else losses
        value = float(sum(float(v.detach()) for v in adversarial) / len(adversarial))
        done = session_call(self._session, "done", dict(adversarial_loss=value))[0]
        self.last = dict(steps_done=done["steps_done"], adversarial_loss=value,
                         loss=sum(float(v.detach()) for v in losses), route=route)
        return sum(losses)

    def start_epoch(self, epoch: int, epochs: int, *, model: Any = None, images: Any = None, labels: Any = None,
                    batch: int = 128) -> None:
        """Epoch ``epoch`` (0-based) of ``epochs`` starts; a defense that embeds the training set
        there (MDProp's UX) takes ``model``, ``images`` and ``labels``."""
        request: Dict[str, Any] = dict(epoch=integer(epoch, "epoch"), epochs=integer(epochs, "epochs"),
                                       batch=integer(batch, "batch"))
        arrays, models = [], []
        if images is not None:
            x, y = images_and_labels(images, labels)
            request["training_set"] = dict(shape=[int(s) for s in x.shape], labels=y.tolist())
            arrays.append(x.tobytes())
        if model is not None:
            inner = unwrapped(model)
            models.append(_SetModel(inner, 0, self.output))
            # The training set's features as rdml's trainer takes them: evaluation mode, clean set.
            with _attacking(inner, "eval"):
                self.info = session_call(self._session, "start_epoch", request, arrays, models)[0]
        else:
            self.info = session_call(self._session, "start_epoch", request, arrays, models)[0]

    def state_dict(self) -> Dict[str, Any]:
        """The defense's state (steps, epoch, its memory: HM's LGA loss) and random stream."""
        return session_call(self._session, "state", {})[0]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        session_call(self._session, "load_state", mapping(state, "state"))


class Rows:
    """The roles of the rows ``Defense.perturb`` returned: ``anchors``, ``positives`` and
    ``negatives`` (int64 index tensors into its images, ``None`` where the defense perturbs the
    batch itself), ``labels`` (one per row) and ``source`` (the batch row each came from), on the
    images' device."""

    def __init__(self, answer: Dict[str, Any], device: Any):
        torch = _torch()
        t = lambda v: torch.as_tensor(v, dtype=torch.int64, device=device)
        self.labels, self.source = t(answer["labels"]), t(answer["source"])
        roles = answer["triplets"]
        self.anchors, self.positives, self.negatives = (None, None, None) if roles is None else (t(v) for v in roles)

    @property
    def indices_tuple(self) -> Any:
        """``(anchors, positives, negatives)``, PML's ``indices_tuple``; ``None`` without triplets."""
        return None if self.anchors is None else (self.anchors, self.positives, self.negatives)

    def __repr__(self) -> str:
        k = "no triplets" if self.anchors is None else f"{len(self.anchors)} triplets"
        return f"rdml.Rows({len(self.labels)} rows, {k})"
