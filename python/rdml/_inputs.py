"""What callers pass in, as the library takes it: one host conversion of a tensor or array (on
any device, in any dtype), one label rule, one image rule, one triplet rule. Every function of
the package reads its caller's arrays here; values beyond these types and shapes (NaN, ranges,
classes) are the library's to check, in the command line's words.
"""

from __future__ import annotations

import sys
from typing import Any, List, Tuple

import numpy as np


def loaded_torch() -> Any:
    """torch if the caller has imported it, else None: a torch tensor or dataset cannot exist
    without it, and NumPy input never needs it (the package depends on NumPy alone)."""
    return sys.modules.get("torch")


def is_tensor(a: Any) -> bool:
    torch = loaded_torch()
    return torch is not None and isinstance(a, torch.Tensor)


#: What a tensor on PyTorch's meta device is said as: shapes without values.
META = ("on the meta device, which holds shapes and no values: materialise it first (model.to_empty(device=...) "
        "and load_state_dict, or load_state_dict(..., assign=True))")


def host(a: Any, what: str = "a tensor") -> np.ndarray:
    """``a`` as NumPy: a torch tensor as PyTorch users hold it (requiring grad, bfloat16 or
    float16, on a GPU) detached, widened to float32 and copied to the host; anything else as it
    is (``np.asarray``). A tensor on the meta device (no values) is refused, naming ``what``."""
    if is_tensor(a):
        if a.device.type == "meta":
            raise ValueError(f"{what}: {META}")
        t = a.detach().cpu()
        if t.is_floating_point() and t.dtype.itemsize < 4:
            t = t.float()
        return t.numpy()
    return np.asarray(a)


def matrix(a: Any, what: str) -> np.ndarray:
    """A 2-D float32 C-contiguous copy (or view) of ``a``."""
    m = host(a, what)
    if m.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (items × dimensions), got shape {m.shape}")
    if not np.issubdtype(m.dtype, np.floating) and not np.issubdtype(m.dtype, np.integer):
        raise ValueError(f"{what}: expected numbers, got dtype {m.dtype}")
    return np.ascontiguousarray(m, dtype="<f4")


def integer(v: Any, what: str) -> int:
    """A whole number the caller passed as ``what`` (a Python or NumPy integer, or a float with
    no fraction), said in rdml's words otherwise."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)) or (
            isinstance(v, (float, np.floating)) and not float(v).is_integer()):
        raise ValueError(f"{what}: expected an integer, got {v!r}")
    return int(v)


def path(v: Any, what: str) -> str:
    """A file or folder path the caller passed as ``what``."""
    import os

    try:
        return os.fspath(v)
    except TypeError:
        raise TypeError(f"{what}: expected a path (a str or os.PathLike), got {type(v).__name__}") from None


def mapping(v: Any, what: str) -> dict:
    """A dict the caller passed as ``what`` (a state that a ``state_dict()`` returned)."""
    from collections.abc import Mapping

    if not isinstance(v, Mapping):
        raise TypeError(f"{what}: expected the dict state_dict() returned, got {type(v).__name__}")
    return dict(v)


def label_array(a: Any, what: str, n: Any = None) -> np.ndarray:
    """The one label rule: a 1-D sequence of integers (``n`` of them when given), as int64.
    Booleans are refused: a class is a number, and ``True``/``False`` read as 1/0 would make a
    two-class problem out of a mask passed by mistake."""
    v = host(a, what)
    if v.ndim != 1 or (n is not None and v.shape[0] != n):
        count = "a 1-D sequence of integer labels" if n is None else f"{n} labels (one per row)"
        raise ValueError(f"{what}: expected {count}, got shape {v.shape}")
    if v.dtype == np.bool_ or not np.issubdtype(v.dtype, np.integer):
        raise ValueError(f"{what}: expected integer labels, got dtype {v.dtype}")
    return v.astype(np.int64)


def labels(a: Any, n: Any, what: str = "labels") -> List[int]:
    """:func:`label_array` as the request's list."""
    return label_array(a, what, n).tolist()


def image_array(a: Any, what: str = "images") -> np.ndarray:
    """The one image rule: N × C × H × W floating values (in [0, 1]: the library checks), as
    float32 on the host."""
    x = host(a, what)
    if x.ndim != 4:
        raise ValueError(f"{what}: expected N × C × H × W, got shape {x.shape}")
    check_image_dtype(x.dtype, what)
    return np.ascontiguousarray(x, dtype="<f4")


def check_image_dtype(dtype: Any, what: str) -> None:
    """Images are floats in [0, 1]: 8-bit or boolean pixels are refused with the way forward."""
    torch = loaded_torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        floating = dtype.is_floating_point
        integer = not floating and not dtype.is_complex
    else:
        dt = np.dtype(dtype)
        floating = np.issubdtype(dt, np.floating)
        integer = dt == np.bool_ or np.issubdtype(dt, np.integer)
    name = str(dtype).replace("torch.", "")
    if integer:
        raise ValueError(
            f"{what}: {name} values; expected floats in [0, 1] (divide 8-bit images by 255; the model normalises them itself)"
        )
    if not floating:
        raise ValueError(f"{what}: expected floating-point values, got dtype {name}")


