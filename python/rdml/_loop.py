"""rdml's losses and defenses inside your own PyTorch training loop (pytorch-metric-learning's
contract): ``loss = loss_fn(embeddings, labels)`` and ``loss = defense(model, images, labels)``
return a torch scalar on the embeddings' device whose ``backward()`` carries rdml's gradient on
the embeddings on through your model, with your optimizer, scheduler, AMP and DDP. rdml computes
the loss's value and its gradient with respect to the embeddings (the library's
``job::harden``); this module moves tensors to bytes and back, and keeps your model's state as it
found it. Every check of what you pass beyond its Python type is the library's.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _rdml
from ._torch import TorchModel, _torch


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
        first = inputs[0]
        v = torch.tensor(value, dtype=torch.float32, device=first.device)
        if first.is_floating_point() and first.dtype != torch.float32:
            v = v.to(first.dtype)
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs) or not torch.is_grad_enabled():
            return v
        return cls._fn.apply(v, list(grads), *inputs)


def _session_call(session: Any, method: str, request: Dict[str, Any], arrays: Sequence[bytes] = (),
                  models: Sequence[Any] = ()) -> Tuple[Any, List[bytes]]:
    out, raw = session.call(method, json.dumps(request), list(arrays), list(models))
    return json.loads(out), raw


def _embeddings(e: Any, what: str) -> Any:
    """``e`` as a 2-D floating torch tensor (its graph kept)."""
    torch = _torch()
    if not isinstance(e, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor of N × D embeddings, got {type(e).__name__}")
    if e.ndim != 2:
        raise ValueError(f"{what}: expected N × D embeddings, got shape {tuple(e.shape)}")
    if not e.is_floating_point():
        raise ValueError(f"{what}: {e.dtype} values; expected floating-point embeddings")
    if torch.is_grad_enabled() and not e.requires_grad:
        raise ValueError(
            f"{what}: they carry no graph (computed under torch.no_grad(), or detached), so the loss could not "
            "train the model; compute them with gradients, or call the loss under torch.no_grad() for its value alone")
    return e


def _bytes(t: Any) -> bytes:
    """A tensor's values as little-endian float32 bytes (from any device and floating type)."""
    torch = _torch()
    return t.detach().to(torch.float32).cpu().contiguous().numpy().astype("<f4", copy=False).tobytes()


def _tensor_like(raw: bytes, like: Any) -> Any:
    """Float32 bytes as a tensor of ``like``'s shape, device and dtype."""
    torch = _torch()
    a = np.frombuffer(raw, dtype="<f4").reshape(tuple(like.shape)).copy()
    return torch.from_numpy(a).to(device=like.device, dtype=like.dtype)


def _label_list(labels: Any, n: int, what: str = "labels") -> List[int]:
    torch = _torch()
    v = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if v.ndim != 1 or v.shape[0] != n:
        raise ValueError(f"{what}: expected {n} labels (one per row), got shape {v.shape}")
    if not (np.issubdtype(v.dtype, np.integer) or v.dtype == np.bool_):
        raise ValueError(f"{what}: expected integer labels, got dtype {v.dtype}")
    return v.astype(np.int64).tolist()


def _gathered(e: Any, labels: List[int]) -> Tuple[Any, List[int], int]:
    """PyTorch metric learning's gathering: every rank's embeddings and labels, all-gathered
    (torch.distributed), this rank's own slice replaced by its tensor with its graph; and the
    world's size."""
    torch = _torch()
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return e, labels, 1
    world, rank = dist.get_world_size(), dist.get_rank()
    n = torch.tensor([e.shape[0]], device=e.device)
    counts = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(counts, n)
    counts = [int(c.item()) for c in counts]
    most = max(counts)
    pad = torch.zeros((most - e.shape[0],) + tuple(e.shape[1:]), dtype=e.dtype, device=e.device)
    parts = [torch.empty((most,) + tuple(e.shape[1:]), dtype=e.dtype, device=e.device) for _ in range(world)]
    dist.all_gather(parts, torch.cat([e.detach(), pad]))
    lab = torch.tensor(labels + [0] * (most - len(labels)), dtype=torch.int64, device=e.device)
    labs = [torch.empty_like(lab) for _ in range(world)]
    dist.all_gather(labs, lab)
    parts = [e if r == rank else parts[r][:counts[r]] for r in range(world)]
    all_labels = [int(v) for r in range(world) for v in labs[r][:counts[r]].tolist()]
    return torch.cat(parts), all_labels, world


