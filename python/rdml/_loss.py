"""``rdml.Loss``: an rdml loss in your own loop, as pytorch-metric-learning's are."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ._inputs import labels as label_list, mapping, tensor_like, to_bytes, triplet_rows
from ._loop import _Pulled, eager, embeddings_of, torch_scalar_like
from ._torch import _torch
from ._wire import open_session, session_call


def _gathered(e: Any, labels: List[int]) -> Tuple[Any, List[int], int]:
    """PyTorch metric learning's gathering: every rank's embeddings and labels, all-gathered
    (torch.distributed), this rank's own slice replaced by its tensor with its graph; and the
    world's size."""
    torch = _torch()
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return e, labels, 1
    world, rank = dist.get_world_size(), dist.get_rank()
    # Each rank's rows, and the rest of its shape and its dtype: ranks that would gather tensors
    # of other shapes (which gloo aborts on, and NCCL waits on) are refused on every rank first.
    rest = tuple(e.shape[1:])
    floats = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    kind = floats.index(e.dtype) if e.dtype in floats else len(floats)
    said = torch.tensor([e.shape[0], e.dim(), kind] + list(rest[:4]) + [0] * (4 - len(rest[:4])), device=e.device)
    shapes = [torch.zeros_like(said) for _ in range(world)]
    dist.all_gather(shapes, said)
    shapes = [s.tolist() for s in shapes]
    for r, s in enumerate(shapes):
        if s[1:] != shapes[0][1:]:
            def words(v):
                dtype = floats[v[2]] if v[2] < len(floats) else "another dtype"
                return f"{v[1]}-d rows of shape {tuple(v[3:3 + max(v[1] - 1, 0)])} in {dtype}"
            raise ValueError(f"embeddings: rank {r} gives {words(s)}, rank 0 {words(shapes[0])}; every rank's "
                             "embeddings must have one width and dtype to be gathered")
    counts = [s[0] for s in shapes]
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
    ``indices_tuple=(anchors, positives, negatives)`` for the triplet and contrastive losses (the
    stream is ``rdml train``'s first epoch's; a batch with no triplet is an error, as in rdml's
    trainer).
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
        self.seed = int(seed)
        self._session = open_session("loss", dict(loss=self.table, seed=int(seed)), device)
        self.info = session_call(self._session, "info", {})[0]
        self._eager = eager(self._compute)
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
        if "_eager" not in self.__dict__:
            self._eager = eager(self._compute)
        return self._eager(embeddings, labels, indices_tuple, ref_emb, ref_labels)

    def _compute(self, embeddings: Any, labels: Any, indices_tuple: Any, ref_emb: Any, ref_labels: Any) -> Any:
        if ref_emb is not None or ref_labels is not None:
            raise ValueError("ref_emb: rdml's losses rank a batch among itself; a reference set is not supported")
        e = embeddings_of(embeddings, "embeddings")
        if labels is None:
            raise ValueError("labels: missing; pass one integer label per row of the embeddings")
        labels = label_list(labels, e.shape[0])
        world = 1
        if self.gather:
            if indices_tuple is not None:
                raise ValueError("indices_tuple: rows of this rank's batch, not of the gathered one; "
                                 "pass none with gather=True (the loss mines the gathered batch itself)")
            e, labels, world = _gathered(e, labels)
        request: Dict[str, Any] = dict(labels=labels, dtype=str(e.dtype).replace("torch.", ""))
        if indices_tuple is not None:
            request["indices_tuple"] = _tuples(indices_tuple)
        if self.beta is not None:
            request["beta"] = float(self.beta.detach())
        answer, (raw,) = session_call(self._session, "compute", request, [to_bytes(e)])
        grad = tensor_like(raw, e) * world
        inputs, grads = [e], [grad]
        if self.beta is not None:
            inputs.append(self.beta)
            # β is no module's parameter, so DDP averages nothing of it: the whole batch's gradient,
            # the same on every rank, unscaled.
            grads.append(torch_scalar_like(answer["beta_grad"], self.beta))
        self.last = answer
        return _Pulled.apply(answer["loss"] * world, grads, inputs)

    def state_dict(self) -> Dict[str, Any]:
        """The loss's random stream (and β), for your checkpoints."""
        s = session_call(self._session, "state", {})[0]
        if self.beta is not None:
            s["beta"] = float(self.beta.detach())
        return s

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = mapping(state, "state")
        beta = state.pop("beta", None)
        session_call(self._session, "load_state", state)
        if beta is not None and self.beta is not None:
            with _torch().no_grad():
                self.beta.fill_(float(beta))


def _tuples(t: Any) -> List[List[int]]:
    """PML's ``indices_tuple`` of triplets, (anchors, positives, negatives), as the rows a
    defense's ``triplets=`` are sent as (the library checks both by one rule)."""
    if not isinstance(t, (tuple, list)):
        raise ValueError("indices_tuple: expected (anchors, positives, negatives), three index tensors of one length")
    return triplet_rows(t, "indices_tuple")
