"""A PyTorch model as rdml's attacks ask it: embed a batch, and pull a gradient on the embeddings
back to the images (a vector–Jacobian product). The model runs where its parameters are (a CUDA
device included), in eval mode, with no gradient to its parameters; rdml sees float32 bytes
alone. Every check of what the model returns beyond its type (sizes, NaN) is the library's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Tuple

import numpy as np


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the package's own dependency is NumPy alone
        raise ImportError("scoring a PyTorch model needs torch installed (pip install torch)") from e
    return torch


def _loaded_torch() -> Any:
    """torch if the caller has imported it, else None: a torch tensor or dataset cannot exist
    without it, and NumPy input never needs it (the package depends on NumPy alone)."""
    import sys

    return sys.modules.get("torch")


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
    if found is not None and found.is_floating_point():
        dtype = found.dtype
    where = torch.device(device) if device is not None else (found.device if found is not None else torch.device("cpu"))
    return where, dtype


class TorchModel:
    """``model`` (a ``torch.nn.Module`` or a function of a tensor) as rdml's library calls it."""

    def __init__(self, model: Any, device: Optional[Any] = None, differentiable: bool = True):
        torch = _torch()
        if not callable(model):
            raise TypeError(f"model: expected a torch.nn.Module or a function of a torch tensor, got {type(model).__name__}")
        self.model = model
        # Whether rdml may ask for gradients (False: a model that can only be queried).
        self.differentiable = bool(differentiable)
        self.device, self.dtype = _placement(model, device)
        self._kept = None
        self._torch = torch

    @contextlib.contextmanager
    def frozen(self) -> Iterator["TorchModel"]:
        """Eval mode and no parameter gradients for the call; every module's mode and every
        parameter's flag restored after, whatever happened."""
        torch = self._torch
        if not isinstance(self.model, torch.nn.Module):
            yield self
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
            self._kept = None

    def _images(self, images: bytes, shape: Tuple[int, int, int, int], keep: bool):
        torch = self._torch
        x = torch.from_numpy(np.frombuffer(images, dtype="<f4").reshape(shape).copy()).to(self.device)
        if keep:
            x.requires_grad_(True)
        return x

    def embed(self, images: bytes, shape: Tuple[int, int, int, int], keep: bool) -> Tuple[bytes, Tuple[int, ...], bool]:
        """The embeddings' float32 bytes, their shape and whether they carry a gradient to the
        images; the library checks the rest."""
        torch = self._torch
        x = self._images(images, shape, keep)
        with torch.enable_grad() if keep else torch.no_grad():
            e = self.model(x if self.dtype == torch.float32 else x.to(self.dtype))
        if not isinstance(e, torch.Tensor):
            raise TypeError(f"model: returned a {type(e).__name__}; expected a torch.Tensor of N × D embeddings")
        if not e.is_floating_point():
            raise ValueError(f"model: returned {e.dtype} embeddings; expected floating-point values")
        self._kept = (x, e) if keep and e.requires_grad else None
        return e.detach().to(torch.float32).cpu().numpy().tobytes(), tuple(e.shape), bool(e.requires_grad)

    def pull_back(self, grad: bytes) -> bytes:
        torch = self._torch
        if self._kept is None:
            raise RuntimeError("rdml asked for a gradient before embedding the images with their graph")
        x, e = self._kept
        self._kept = None
        g = torch.from_numpy(np.frombuffer(grad, dtype="<f4").reshape(tuple(e.shape)).copy()).to(e.device, e.dtype)
        (gx,) = torch.autograd.grad(e, x, grad_outputs=g, allow_unused=True)
        if gx is None:
            raise ValueError("model: its embeddings do not depend on the images, so no attack can move them")
        return gx.detach().to(torch.float32).cpu().numpy().tobytes()


def images_and_labels(images: Any, labels: Any, names: Tuple[str, str] = ("images", "labels")) -> Tuple[np.ndarray, np.ndarray]:
    """``images`` (a NumPy array or torch tensor N × C × H × W, or a torch ``Dataset`` of (image,
    label) pairs) and ``labels`` as float32 images and int64 labels; dtypes checked here, values
    by the library. ``names``: the keywords they were passed as."""
    im, lb = names
    if labels is None:
        if not hasattr(images, "__getitem__") or not hasattr(images, "__len__") or isinstance(images, np.ndarray):
            raise ValueError(f"{lb}: missing; pass one label per image (or a Dataset of (image, label) pairs as {im})")
        pairs = [images[i] for i in range(len(images))]
        if not pairs or not all(isinstance(p, (tuple, list)) and len(p) >= 2 for p in pairs):
            raise ValueError(f"{im}: a dataset must hold (image, label) pairs")
        images = np.stack([_array(p[0], im) for p in pairs])
        labels = [int(_array(p[1], lb)) for p in pairs]
    x = _array(images, im)
    if x.ndim != 4:
        raise ValueError(f"{im}: expected N × C × H × W, got shape {x.shape}")
    if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer):
        raise ValueError(
            f"{im}: {x.dtype} values; expected floats in [0, 1] (divide 8-bit images by 255; the model normalises them itself)"
        )
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{im}: expected floating-point values, got dtype {x.dtype}")
    y = _array(labels, lb)
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_):
        raise ValueError(f"{lb}: expected a 1-D sequence of integer labels, got shape {y.shape} of {y.dtype}")
    return np.ascontiguousarray(x, dtype="<f4"), y.astype(np.int64)


def is_pairs(images: Any) -> bool:
    """Whether ``images`` is a dataset of (image, label) pairs rather than an array."""
    torch = _loaded_torch()
    arrays = (np.ndarray,) if torch is None else (np.ndarray, torch.Tensor)
    if isinstance(images, arrays) or not hasattr(images, "__getitem__") or not hasattr(images, "__len__"):
        return False
    return len(images) > 0 and isinstance(images[0], (tuple, list))


def _array(a: Any, what: str) -> np.ndarray:
    """A NumPy view or copy of ``a`` (a torch tensor on any device, bfloat16 included)."""
    torch = _loaded_torch()
    if torch is not None and isinstance(a, torch.Tensor):
        t = a.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy()
    return np.asarray(a)


def module_digest(model: Any) -> Optional[str]:
    """``sha256:…`` of a ``torch.nn.Module``'s parameters and buffers (names, dtypes, shapes and
    bytes, in ``state_dict`` order), which a record names as ``model_digest``, as a run's records
    name its weights'; ``None`` for a plain function."""
    import hashlib

    state = getattr(model, "state_dict", None)
    if not callable(state):
        return None
    torch = _torch()
    h = hashlib.sha256()
    for name, t in state().items():
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + h.hexdigest()