class Loss:
    """An rdml loss as pytorch-metric-learning's are: ``rdml.Loss(kind="triplet", margin=0.2,
    miner="semihard")`` takes the keys of a config's ``[loss]`` table (the library reads and
    checks them as it reads a TOML file), and ``loss = loss_fn(embeddings, labels)`` returns a
    torch scalar on the embeddings' device whose ``backward()`` is rdml's gradient. The loss
    mines with its own miner from the stream of ``seed`` (``rdml train``'s), or over your
    ``indices_tuple=(anchors, positives, negatives)`` for the triplet and contrastive losses.
    The margin loss's β is ``loss_fn.beta`` (a ``torch.nn.Parameter``: give it to your
    optimizer, as PML's ``learn_beta``). ``gather=True`` under torch.distributed all-gathers
    every rank's embeddings and labels (PML's ``DistributedLossWrapper``, ``efficient=False``):
    the loss of the whole batch, this rank's rows keeping their graph, scaled by the world's
    size, so that DDP's averaged gradient is the single-process gradient of the whole batch (each
    rank computes the whole batch's loss: rdml has no ``efficient`` mode).
    """

    def __init__(self, kind: str = "triplet", *, seed: int = 0, gather: bool = False, device: Optional[str] = None,
                 **table: Any):
        self.table = dict(kind=kind, **table)
        self.gather = bool(gather)
        self._session = _rdml.Session("loss", json.dumps(dict(loss=self.table, seed=int(seed))), device)
        self.info = _session_call(self._session, "info", {})[0]
        self.beta = None
        if self.info["beta"] is not None:
            torch = _torch()
            self.beta = torch.nn.Parameter(torch.tensor(float(self.info["beta"]["init"])))

    def __repr__(self) -> str:
        return f"rdml.Loss({', '.join(f'{k}={v!r}' for k, v in self.table.items())})"

    def parameters(self) -> Iterator[Any]:
        """The loss's own trainable parameters (the margin loss's β), for your optimizer."""
        if self.beta is not None:
            yield self.beta

    def __call__(self, embeddings: Any, labels: Any = None, indices_tuple: Any = None, ref_emb: Any = None,
                 ref_labels: Any = None) -> Any:
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("ref_emb: rdml's losses rank a batch among itself; a reference set is not supported")
        e = _embeddings(embeddings, "embeddings")
        if labels is None:
            raise ValueError("labels: missing; pass one integer label per row of the embeddings")
        labels = _label_list(labels, e.shape[0])
        world = 1
        if self.gather:
            e, labels, world = _gathered(e, labels)
        request: Dict[str, Any] = dict(labels=labels)
        if indices_tuple is not None:
            request["indices_tuple"] = _tuples(indices_tuple)
        if self.beta is not None:
            request["beta"] = float(self.beta.detach())
        answer, (raw,) = _session_call(self._session, "compute", request, [_bytes(e)])
        grad = _tensor_like(raw, e) * world
        inputs, grads = [e], [grad]
        if self.beta is not None:
            inputs.append(self.beta)
            grads.append(torch_scalar_like(answer["beta_grad"] * world, self.beta))
        self.last = answer
        return _Pulled.apply(answer["loss"] * world, grads, inputs)

    def state_dict(self) -> Dict[str, Any]:
        """The loss's random stream (and β), for your checkpoints."""
        s = _session_call(self._session, "state", {})[0]
        if self.beta is not None:
            s["beta"] = float(self.beta.detach())
        return s

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        beta = state.pop("beta", None)
        _session_call(self._session, "load_state", state)
        if beta is not None and self.beta is not None:
            with _torch().no_grad():
                self.beta.fill_(float(beta))


def torch_scalar_like(v: float, like: Any) -> Any:
    torch = _torch()
    return torch.tensor(float(v), dtype=like.dtype, device=like.device)


def _tuples(t: Any) -> Dict[str, List[int]]:
    """PML's ``indices_tuple`` of triplets: (anchors, positives, negatives)."""
    if not isinstance(t, (tuple, list)) or len(t) != 3:
        raise ValueError("indices_tuple: expected (anchors, positives, negatives), three index tensors of one length")
    a, p, n = (np.asarray(x.detach().cpu() if hasattr(x, "detach") else x).astype(np.int64).ravel().tolist() for x in t)
    return dict(anchor=a, positive=p, negative=n)


# ----- batch-norm sets (MDProp, AdvProp-D) -----

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
    torch = _torch()
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


