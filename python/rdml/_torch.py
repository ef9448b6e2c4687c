"""A PyTorch model as rdml's attacks ask it: embed a batch, and pull a gradient on the embeddings
back to the images (a vector–Jacobian product). The model runs where its parameters are (a CUDA
device included), in eval mode, with no gradient to its parameters; rdml sees float32 bytes
alone. Every check of what the model returns beyond its type (sizes, NaN) is the library's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from ._inputs import META, host, to_bytes


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the package's own dependency is NumPy alone
        raise ImportError("scoring a PyTorch model needs torch installed (pip install torch)") from e
    return torch


def _placement(model: Any, device: Optional[Any]) -> Tuple[Any, Any]:
    """Where the images go and in which floating dtype: ``device`` when given, else the model's
    first parameter's (or buffer's) device and dtype, else the CPU in float32."""
    torch = _torch()
    dtype = torch.float32
    found = None
    if isinstance(model, torch.nn.Module):
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                found = t
                break
            if found is None:
                found = t
    if found is not None and found.device.type == "meta":
        raise ValueError(f"model: its parameters are {META}")
    if found is not None and found.is_floating_point():
        dtype = found.dtype
    where = torch.device(device) if device is not None else (found.device if found is not None else torch.device("cpu"))
    return where, dtype


class TorchModel:
    """``model`` (a ``torch.nn.Module`` or a function of a tensor) as rdml's library calls it."""

    def __init__(self, model: Any, device: Optional[Any] = None, differentiable: bool = True, output: Any = None):
        torch = _torch()
        if not callable(model):
            raise TypeError(f"model: expected a torch.nn.Module or a function of a torch tensor, got {type(model).__name__}")
        check_output(output)
        self.model = model
        self.output = output
        # Whether rdml may ask for gradients (False: a model that can only be queried).
        self.differentiable = bool(differentiable)
        self.device, self.dtype = _placement(model, device)
        self._kept = None
        self._held = None
        self._xa = None
        self._torch = torch

    @contextlib.contextmanager
    def frozen(self) -> Iterator["TorchModel"]:
        """Eval mode and no parameter gradients for the call; every module's mode and every
        parameter's flag restored after, whatever happened."""
        torch = self._torch
        if not isinstance(self.model, torch.nn.Module):
            try:
                yield self
            finally:
                self._kept = self._held = self._xa = None
                self.__dict__.pop("_queries", None)
            return
        modes = [(m, m.training) for m in self.model.modules()]
        needs = [(p, p.requires_grad) for p in self.model.parameters()]
        self.model.eval()
        for p, _ in needs:
            p.requires_grad_(False)
        try:
            yield self
        finally:
            for p, r in needs:
                p.requires_grad_(r)
            for m, t in modes:
                m.training = t
            self._kept = self._held = self._xa = None
            self.__dict__.pop("_queries", None)

    def _images(self, images: bytes, shape: Tuple[int, int, int, int], keep: bool):
        torch = self._torch
        x = torch.from_numpy(np.frombuffer(images, dtype="<f4").reshape(shape).copy()).to(self.device)
        if keep:
            x.requires_grad_(True)
        return x

    def _forward(self, x):
        """The model's embeddings of float32 images ``x`` on its device, in its parameters' dtype."""
        torch = self._torch
        return embedding_of(self.model(x if self.dtype == torch.float32 else x.to(self.dtype)), self.output)

    def _answer(self, x, e, keep: bool) -> Tuple[bytes, Tuple[int, ...], bool]:
        """The embeddings ``e`` of ``x`` as rdml reads them: float32 bytes, their shape and
        whether they carry a gradient back to the images (then kept for the pull-back)."""
        torch = self._torch
        if not isinstance(e, torch.Tensor):
            raise TypeError(f"model: returned a {type(e).__name__}; expected a torch.Tensor of N × D embeddings")
        if not e.is_floating_point():
            raise ValueError(f"model: returned {e.dtype} embeddings; expected floating-point values")
        self._kept = (x, e) if keep and e.requires_grad else None
        return to_bytes(e), tuple(e.shape), bool(e.requires_grad)

    def embed(self, images: bytes, shape: Tuple[int, int, int, int], keep: bool) -> Tuple[bytes, Tuple[int, ...], bool]:
        """The embeddings' float32 bytes, their shape and whether they carry a gradient to the
        images; the library checks the rest."""
        torch = self._torch
        x = self._images(images, shape, keep)
        with torch.enable_grad() if keep else torch.no_grad():
            e = self._forward(x)
        return self._answer(x, e, keep)

    def _pulled(self, grad: bytes):
        """The gradient on the images of the last embeddings kept, of their product with ``grad``."""
        torch = self._torch
        if self._kept is None:
            raise RuntimeError("rdml asked for a gradient before embedding the images with their graph")
        x, e = self._kept
        self._kept = None
        g = torch.from_numpy(np.frombuffer(grad, dtype="<f4").reshape(tuple(e.shape)).copy()).to(e.device, e.dtype)
        (gx,) = torch.autograd.grad(e, x, grad_outputs=g, allow_unused=True)
        if gx is None:
            raise ValueError("model: its embeddings do not depend on the images, so no attack can move them")
        return gx.detach().to(torch.float32)

    def pull_back(self, grad: bytes) -> bytes:
        return to_bytes(self._pulled(grad))

    # A projected-gradient run held on the model's device: the clean rows, the start and the
    # budget cross once (``hold``), then per step only the embeddings and their gradient
    # (``step``); the images come back at the end (``release``).

    def hold(self, images: bytes, start: Optional[bytes], shape: Tuple[int, int, int, int], norm: str, eps: float,
             step: float, project: bool = True) -> Tuple[bytes, Tuple[int, ...], bool]:
        """Keeps the clean rows and the start (the clean rows when ``None``) on the model's
        device and embeds the start with its graph; ``project=False`` steps without the ε-ball
        (N-FGSM)."""
        x0 = self._images(images, shape, False)
        xa = x0.clone() if start is None else self._images(start, shape, False)
        self._held = (x0, norm, float(eps), float(step), bool(project))
        self._xa = xa
        return self._embed_held(xa)

    def _embed_held(self, xa):
        torch = self._torch
        x = xa.detach().requires_grad_(True)
        with torch.enable_grad():
            e = self._forward(x)
        return self._answer(x, e, True)

    def step(self, grad: bytes, more: bool) -> Optional[Tuple[bytes, Tuple[int, ...], bool]]:
        """Pulls ``grad`` back to the held images, takes the projected step there (rdml's
        ``engine::descend``, the same float32 operations), and with ``more`` embeds the result."""
        torch = self._torch
        if self._held is None:
            raise RuntimeError("rdml stepped a run the model does not hold")
        x0, norm, eps, size, project = self._held
        gx = self._pulled(grad)
        # Two reductions, no image-sized mask: NaN propagates through both, ±inf shows in one.
        finite = torch.isfinite(gx.amax()) & torch.isfinite(gx.amin())
        with torch.no_grad():
            descend(self._xa, x0, gx, norm, eps, size, project)
        out = self._embed_held(self._xa) if more else None
        if not bool(finite):
            raise ValueError("model: the gradient with respect to the images holds NaN or infinite values")
        return out

    # Randomized smoothing's noisy copies drawn on the model's device: a query's pixels cross
    # once, then only the copies' embeddings. Copy j of a query is the same noise whatever batch
    # it falls in: blocks of NOISE_BLOCK copies, each from a generator seeded by the seed, the
    # query's stream and the block.

    def embed_noisy(self, new, drop, rows, shape, sigma: float, seed: int) -> Tuple[bytes, Tuple[int, ...], bool]:
        torch = self._torch
        held = self.__dict__.setdefault("_queries", {})
        for stream in drop:
            held.pop(stream, None)
        for stream, pixels in new:
            held[stream] = [self._images(pixels, (1, *shape), False), None]
        parts, start = [], 0
        while start < len(rows):
            stream, copy = rows[start]
            block = copy // NOISE_BLOCK
            end = start
            while (end < len(rows) and rows[end][0] == stream and rows[end][1] // NOISE_BLOCK == block
                   and rows[end][1] == copy + (end - start)):
                end += 1
            x0, cached = held[stream]
            if cached is None or cached[0] != block:
                g = torch.Generator(device=self.device)
                g.manual_seed(noise_seed(seed, stream, block))
                cached = (block, torch.randn((NOISE_BLOCK, *shape), generator=g, device=self.device))
                held[stream][1] = cached
            first = copy - block * NOISE_BLOCK
            parts.append(x0 + float(sigma) * cached[1][first:first + (end - start)])
            start = end
        with torch.no_grad():
            e = self._forward(torch.cat(parts))
        return self._answer(None, e, False)

    def release(self) -> bytes:
        """The held images as float32 bytes, ending the run."""
        xa, self._xa, self._held, self._kept = self._xa, None, None, None
        if xa is None:
            raise RuntimeError("rdml released a run the model does not hold")
        return to_bytes(xa)