def image_tensor(a: Any, what: str = "images") -> Any:
    """The image rule for a training loop's batch: a torch tensor where it is (its device and
    dtype kept), a NumPy array made one."""
    torch = loaded_torch()
    if not is_tensor(a):
        x = np.asarray(a)
        check_image_dtype(x.dtype, what)
        a = torch.from_numpy(np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("=")))
    t = a
    if t.ndim != 4:
        raise ValueError(f"{what}: expected N × C × H × W, got shape {tuple(t.shape)}")
    check_image_dtype(t.dtype, what)
    return t


def is_pairs(images: Any) -> bool:
    """Whether ``images`` is a dataset of (image, label) pairs rather than an array."""
    if isinstance(images, np.ndarray) or is_tensor(images):
        return False
    if not hasattr(images, "__getitem__") or not hasattr(images, "__len__"):
        return False
    return len(images) > 0 and isinstance(images[0], (tuple, list))


def images_and_labels(images: Any, labels: Any, names: Tuple[str, str] = ("images", "labels")) -> Tuple[np.ndarray, np.ndarray]:
    """``images`` (an array or tensor N × C × H × W, or a ``Dataset`` of (image, label) pairs
    with ``labels`` left out) and ``labels`` as float32 images and int64 labels. ``names``: the
    keywords they were passed as."""
    im, lb = names
    if labels is None:
        if not hasattr(images, "__getitem__") or not hasattr(images, "__len__") or isinstance(images, np.ndarray) \
                or is_tensor(images):
            raise ValueError(f"{lb}: missing; pass one label per image (or a Dataset of (image, label) pairs as {im})")
        pairs = [images[i] for i in range(len(images))]
        if not pairs or not all(isinstance(p, (tuple, list)) and len(p) >= 2 for p in pairs):
            raise ValueError(f"{im}: a dataset must hold (image, label) pairs")
        images = np.stack([host(p[0]) for p in pairs])
        labels = [int(host(p[1])) for p in pairs]
    x = image_array(images, im)
    return x, label_array(labels, lb)


def images_alone(images: Any) -> np.ndarray:
    """Images to embed: an array or tensor N × C × H × W, or a ``Dataset`` of (image, label)
    pairs (the labels unread), as float32."""
    if is_pairs(images):
        return images_and_labels(images, None)[0]
    return image_array(images)


def shaped(images: Any, labels: Any, names: Tuple[str, str] = ("images", "labels")) -> Tuple[bytes, dict]:
    """Images as float32 bytes, and their shape and labels as a request holds them."""
    x, y = images_and_labels(images, labels, names)
    return x.tobytes(), dict(shape=[int(s) for s in x.shape], labels=y.tolist())


def queries_and_gallery(images: Any, labels: Any, gallery: Any, gallery_labels: Any) -> Tuple[List[bytes], dict, Any]:
    """The images (and the gallery's, when given) as a call's arrays, and their shapes and
    labels as the request holds them."""
    if gallery is None and gallery_labels is not None:
        raise ValueError("gallery_labels: given without gallery; pass the gallery's images as gallery")
    x, request = shaped(images, labels)
    arrays, g = [x], None
    if gallery is not None:
        gx, g = shaped(gallery, gallery_labels, ("gallery", "gallery_labels"))
        arrays.append(gx)
    return arrays, request, g


def triplet_rows(triplets: Any, what: str = "triplets") -> List[List[int]]:
    """The one triplet rule on the Python side: (anchors, positives, negatives), sequences of
    integer batch rows, each flattened to a list; rdml checks their count, lengths, ranges and
    labels."""
    if isinstance(triplets, (str, bytes)) or not hasattr(triplets, "__iter__"):
        raise TypeError(f"{what}: expected (anchors, positives, negatives), got {type(triplets).__name__}")
    rows = []
    for p in triplets:
        v = host(p, what).reshape(-1)
        if v.size and (v.dtype == np.bool_ or not np.issubdtype(v.dtype, np.integer)):
            raise ValueError(f"{what}: expected integer batch rows, got dtype {v.dtype}")
        rows.append(v.astype(np.int64).tolist())
    return rows


def to_bytes(t: Any) -> bytes:
    """A tensor's (or array's) values as little-endian float32 bytes."""
    return np.ascontiguousarray(host(t), dtype="<f4").tobytes()


def tensor_like(raw: bytes, like: Any) -> Any:
    """Float32 bytes as a tensor of ``like``'s shape, device and dtype."""
    torch = loaded_torch()
    a = np.frombuffer(raw, dtype="<f4").reshape(tuple(like.shape)).copy()
    return torch.from_numpy(a).to(device=like.device, dtype=like.dtype)
