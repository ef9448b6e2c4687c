"""rdml: robust deep metric learning, from Python.

The Rust library rdml underneath: this module turns NumPy arrays into bytes and the library's
JSON into dicts, and computes nothing itself. The names are the command line's:

>>> import rdml
>>> run = rdml.train("quickstart", "runs/q", epochs=1)          # rdml train
>>> run.metrics["recall@1"]                                       # run.json's final metrics
>>> run.attack("CA+", queries=64)                                 # rdml attack --json
>>> run.robustness(queries=64)["table"]["ers"]                    # rdml robustness
>>> rdml.metrics(embeddings, labels)                              # rdml eval --json, on your own

Errors are ``ValueError`` (a bad config, spec, shape or value), ``FileNotFoundError`` (a missing
folder or file) or ``RuntimeError``, with the command line's messages. Long calls release the
GIL and print the command line's progress on stderr unless ``quiet=True``.
"""

from __future__ import annotations

import builtins
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _rdml
from ._attack import Attack
from ._bn import batch_norm_set, split_batch_norm
from ._defense import Defense
from ._loss import Loss

__version__ = _rdml.__version__
#: The category of rdml's warnings and notes (``warnings.warn``): a result to read with care
#: (a gallery that is the queries, embeddings off the unit sphere), or something rdml did on its
#: own (an interrupted write finished). ``warnings.simplefilter("error", rdml.RdmlWarning)``
#: makes them errors.
RdmlWarning = _rdml.RdmlWarning
__all__ = ["Attack", "Defense", "Loss", "RdmlWarning", "Run", "attack", "batch_norm_set", "certify", "devices", "embed", "import_torch", "metrics", "open",
           "presets", "robustness", "split_batch_norm", "train"]

PathLike = Union[str, "os.PathLike[str]"]


def _host(a: Any) -> np.ndarray:
    """`a` as NumPy: a torch tensor as PyTorch users hold it (requiring grad, bfloat16 or
    float16, on a GPU) detached, converted and copied to the host; anything else as it is."""
    if type(a).__module__.split(".")[0] == "torch" and hasattr(a, "detach"):
        t = a.detach().cpu()
        if t.is_floating_point() and t.dtype.itemsize < 4:
            t = t.float()
        return t.numpy()
    return np.asarray(a)


def _matrix(a: Any, what: str) -> np.ndarray:
    """A 2-D float32 C-contiguous copy (or view) of `a`."""
    m = _host(a)
    if m.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (items × dimensions), got shape {m.shape}")
    if not np.issubdtype(m.dtype, np.floating) and not np.issubdtype(m.dtype, np.integer):
        raise ValueError(f"{what}: expected numbers, got dtype {m.dtype}")
    return np.ascontiguousarray(m, dtype="<f4")


def _labels(a: Any, n: int, what: str) -> List[int]:
    v = _host(a)
    if v.ndim != 1 or v.shape[0] != n:
        raise ValueError(f"{what}: expected {n} labels (one per row), got shape {v.shape}")
    if not np.issubdtype(v.dtype, np.integer):
        raise ValueError(f"{what}: expected integer labels, got dtype {v.dtype}")
    return v.astype(np.int64).tolist()


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
    q = _matrix(embeddings, "embeddings")
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("gallery and gallery_labels go together")
    ql = _labels(labels, q.shape[0], "labels")
    arrays, gl = [q.tobytes()], None
    if gallery is not None:
        g = _matrix(gallery, "gallery")
        arrays, gl = arrays + [g.tobytes()], _labels(gallery_labels, g.shape[0], "gallery_labels")
    request = dict(dim=q.shape[1], labels=ql, gallery_labels=gl, recall_ks=[int(k) for k in recall_ks],
                   distance=str(distance), nmi=bool(nmi), pi_ratio=bool(pi_ratio), seed=int(seed))
    return _run("metrics", request, arrays)[0]


def presets() -> Dict[str, str]:
    """Every preset (``rdml presets``): name → its TOML."""
    return dict(_run("presets", {})[0])


def devices() -> List[str]:
    """What ``rdml devices`` lists: the CPU, CUDA devices, Vulkan adapters, and what ``auto`` takes."""
    return _run("devices", {})[0]


