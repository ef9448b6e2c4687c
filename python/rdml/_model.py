"""The jobs on a caller's model (a ``torch.nn.Module``, a function of a tensor, or an
``rdml.Run``) and its images: ``rdml.robustness``, ``rdml.attack``, ``rdml.certify`` and
``rdml.embed``. The model runs where it lives, frozen for the call (``_torch.TorchModel``)."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Optional, Sequence

import numpy as np

from . import _keywords, _ranks, _wire
from ._inputs import images_alone, path as path_of, queries_and_gallery
from ._run import PathLike, Run
from ._torch import TorchModel, module_digest, unwrapped


def model_args(model, device, differentiable=True, output=None) -> Dict[str, Any]:
    """An rdml ``Run`` by its folder, anything else as a PyTorch model (``output=``: which of
    what it returns is the embedding)."""
    if isinstance(model, Run):
        if output is not None:
            raise ValueError("output: an rdml.Run returns its embeddings; output= is for a model of your own")
        return dict(model=None, run=model.path, device=model.device)
    # Scored through a DDP wrapper, each forward would broadcast buffers on the group rdml uses.
    return dict(model=TorchModel(unwrapped(model), device, differentiable, output), run=None, device=None)


def frozen(m):
    """The PyTorch model's eval mode and frozen parameters for the call (nothing for a Run)."""
    return m.frozen() if m is not None else contextlib.nullcontext()


def digests(model, surrogate=None, group=None) -> Dict[str, Any]:
    """The digest a record names (``model_digest``), and under ``ranks`` what ranks compare of
    the models beyond the request (none on one process): the digests of every rank's model (its
    parameters alone too, to tell buffers that differ) and surrogate."""
    model, surrogate = unwrapped(model), None if surrogate is None else unwrapped(surrogate)
    whole = module_digest(model)
    if group is None:
        return dict(model_digest=whole, ranks=None)
    return dict(model_digest=whole, ranks=dict(model_digest=whole, surrogate_digest=module_digest(surrogate),
                                               parameters_digest=module_digest(model, parameters_only=True)))


