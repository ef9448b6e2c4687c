"""The jobs on what the caller holds as data: the metrics of its own embeddings, the presets and
devices, training into a run folder and importing a PyTorch checkpoint as one."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._inputs import labels as labels_of, matrix, path as path_of
from . import _keywords, _wire
from ._run import PathLike, Run


def metrics(
    embeddings: Any,
    labels: Any,
    *,
    recall_ks: Sequence[int] = (1, 2, 4, 8),
    gallery: Any = None,
    gallery_labels: Any = None,
    distance: str = "euclidean",
    nmi: bool = True,
    pi_ratio: bool = True,
    seed: int = 0,
) -> Dict[str, Any]:
    """The retrieval metrics ``rdml eval --json`` reports, of your own embeddings.

    Each row of ``embeddings`` (float32 or float64, items × dimensions) is a query ranked against
    the other rows, or against ``gallery`` with ``gallery_labels`` when given (In-Shop's
    query/gallery protocol). ``distance`` is ``"euclidean"`` or ``"cosine"`` (rows scaled to unit
    length first). Returns recall@k for each k, map@r, map@10, map, r_precision, nmi, pi_ratio,
    queries, lone_queries (queries with no other item of their class), health and
    metric_seconds. Torch tensors are taken as they are held (requiring grad, bfloat16, on a GPU).
    A query's own row in the gallery (the same values and label, found whatever the order or
    subset) is left out of its own list with a warning; a gallery that is the queries is read as
    leave-one-out (PML's ``ref_includes_query``); labels that leave every query alone in its class are
    a ``ValueError``: the metrics would be undefined.
    """
    q = matrix(embeddings, "embeddings")
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("gallery and gallery_labels go together")
    ql = labels_of(labels, q.shape[0], "labels")
    arrays, gl = [q.tobytes()], None
    if gallery is not None:
        g = matrix(gallery, "gallery")
        arrays, gl = arrays + [g.tobytes()], labels_of(gallery_labels, g.shape[0], "gallery_labels")
    request = dict(dim=q.shape[1], labels=ql, gallery_labels=gl, recall_ks=[int(k) for k in recall_ks],
                   distance=str(distance), nmi=bool(nmi), pi_ratio=bool(pi_ratio), seed=int(seed))
    return _wire.run("metrics", request, arrays)[0]


def presets() -> Dict[str, str]:
    """Every preset (``rdml presets``): name → its TOML."""
    return dict(_wire.run("presets", {})[0])


def devices() -> List[str]:
    """What ``rdml devices`` lists: the CPU, CUDA devices, Vulkan adapters, and what ``auto`` takes."""
    return _wire.run("devices", {})[0]


def train(
    config: PathLike,
    out: PathLike,
    *,
    set: Union[None, Mapping[str, Any], Sequence[str]] = None,
    epochs: Optional[int] = None,
    max_batches: Optional[int] = None,
    defense: Optional[str] = None,
    resume: bool = False,
    overwrite: bool = False,
    device: Optional[str] = None,
    data: Optional[PathLike] = None,
    quiet: bool = False,
) -> "Run":
    """``rdml train``: trains ``config`` (a preset name or a TOML file) into the run folder ``out``.

    ``set`` overrides config keys (``{"loss.margin": 0.1}`` or ``["loss.margin=0.1"]``);
    ``defense`` is an inline TOML table (``'{kind="act",eps=0.302,step=0.0118,steps=32}'``) or
    ``"none"``. Returns the finished run.
    """
    _wire.run("train", dict(
        config=path_of(config, "config"),
        out=path_of(out, "out"),
        set=_keywords.overrides(set),
        epochs=None if epochs is None else int(epochs),
        max_batches=None if max_batches is None else int(max_batches),
        defense=defense,
        resume=bool(resume),
        overwrite=bool(overwrite),
        data=None if data is None else path_of(data, "data"),
        progress=not quiet,
    ), device=device)
    return Run(out, data=data, device=device, quiet=quiet)


def import_torch(
    path: PathLike,
    out: PathLike,
    *,
    arch: str,
    embedder: Optional[PathLike] = None,
    embedding_dim: Optional[int] = None,
    key_map: Union[None, Mapping[str, str], Sequence[str]] = None,
    allow_unused: bool = False,
    allow_missing: bool = False,
    l2_normalize: bool = True,
    input_norm: Optional[str] = None,
    config: Optional[PathLike] = None,
    set: Union[None, Mapping[str, Any], Sequence[str]] = None,
    overwrite: bool = False,
    device: Optional[str] = None,
    quiet: bool = False,
) -> "Run":
    """``rdml import``: makes the run folder ``out`` from a model trained in PyTorch.

    ``path`` is a ``state_dict`` saved by ``torch.save`` (``.pth``/``.pt``), a Lightning
    ``.ckpt`` (robrank's) or a ``.safetensors`` file; for pytorch-metric-learning, the trunk with
    ``embedder`` its embedder file. No pickle code is run. ``arch`` is ``"c2f2"``,
    ``"resnet18"`` or ``"resnet50"``; ``key_map`` renames key prefixes
    (``{"encoder.": "", "head.": "fc."}`` or ``["encoder.=", "head.=fc."]``); ``input_norm`` is
    ``"imagenet"``, ``"none"`` or ``"M1,M2,M3/S1,S2,S3"``; ``config`` gives the data, loss and
    evaluation settings (its model table is replaced). Every tensor must fill a parameter and
    every parameter be filled unless ``allow_unused``/``allow_missing``; the record of what was
    read is the returned run's ``import_record`` (``import.json``). ``device`` and ``quiet`` are
    the returned ``Run``'s.
    """
    rules = dict(key_map) if isinstance(key_map, Mapping) else [str(r) for r in key_map or []]
    # By name: two flags of one type swapped by position would import silently wrong.
    _wire.run("import", dict(
        **{"from": path_of(path, "path")},
        out=path_of(out, "out"),
        arch=arch,
        embedder=None if embedder is None else path_of(embedder, "embedder"),
        embedding_dim=None if embedding_dim is None else int(embedding_dim),
        key_map=rules,
        allow=dict(unused=bool(allow_unused), missing=bool(allow_missing)),
        l2_normalize=bool(l2_normalize),
        input_norm=input_norm,
        config=None if config is None else path_of(config, "config"),
        set=_keywords.overrides(set),
        overwrite=bool(overwrite),
    ))
    return Run(out, device=device, quiet=quiet)