#: Copies of a query drawn from one generator (the noise of copy j is the same in every batch);
#: one block a query is kept on the device (3 × 224² images: 38 MB).
NOISE_BLOCK = 64


def noise_seed(seed: int, stream: int, block: int) -> int:
    """A generator's seed for ``block`` of ``stream``'s copies under ``seed`` (splitmix64's mix)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + int(stream) * 0xBF58476D1CE4E5B9 + int(block) + 1) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (z ^ (z >> 31)) & (2**63 - 1)


def check_output(output: Any) -> None:
    """``output=``: ``None`` (the model returns its embeddings), an index into a tuple it
    returns, a key of a dict it returns, or a function of what it returns."""
    if output is not None and not isinstance(output, (int, str)) and not callable(output):
        raise TypeError(f"output: expected an index, a key or a function of the model's output, got "
                        f"{type(output).__name__}")


def embedding_of(out: Any, output: Any) -> Any:
    """The embeddings among what the model returned, as ``output=`` says (see :func:`check_output`)."""
    if output is None:
        if isinstance(out, (tuple, list)) or isinstance(out, dict):
            kind = "dict" if isinstance(out, dict) else f"{type(out).__name__} of {len(out)}"
            raise TypeError(f"model: returned a {kind}; say which is the embedding with output= (an index, "
                            "output=0; a key; or a function of the output)")
        return out
    if callable(output) and not isinstance(output, (int, str)):
        return output(out)
    try:
        return out[output]
    except (IndexError, KeyError, TypeError):
        raise ValueError(f"output: {output!r} is not in what the model returned (a {type(out).__name__})") from None


def descend(xa: Any, x0: Any, g: Any, norm: str, eps: float, step: float, project: bool = True) -> Any:
    """One projected step down ``g`` from ``xa``, in place (``xa`` and ``g`` float32,
    ``b × c × h × w``; ``g`` is used up): the sign step for L∞, the normalised step for L2, then
    back into the ε-ball around ``x0`` (unless ``project`` is off: N-FGSM) and [0, 1]. rdml's
    ``attack::engine::descend`` in the same elementwise float32 operations, in the same order
    (bit for bit for L∞)."""
    if norm == "linf":
        delta = g.sign_().mul_(step)
    else:
        n = g.pow(2).sum(dim=(1, 2, 3), keepdim=True).sqrt().clamp_min(1e-12)
        delta = g.div_(n).mul_(step)
    if not project:
        return xa.sub_(delta).clamp_(0.0, 1.0)
    d = xa.sub_(delta).sub_(x0)
    if norm == "linf":
        d.clamp_(-eps, eps)
    else:
        n = d.pow(2).sum(dim=(1, 2, 3), keepdim=True).sqrt()
        d.mul_(n.clamp_min(eps).reciprocal().mul_(eps))
    return d.add_(x0).clamp_(0.0, 1.0)


def unwrapped(model: Any) -> Any:
    """The module inside a DistributedDataParallel (or DataParallel) wrapper: attacking or
    scoring through it leaves the wrapper's gradient hooks and buffer broadcasts (collectives of
    their own, which rdml's would meet) alone."""
    torch = _torch()
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def module_digest(model: Any, parameters_only: bool = False) -> Optional[str]:
    """``sha256:…`` of a ``torch.nn.Module``'s parameters and buffers (names, dtypes, shapes and
    bytes, in ``state_dict`` order), which a record names as ``model_digest``, as a run's records
    name its weights'; of its parameters alone with ``parameters_only`` (ranks whose models differ
    are told whether only the buffers do); ``None`` for a plain function."""
    import hashlib

    state = getattr(model, "state_dict", None)
    if not callable(state):
        return None
    torch = _torch()
    items = model.named_parameters() if parameters_only else state().items()
    h = hashlib.sha256()
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(host(t.reshape(-1).view(torch.uint8)).tobytes())
    return "sha256:" + h.hexdigest()