def score(model, images, labels, spec, differentiable, device, surrogate, kw) -> Dict[str, Any]:
    """The suite (``spec`` None) or one attack, by keyword (two of one type swapped by position
    would run another attack silently); the models frozen for the call; on the ranks of
    ``group`` when there are several."""
    kw = dict(kw)
    group, timeout = _ranks.group_of(kw.pop("group")), kw.pop("group_timeout")
    with _ranks.told(group, timeout) as reached:
        gallery, gallery_labels = kw.pop("gallery"), kw.pop("gallery_labels")
        arrays, shaped, g = queries_and_gallery(images, labels, gallery, gallery_labels)
        m = model_args(model, device, bool(differentiable), kw.pop("output"))
        s = model_args(surrogate, device) if surrogate is not None else dict(model=None, run=None)
        if group is not None:
            group.beside(m["model"])
        options = _wire.drop_none(_keywords.options(**{k: kw.pop(k) for k in _keywords.OPTIONS}))
        request = dict(spec=spec, options=options, repeats=int(kw["repeats"]),
                       out=None if kw["out"] is None else path_of(kw["out"], "out"), progress=not kw["quiet"],
                       model_run=m["run"], surrogate_run=s["run"], images=shaped, gallery=g,
                       **(dict(ranks=None, model_digest=None) if m["run"] else digests(model, surrogate, group)))
        with frozen(m["model"]), frozen(s["model"]):
            return _wire.run("score_model", request, arrays, device=m["device"], model=m["model"],
                             surrogate=s["model"], group=group, timeout=timeout, reached=reached)[0]


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
    output: Any = None,
    quiet: bool = False,
    group: Any = None,
    group_timeout: Optional[float] = None,
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
    written otherwise. An exception inside the model is raised as itself. ``output`` says which
    of what the model returns is the embedding: an index into a tuple (``output=0`` for a model
    returning ``(embedding, logits)``), a key of a dict, or a function of the output.

    Called on every rank of a torch.distributed process group (the default one, or ``group=``;
    ``group=False``: this rank alone), the work is split: each rank embeds and attacks its share
    of the batches, and every rank returns the single-process dict (per-query values included),
    ``out`` written by rank 0, progress and warnings shown once. The ranks must make the same
    call on the same model (compared first: a rank asked otherwise, or whose model's digest
    differs, is refused, naming it); a rank that fails makes every rank raise, naming it; a rank
    waits at most ``group_timeout`` seconds (300 by default) for the others at each exchange.
    """
    return score(model, images, labels, None, differentiable, device, surrogate, dict(
        profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
        queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, per_query=per_query, repeats=repeats,
        out=out, quiet=quiet, output=output,
        gallery=gallery, gallery_labels=gallery_labels, group=group, group_timeout=group_timeout,
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
    output: Any = None,
    quiet: bool = False,
    group: Any = None,
    group_timeout: Optional[float] = None,
) -> Dict[str, Any]:
    """One attack (``"CA+"``, ``"QA-:M=1"``, ``"NN-CW:0.05"``, …) on your own model and images:
    the dict ``Run.attack`` returns; the keywords are ``rdml.robustness``'s (``group=`` splits
    it over a process group's ranks likewise)."""
    return score(model, images, labels, spec, differentiable, device, surrogate, dict(
        profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
        queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, per_query=per_query, repeats=repeats,
        out=None, quiet=quiet, output=output,
        gallery=gallery, gallery_labels=gallery_labels, group=group, group_timeout=group_timeout,
    ))


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
    output: Any = None,
    quiet: bool = False,
    group: Any = None,
    group_timeout: Optional[float] = None,
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
    need not be differentiable. ``gallery``/``gallery_labels`` as for ``rdml.robustness``. A
    PyTorch model's noisy copies are drawn on its device (a query's pixels cross once; copy j of
    a query is the same noise in any batch), from torch's generators, not rdml's stream.

    Returns ``certified`` (each radius as given → the certified Recall@1, in percent), ``clean``
    (the smoothed model's Recall@1), ``abstained`` (the queries with no certificate), the
    settings, ``lone`` (queries with no other item of their class, left out; queries that are all
    alone are refused, as ``rdml.metrics`` refuses them), ``seconds`` and ``route``;
    ``per_query=True`` adds each query's certificate (``item``, ``label``, ``selected``, ``count``,
    ``p_lower``, ``radius``, ``majority``, ``abstained``; centre smoothing also ``margin``, the
    distance to the nearest other label, and ``least_bound``, the bound at ε = 0).

    ``group=`` splits the copies' batches over a process group's ranks (centre smoothing: the
    queries), every rank returning the single-process dict, as ``rdml.robustness`` says."""
    group = _ranks.group_of(group)
    with _ranks.told(group, group_timeout) as reached:
        arrays, shaped, g = queries_and_gallery(images, labels, gallery, gallery_labels)
        m = model_args(model, device, False, output)
        if group is not None:
            group.beside(m["model"])
        options = _keywords.certify_options(method=method, sigma=sigma, radii=radii, samples=samples, select=select,
                                            delta=delta, alpha=alpha, queries=queries, batch=batch, seed=seed,
                                            per_query=per_query)
        request = dict(options=options, progress=not quiet, model_run=m["run"], images=shaped, gallery=g,
                       **(dict(ranks=None, model_digest=None) if m["run"] else digests(model, None, group)))
        with frozen(m["model"]):
            answer = _wire.run("certify_model", request, arrays, device=m["device"], model=m["model"], group=group,
                               timeout=group_timeout, reached=reached)[0]
    return _keywords.by_radius(answer, radii)


def embed(model: Any, images: Any, *, batch: int = 128, device: Any = None, output: Any = None, group: Any = None,
          group_timeout: Optional[float] = None) -> np.ndarray:
    """The embeddings (N × D float32) of images N × C × H × W in [0, 1] (or a ``Dataset`` of
    (image, label) pairs) by your own model or an ``rdml.Run``, in batches, as ``rdml.robustness``
    sees them. ``group=`` splits the batches over a process group's ranks, every rank returning
    every row in order, as ``rdml.robustness`` says."""
    group = _ranks.group_of(group)
    with _ranks.told(group, group_timeout) as reached:
        x = images_alone(images)
        m = model_args(model, device, True, output)
        if group is not None:
            group.beside(m["model"])
        request = dict(model_run=m["run"], shape=[int(v) for v in x.shape], batch=int(batch),
                       ranks=None if m["run"] or group is None else digests(model, None, group)["ranks"])
        with frozen(m["model"]):
            answer, (raw,) = _wire.run("embed_model", request, [x.tobytes()], device=m["device"], model=m["model"],
                                       group=group, timeout=group_timeout, reached=reached)
    return np.frombuffer(raw, dtype="<f4").reshape(x.shape[0], answer["dim"]).copy()