def _overrides(set: Union[None, Mapping[str, Any], Sequence[str]]) -> Union[Dict[str, Any], List[str]]:
    """``set=`` as the library reads it: keys and their values (the library writes them as TOML),
    or ``KEY=VALUE`` texts."""
    if set is None:
        return []
    if isinstance(set, Mapping):
        return {str(k): v for k, v in set.items()}
    return [str(s) for s in set]


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
    _run("train", dict(
        config=os.fspath(config),
        out=os.fspath(out),
        set=_overrides(set),
        epochs=None if epochs is None else int(epochs),
        max_batches=None if max_batches is None else int(max_batches),
        defense=defense,
        resume=bool(resume),
        overwrite=bool(overwrite),
        data=None if data is None else os.fspath(data),
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
    _run("import", dict(
        **{"from": os.fspath(path)},
        out=os.fspath(out),
        arch=arch,
        embedder=None if embedder is None else os.fspath(embedder),
        embedding_dim=None if embedding_dim is None else int(embedding_dim),
        key_map=rules,
        allow=dict(unused=bool(allow_unused), missing=bool(allow_missing)),
        l2_normalize=bool(l2_normalize),
        input_norm=input_norm,
        config=None if config is None else os.fspath(config),
        set=_overrides(set),
        overwrite=bool(overwrite),
    ))
    return Run(out, device=device, quiet=quiet)


def _model_args(model, device, differentiable=True) -> Dict[str, Any]:
    """An rdml ``Run`` by its folder, anything else as a PyTorch model."""
    from ._torch import TorchModel

    if isinstance(model, Run):
        return dict(model=None, run=model.path, device=model.device)
    return dict(model=TorchModel(model, device, differentiable), run=None, device=None)


def _frozen(m):
    """The PyTorch model's eval mode and frozen parameters for the call (nothing for a Run)."""
    import contextlib

    return m.frozen() if m is not None else contextlib.nullcontext()


def _shaped(images, labels, names=("images", "labels")) -> Tuple[bytes, Dict[str, Any]]:
    """Images as float32 bytes, and their shape and labels as the request holds them."""
    from ._torch import images_and_labels

    x, y = images_and_labels(images, labels, names)
    return x.tobytes(), dict(shape=[int(s) for s in x.shape], labels=y.tolist())


def _queries_and_gallery(images, labels, gallery, gallery_labels) -> Tuple[List[bytes], Dict[str, Any], Any]:
    """The images (and the gallery's, when given) as the call's arrays, and their shapes and labels
    as the request holds them."""
    if gallery is None and gallery_labels is not None:
        raise ValueError("gallery_labels: given without gallery; pass the gallery's images as gallery")
    x, shaped = _shaped(images, labels)
    arrays, g = [x], None
    if gallery is not None:
        gx, g = _shaped(gallery, gallery_labels, ("gallery", "gallery_labels"))
        arrays.append(gx)
    return arrays, shaped, g


def _score(model, images, labels, spec, differentiable, device, surrogate, kw) -> Dict[str, Any]:
    """The suite (``spec`` None) or one attack, by keyword (two of one type swapped by position
    would run another attack silently); the models frozen for the call."""
    kw = dict(kw)
    gallery, gallery_labels = kw.pop("gallery"), kw.pop("gallery_labels")
    from ._torch import module_digest

    arrays, shaped, g = _queries_and_gallery(images, labels, gallery, gallery_labels)
    m = _model_args(model, device, bool(differentiable))
    s = _model_args(surrogate, device) if surrogate is not None else dict(model=None, run=None)
    options = _drop_none(_options(**{k: kw.pop(k) for k in _OPTIONS}))
    request = dict(spec=spec, options=options, repeats=int(kw["repeats"]),
                   out=None if kw["out"] is None else os.fspath(kw["out"]), progress=not kw["quiet"],
                   model_run=m["run"], surrogate_run=s["run"], images=shaped, gallery=g,
                   model_digest=None if m["run"] else module_digest(model))
    with _frozen(m["model"]), _frozen(s["model"]):
        return _run("score_model", request, arrays, device=m["device"], model=m["model"], surrogate=s["model"])[0]


# The scoring keywords every attack, suite and attacked embedding takes (the library's
# `ScoringOptions`), passed to the extension as one dict.
_OPTIONS = ("profile", "eps", "step", "steps", "norm", "random_start", "method", "queries", "batch", "seed",
            "robrank_compat", "per_query")


def _run(job: str, request: Dict[str, Any], arrays: Sequence[bytes] = (), *, device: Any = None, model: Any = None,
         surrogate: Any = None) -> Tuple[Any, List[bytes]]:
    """The library's job ``job`` on ``request`` (its own field names, those left as ``None``
    taking the library's defaults) with float32 ``arrays``: the answer, and its arrays."""
    req = json.dumps({k: v for k, v in request.items() if v is not None}, default=_plain)
    out, arrays = _rdml.run(job, req, list(arrays), device, model, surrogate)
    return json.loads(out), arrays


def _plain(v: Any) -> Any:
    """A NumPy scalar or array in a request (``set={"loss.margin": np.float32(0.1)}``) as JSON."""
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    raise ValueError(f"a {type(v).__name__} in a request: expected numbers, strings, booleans, lists or dicts")


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _options(*, profile, eps, step, steps, norm, random_start, method, queries, batch, seed, robrank_compat,
             per_query=None):
    """The scoring keywords under the library's field names (integers made integers; one left
    as ``None`` is dropped by ``_run``/``_drop_none`` and takes the library's default)."""
    num = lambda v, t: None if v is None else t(v)
    return dict(profile=profile, eps=num(eps, float), step=num(step, float), steps=num(steps, int), norm=norm,
                random_start=bool(random_start), method=method, queries=num(queries, int), batch=int(batch),
                seed=int(seed), robrank_compat=bool(robrank_compat), per_query=num(per_query, bool))


def robustness(
    model: Any,
    images: Any,
    labels: Any = None,
    *,
    profile: str = "rob28",
    queries: int = 1024,
    eps: Optional[float] = None,
    step: Optional[float] = None,
    steps: Optional[int] = None,
    norm: Optional[str] = None,
    random_start: bool = False,
    seed: int = 0,
    batch: int = 128,
    gallery: Any = None,
    gallery_labels: Any = None,
    robrank_compat: bool = False,
    method: str = "white-box",
    repeats: int = 1,
    per_query: bool = False,
    out: Optional[PathLike] = None,
    surrogate: Any = None,
    device: Any = None,
    differentiable: bool = True,
    quiet: bool = False,
) -> Dict[str, Any]:
    """robrank's ERS suite on your own model and images: the dict ``Run.robustness`` returns.

    ``model`` is a ``torch.nn.Module`` or a function of a torch tensor returning N × D
    embeddings; it runs on the device of its parameters (or ``device``), in eval mode, with no
    gradient to its parameters. An ``rdml.Run`` is scored too (its own network, on these images). ``images`` are N × C × H × W in [0, 1] (NumPy or torch; the
    model normalises them itself, since budgets are in pixels) with one integer label each, or a
    torch ``Dataset`` of (image, label) pairs with ``labels`` left out. ``differentiable=False`` declares a model that can only be queried (``method="nes"``, or
    a ``surrogate``). ``surrogate`` (a PyTorch model or an ``rdml.Run``) makes the adversarial
    examples, which are scored on ``model``: a transfer attack. ``gallery`` (with
    ``gallery_labels``, as ``images`` and ``labels``) holds the images the queries are ranked
    among, re-identification's query/gallery split: CA± then moves gallery images; without it each
    image is ranked among the others, its own copy left out.
    ``per_query=True`` keeps each attacked item's own values in every attack's result
    (``table["results"][i]["per_query"]``: ``item``, and ``values`` per column, ``None`` where an
    item has none). ``out`` is a folder for ``robustness.json`` and ``report.html``; nothing is
    written otherwise. An exception inside the model is raised as itself.
    """
    return _score(model, images, labels, None, differentiable, device, surrogate, dict(
        profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
        queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, per_query=per_query, repeats=repeats,
        out=out, quiet=quiet,
        gallery=gallery, gallery_labels=gallery_labels,
    ))


def attack(
    model: Any,
    images: Any,
    labels: Any,
    spec: str,
    *,
    profile: str = "rob28",
    queries: int = 1024,
    eps: Optional[float] = None,
    step: Optional[float] = None,
    steps: Optional[int] = None,
    norm: Optional[str] = None,
    random_start: bool = False,
    seed: int = 0,
    batch: int = 128,
    gallery: Any = None,
    gallery_labels: Any = None,
    robrank_compat: bool = False,
    method: str = "white-box",
    repeats: int = 1,
    per_query: bool = False,
    surrogate: Any = None,
    device: Any = None,
    differentiable: bool = True,
    quiet: bool = False,
) -> Dict[str, Any]:
    """One attack (``"CA+"``, ``"QA-:M=1"``, ``"NN-CW:0.05"``, …) on your own model and images:
    the dict ``Run.attack`` returns; the keywords are ``rdml.robustness``'s."""
    return _score(model, images, labels, spec, differentiable, device, surrogate, dict(
        profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
        queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, per_query=per_query, repeats=repeats,
        out=None, quiet=quiet,
        gallery=gallery, gallery_labels=gallery_labels,
    ))


def _certify_options(*, method, sigma, radii, samples, select, delta, alpha, queries, batch, seed,
                     per_query) -> Dict[str, Any]:
    """The certification keywords under the library's field names, as given: the library checks
    them and names the one it cannot read."""
    return dict(method=method, sigma=sigma, radii=radii, samples=samples, select=select, delta=delta, alpha=alpha,
                queries=queries, batch=batch, seed=seed, per_query=per_query)


def _by_radius(record: Dict[str, Any], radii: Sequence[float]) -> Dict[str, Any]:
    """The record with ``certified`` keyed by each radius as the caller gave it (the library
    keys it by its text, in the order given)."""
    given = list(dict.fromkeys(radii))
    values = list(record["certified"].values())
    if len(given) == len(values):
        record["certified"] = dict(zip(given, values))
    return record


def certify(
    model: Any,
    images: Any,
    labels: Any = None,
    *,
    method: str = "cohen",
    sigma: float = 0.25,
    radii: Sequence[float] = (0.1, 0.25, 0.5),
    samples: int = 10000,
    select: Optional[int] = None,
    delta: Optional[float] = None,
    alpha: float = 0.001,
    queries: int = 500,
    seed: int = 0,
    batch: int = 256,
    gallery: Any = None,
    gallery_labels: Any = None,
    per_query: bool = False,
    device: Any = None,
    quiet: bool = False,
) -> Dict[str, Any]:
    """Certified Recall@1 of your own model by randomized smoothing of the query (Cohen,
    Rosenfeld and Kolter, ICML 2019): for each of the first ``queries`` images, the label of its
    top-1 under Gaussian noise of ``sigma`` (pixels of [0, 1] images) is picked from ``select``
    noisy copies and its probability bounded below from ``samples`` others (Clopper–Pearson,
    level ``alpha``); the top-1 is certified within ℓ2 radius ``sigma·Φ⁻¹(bound)`` (``select``
    defaults to 100). ``method="center"`` certifies instead the nearest item to the query's
    centre-smoothed embedding (Kumar and Goldstein, NeurIPS 2021): ``select`` (default 10,000)
    copies pick the centre and as many check it (``delta``, default 0.05, its Δ), ``samples``
    bound how far it moves. The model
    (a ``torch.nn.Module``, a function, or an ``rdml.Run``) is only asked for embeddings: it
    need not be differentiable. ``gallery``/``gallery_labels`` as for ``rdml.robustness``.

    Returns ``certified`` (each radius as given → the certified Recall@1, in percent), ``clean``
    (the smoothed model's Recall@1), ``abstained`` (the queries with no certificate), the
    settings, ``lone`` (queries with no other item of their class, left out) and ``seconds``;
    ``per_query=True`` adds each query's certificate (``item``, ``label``, ``selected``, ``count``,
    ``p_lower``, ``radius``, ``majority``, ``abstained``; centre smoothing also ``margin``, the
    distance to the nearest other label, and ``least_bound``, the bound at ε = 0)."""
    from ._torch import module_digest

    arrays, shaped, g = _queries_and_gallery(images, labels, gallery, gallery_labels)
    m = _model_args(model, device, False)
    options = _certify_options(method=method, sigma=sigma, radii=radii, samples=samples, select=select, delta=delta,
                               alpha=alpha, queries=queries, batch=batch, seed=seed, per_query=per_query)
    request = dict(options=options, progress=not quiet, model_run=m["run"], images=shaped, gallery=g,
                   model_digest=None if m["run"] else module_digest(model))
    with _frozen(m["model"]):
        return _by_radius(_run("certify_model", request, arrays, device=m["device"], model=m["model"])[0], radii)


def embed(model: Any, images: Any, *, batch: int = 128, device: Any = None) -> np.ndarray:
    """The embeddings (N × D float32) of images N × C × H × W in [0, 1] (or a ``Dataset`` of
    (image, label) pairs) by your own model or an ``rdml.Run``, in batches, as ``rdml.robustness``
    sees them."""
    from ._torch import is_pairs

    x, shaped = _shaped(images, None if is_pairs(images) else np.zeros(len(images), dtype=np.int64))
    m = _model_args(model, device)
    request = dict(model_run=m["run"], shape=shaped["shape"], batch=int(batch))
    with _frozen(m["model"]):
        answer, (raw,) = _run("embed_model", request, [x], device=m["device"], model=m["model"])
    return np.frombuffer(raw, dtype="<f4").reshape(shaped["shape"][0], answer["dim"]).copy()


def open(run_dir: PathLike, *, data: Optional[PathLike] = None, device: Optional[str] = None, quiet: bool = False) -> "Run":
    """A finished run folder (written by ``rdml train``)."""
    return Run(run_dir, data=data, device=device, quiet=quiet)


class Run:
    """A finished run folder: its config and metrics, its model's embeddings, attacks on it."""

    def __init__(self, path: PathLike, *, data: Optional[PathLike] = None, device: Optional[str] = None, quiet: bool = False):
        self.path = os.fspath(path)
        self.data = None if data is None else os.fspath(data)
        self.device = device
        self.quiet = quiet
        self._info = _run("run_info", dict(dir=self.path))[0]

    def __repr__(self) -> str:
        return f"rdml.Run({self.path!r})"

    @property
    def config(self) -> Dict[str, Any]:
        """The resolved experiment config the run trained with."""
        return self._info["config"]

    @property
    def metrics(self) -> Optional[Dict[str, Any]]:
        """The final test metrics (as ``rdml eval --json``), or None when the run evaluated none."""
        return self._info.get("final_metrics")

    @property
    def import_record(self) -> Optional[Dict[str, Any]]:
        """What ``rdml import`` read into the run (``import.json``), or None for a trained run."""
        p = os.path.join(self.path, "import.json")
        if not os.path.isfile(p):
            return None
        with builtins.open(p) as f:
            return json.load(f)

    @property
    def epochs(self) -> List[Dict[str, Any]]:
        """Per-epoch records: loss, time, metrics, collapse diagnostics."""
        return self._info["epochs"]

    def embed(self, images: Any, *, batch: int = 128) -> np.ndarray:
        """Embeddings (N × D float32) of images N × C × H × W in [0, 1], by the run's model."""
        return embed(self, images, batch=batch)

    def embed_split(
        self,
        split: str = "test",
        *,
        attack: Optional[str] = None,
        profile: str = "rob28",
        eps: Optional[float] = None,
        step: Optional[float] = None,
        steps: Optional[int] = None,
        norm: Optional[str] = None,
        random_start: bool = False,
        method: str = "white-box",
        queries: int = 1024,
        batch: int = 128,
        seed: int = 0,
        robrank_compat: bool = False,
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rdml embed``: the embeddings of ``"train"``, ``"test"`` or ``"all"``, with labels and item
        ids; with ``attack`` (``rdml embed --attack``), those of the test split with its first
        ``queries`` items replaced by their adversarial images under that attack."""
        options = _options(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                           method=method, queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat)
        request = dict(model=self.path, split=split, attack=attack, options=_drop_none(options), data=self.data,
                       progress=not self.quiet)
        answer, (raw,) = _run("embed_split", request, device=self.device)
        labels, ids = answer["labels"], answer["ids"]
        emb = np.frombuffer(raw, dtype="<f4").reshape(len(labels), answer["dim"]).copy()
        return emb, np.asarray(labels, dtype=np.int64), np.asarray(ids, dtype=np.int64)

    def attack(
        self,
        spec: str,
        *,
        profile: str = "rob28",
        eps: Optional[float] = None,
        step: Optional[float] = None,
        steps: Optional[int] = None,
        norm: Optional[str] = None,
        random_start: bool = False,
        method: str = "white-box",
        queries: int = 1024,
        batch: int = 128,
        seed: int = 0,
        robrank_compat: bool = False,
        surrogate: Optional[PathLike] = None,
        repeats: int = 1,
        per_query: bool = False,
        bn_set: int = 0,
    ) -> Dict[str, Any]:
        """``rdml attack --json``: one attack (``"CA+"``, ``"QA-:M=1"``, ``"NN-CW:0.05"``, …) on the test split."""
        options, run = self._attack_args(
            profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
            queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, surrogate=surrogate,
            repeats=repeats, per_query=per_query)
        request = dict(model=self.path, attack=spec, options=options, run=dict(run, bn_set=int(bn_set)))
        return _run("attack", request, device=self.device)[0]

    def robustness(
        self,
        profile: str = "rob28",
        queries: int = 1024,
        *,
        eps: Optional[float] = None,
        step: Optional[float] = None,
        steps: Optional[int] = None,
        norm: Optional[str] = None,
        random_start: bool = False,
        method: str = "white-box",
        batch: int = 128,
        seed: int = 0,
        robrank_compat: bool = False,
        surrogate: Optional[PathLike] = None,
        repeats: int = 1,
        per_query: bool = False,
    ) -> Dict[str, Any]:
        """``rdml robustness``: robrank's ERS suite; the record (``table`` with ``ers``, ``ars``,
        ``rows``) is also written to the run folder's robustness.json and its report."""
        options, run = self._attack_args(
            profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
            queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, surrogate=surrogate,
            repeats=repeats, per_query=per_query)
        return _run("robustness", dict(model=self.path, options=options, run=run), device=self.device)[0]

    def certify(
        self,
        *,
        method: str = "cohen",
        sigma: float = 0.25,
        radii: Sequence[float] = (0.1, 0.25, 0.5),
        samples: int = 10000,
        select: Optional[int] = None,
        delta: Optional[float] = None,
        alpha: float = 0.001,
        queries: int = 500,
        seed: int = 0,
        batch: int = 256,
        per_query: bool = False,
    ) -> Dict[str, Any]:
        """``rdml certify``: certified Recall@1 of the run's model on its test split (the keywords
        are ``rdml.certify``'s); the record is also written to the run folder's certify.json."""
        options = _certify_options(method=method, sigma=sigma, radii=radii, samples=samples, select=select,
                                   delta=delta, alpha=alpha, queries=queries, batch=batch, seed=seed,
                                   per_query=per_query)
        request = dict(model=self.path, data=self.data, options=options, progress=not self.quiet)
        return _by_radius(_run("certify", request, device=self.device)[0], radii)

    def _attack_args(self, *, profile, eps, step, steps, norm, random_start, method, queries, batch, seed,
                     robrank_compat, surrogate, repeats, per_query) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The options and the run-folder fields ``attack`` and ``robustness`` share, by name (two
        of one type swapped by position would run a different attack silently)."""
        options = _options(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                           method=method, queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat,
                           per_query=per_query)
        run = dict(surrogate=None if surrogate is None else os.fspath(surrogate), repeats=int(repeats), data=self.data,
                   progress=not self.quiet)
        return _drop_none(options), _drop_none(run)

    def report(self, *, grid: int = 4) -> str:
        """``rdml report``: writes the run's report.html; returns its path."""
        return _run("report", dict(dir=self.path, data=self.data, grid=int(grid)), device=self.device)[0]