class _SetModel(TorchModel):
    """The model as the library asks it, inferring with batch-norm set ``bn_set``."""

    def __init__(self, model: Any, bn_set: int):
        super().__init__(model)
        self.bn_set = bn_set

    def embed(self, images, shape, keep):
        with batch_norm_set(self.model, self.bn_set):
            return super().embed(images, shape, keep)


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


def _unwrapped(model: Any) -> Any:
    """The module inside a DistributedDataParallel (or DataParallel) wrapper: attacking through
    it leaves the wrapper's gradient hooks and buffer broadcasts alone."""
    torch = _torch()
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


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
    batch). ``last`` holds the step's diagnostics (collapseness, hardness, the adversarial loss);
    ``state_dict()``/``load_state_dict()`` keep the defense's state for your checkpoints.
    """

    def __init__(self, kind: Optional[str] = None, *, loss: Any = None, seed: int = 0, inner: str = "eval",
                 device: Optional[str] = None, **table: Any):
        if inner not in ("eval", "train"):
            raise ValueError(f"inner: {inner!r}; expected \"eval\" (robrank's, torchattacks') or \"train\"")
        if kind is None:
            raise ValueError("kind: missing; name the defense (rdml's [defense] kinds: act, est, hm, madry, …)")
        self.table = dict(kind=kind, **table)
        self.loss = loss if isinstance(loss, Loss) else None
        loss_table = loss.table if isinstance(loss, Loss) else loss
        if loss_table is not None and not isinstance(loss_table, Mapping):
            raise TypeError("loss: expected an rdml.Loss or a [loss] table as a dict")
        request = dict(defense=self.table, seed=int(seed))
        if loss_table is not None:
            request["loss"] = dict(loss_table)
        self.inner = inner
        self._session = _rdml.Session("defense", json.dumps(request), device)
        self.info = _session_call(self._session, "info", {})[0]
        self.last: Optional[Dict[str, Any]] = None

    @classmethod
    def preset(cls, name: str, **kw: Any) -> "Defense":
        """The defense of an rdml preset (``rdml.Defense.preset("fashion-c2f2-act")``), with its loss."""
        from . import _run

        t = _run("preset_tables", dict(name=str(name)))[0]
        if t["defense"] is None:
            raise ValueError(f"{name!r}: the preset trains without a defense; rdml.Loss(**its loss table) is its loss")
        table = dict(t["defense"])
        return cls(table.pop("kind"), loss=Loss(**t["loss"]) if "loss" not in kw else kw.pop("loss"), **table, **kw)

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
        return [_SetModel(model, k if have else 0) for k in range(sets)]

    def __call__(self, model: Any, images: Any, labels: Any, *, indices: Any = None) -> Any:
        torch = _torch()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(images, torch.Tensor):
            images = torch.as_tensor(np.asarray(images))
        if images.ndim != 4:
            raise ValueError(f"images: expected N × C × H × W, got shape {tuple(images.shape)}")
        if not images.is_floating_point():
            raise ValueError(f"images: {images.dtype} values; expected floats in [0, 1] (divide 8-bit images by 255)")
        n = images.shape[0]
        request = dict(shape=[int(s) for s in images.shape], labels=_label_list(labels, n))
        if indices is not None:
            request["indices"] = _label_list(indices, n, "indices")
        inner = _unwrapped(model)
        models = self._models(inner)
        with _attacking(inner, self.inner):
            answer, raw = _session_call(self._session, "inner", request, [_bytes(images)], models)
        embeddings = []
        for f, r in zip(answer["forwards"], raw):
            x = torch.from_numpy(np.frombuffer(r, dtype="<f4").reshape(f["shape"]).copy())
            x = x.to(device=images.device, dtype=images.dtype)
            with batch_norm_set(inner, f["bn_set"]) if f["bn_set"] else contextlib.nullcontext():
                e = model(x)
            embeddings.append(_embeddings(e, "model"))
        request = dict(rows=[int(e.shape[0]) for e in embeddings])
        beta = self.loss.beta if self.loss is not None else None
        if beta is not None:
            request["beta"] = float(beta.detach())
        stepped, grads = _session_call(self._session, "outer", request, [_bytes(e) for e in embeddings])
        self.last = stepped
        inputs = list(embeddings)
        tensors = [_tensor_like(g, e) for g, e in zip(grads, embeddings)]
        if beta is not None:
            inputs.append(beta)
            tensors.append(torch_scalar_like(stepped["beta_grad"], beta))
        return _Pulled.apply(stepped["loss"], tensors, inputs)

    def start_epoch(self, epoch: int, epochs: int, *, model: Any = None, images: Any = None, labels: Any = None,
                    batch: int = 128) -> None:
        """Epoch ``epoch`` (0-based) of ``epochs`` starts; a defense that embeds the training set
        there (MDProp's UX) takes ``model``, ``images`` and ``labels``."""
        request: Dict[str, Any] = dict(epoch=int(epoch), epochs=int(epochs), batch=int(batch))
        arrays, models = [], []
        if images is not None:
            from ._torch import images_and_labels

            x, y = images_and_labels(images, labels)
            request["training_set"] = dict(shape=[int(s) for s in x.shape], labels=y.tolist())
            arrays.append(x.tobytes())
        if model is not None:
            inner = _unwrapped(model)
            models.append(_SetModel(inner, 0))
            with _attacking(inner, self.inner):
                self.info = _session_call(self._session, "start_epoch", request, arrays, models)[0]
        else:
            self.info = _session_call(self._session, "start_epoch", request, arrays, models)[0]

    def state_dict(self) -> Dict[str, Any]:
        """The defense's state (steps, epoch, its memory: HM's LGA loss) and random stream."""
        return _session_call(self._session, "state", {})[0]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _session_call(self._session, "load_state", dict(state))


class Attack:
    """An rdml attack as a torchattacks attack: ``atk = rdml.Attack("ES", eps=8/255)`` takes a
    spec as ``rdml attack`` names it (``CA+``, ``QA-``, ``ES``, ``TMA``, ``GTM``, …, with
    ``:eps=…`` budgets) and the scoring keywords of ``rdml.attack``; ``x_adv = atk(model, images,
    labels)`` returns the adversarial images as a tensor on the images' device, in their dtype:
    every image the attack moves (``queries=`` the first that many), the others as they were.
    An attack that moves the ranked candidates (CA±) with a ``gallery=`` returns the gallery's
    images. ``return_scores=True`` also returns ``Run.attack``'s dict, with ``attacked`` (the
    items moved). The model runs in eval mode with its parameters frozen for the call (both
    restored after); rdml's objectives, selections and budgets do the rest.
    """

    def __init__(self, spec: str, *, eps: Optional[float] = None, step: Optional[float] = None,
                 steps: Optional[int] = None, norm: Optional[str] = None, random_start: bool = False,
                 method: str = "white-box", seed: int = 0, batch: int = 128, profile: str = "rob28",
                 robrank_compat: bool = False, surrogate: Any = None, differentiable: bool = True,
                 device: Optional[str] = None, quiet: bool = True):
        self.spec = str(spec)
        self.options = dict(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                            method=method, batch=batch, seed=seed, robrank_compat=robrank_compat)
        self.surrogate, self.differentiable, self.device, self.quiet = surrogate, differentiable, device, quiet

    def __repr__(self) -> str:
        return f"rdml.Attack({self.spec!r})"

    def __call__(self, model: Any, images: Any, labels: Any, *, gallery: Any = None, gallery_labels: Any = None,
                 queries: Optional[int] = None, return_scores: bool = False) -> Any:
        from . import _drop_none, _frozen, _model_args, _options, _run, _shaped

        torch = _torch()
        if gallery is None and gallery_labels is not None:
            raise ValueError("gallery_labels: given without gallery; pass the gallery's images as gallery")
        x, shaped = _shaped(images, labels)
        arrays, g = [x], None
        if gallery is not None:
            gx, g = _shaped(gallery, gallery_labels, ("gallery", "gallery_labels"))
            arrays.append(gx)
        m = _model_args(model, self.device, bool(self.differentiable))
        s = _model_args(self.surrogate, self.device) if self.surrogate is not None else dict(model=None, run=None)
        options = _drop_none(_options(queries=queries, **self.options))
        request = dict(spec=self.spec, options=options, progress=not self.quiet, model_run=m["run"],
                       surrogate_run=s["run"], images=shaped, gallery=g, adversarial=True,
                       every_item=queries is None)
        with _frozen(m["model"]), _frozen(s["model"]):
            answer, (raw,) = _run("score", request, arrays, device=m["device"], model=m["model"],
                                  surrogate=s["model"])
        like = gallery if answer["of_gallery"] else images
        shape = shaped["shape"] if not answer["of_gallery"] else g["shape"]
        adv = torch.from_numpy(np.frombuffer(raw, dtype="<f4").reshape(shape).copy())
        if isinstance(like, torch.Tensor):
            adv = adv.to(device=like.device, dtype=like.dtype if like.is_floating_point() else torch.float32)
        return (adv, answer) if return_scores else adv
