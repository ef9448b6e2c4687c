"""The run-folder API: ``rdml.open(run_dir)`` and the ``Run`` that ``rdml.train`` and
``rdml.import_torch`` return, with the command line's jobs on a run (``rdml attack``,
``rdml robustness``, ``rdml certify``, ``rdml embed``, ``rdml report``)."""

from __future__ import annotations

import builtins
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _keywords, _ranks, _wire
from ._inputs import images_alone, path as path_of

PathLike = Union[str, "os.PathLike[str]"]


def open(run_dir: PathLike, *, data: Optional[PathLike] = None, device: Optional[str] = None, quiet: bool = False) -> "Run":
    """A finished run folder (written by ``rdml train``)."""
    return Run(run_dir, data=data, device=device, quiet=quiet)


class Run:
    """A finished run folder: its config and metrics, its model's embeddings, attacks on it."""

    def __init__(self, path: PathLike, *, data: Optional[PathLike] = None, device: Optional[str] = None, quiet: bool = False):
        self.path = path_of(path, "run_dir")
        self.data = None if data is None else path_of(data, "data")
        self.device = device
        self.quiet = quiet
        self._info = _wire.run("run_info", dict(dir=self.path))[0]

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
        x = images_alone(images)
        request = dict(model_run=self.path, shape=[int(v) for v in x.shape], batch=int(batch))
        answer, (raw,) = _wire.run("embed_model", request, [x.tobytes()], device=self.device)
        return np.frombuffer(raw, dtype="<f4").reshape(x.shape[0], answer["dim"]).copy()

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
        options = _keywords.options(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                           method=method, queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat)
        request = dict(model=self.path, split=split, attack=attack, options=_wire.drop_none(options), data=self.data,
                       progress=not self.quiet)
        answer, (raw,) = _wire.run("embed_split", request, device=self.device)
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
        group: Any = None,
        group_timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``rdml attack --json``: one attack (``"CA+"``, ``"QA-:M=1"``, ``"NN-CW:0.05"``, …) on the
        test split; ``group=`` splits it over a process group's ranks (``rdml.robustness``'s)."""
        def request():
            options, run = self._attack_args(
                profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
                queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, surrogate=surrogate,
                repeats=repeats, per_query=per_query)
            return dict(model=self.path, attack=spec, options=options, run=dict(run, bn_set=int(bn_set)))
        return self._on_ranks("attack", request, group, group_timeout)

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
        group: Any = None,
        group_timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``rdml robustness``: robrank's ERS suite; the record (``table`` with ``ers``, ``ars``,
        ``rows``) is also written to the run folder's robustness.json and its report (by rank 0
        when ``group=`` splits it over a process group's ranks, as ``rdml.robustness`` says)."""
        def request():
            options, run = self._attack_args(
                profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start, method=method,
                queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat, surrogate=surrogate,
                repeats=repeats, per_query=per_query)
            return dict(model=self.path, options=options, run=run)
        return self._on_ranks("robustness", request, group, group_timeout)

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
        group: Any = None,
        group_timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``rdml certify``: certified Recall@1 of the run's model on its test split (the keywords
        are ``rdml.certify``'s, ``group=`` too); the record is also written to the run folder's
        certify.json (by rank 0 on ranks)."""
        def request():
            options = _keywords.certify_options(method=method, sigma=sigma, radii=radii, samples=samples, select=select,
                                                delta=delta, alpha=alpha, queries=queries, batch=batch, seed=seed,
                                                per_query=per_query)
            return dict(model=self.path, data=self.data, options=options, progress=not self.quiet)
        return _keywords.by_radius(self._on_ranks("certify", request, group, group_timeout), radii)

    def _on_ranks(self, job: str, request: Any, group: Any, group_timeout: Optional[float]) -> Dict[str, Any]:
        """The library's ``job`` on the request ``request()`` builds, on the ranks of ``group``
        (``rdml.robustness``'s): a failure while building it is told to the other ranks."""
        group = _ranks.group_of(group)
        with _ranks.told(group, group_timeout) as reached:
            return _wire.run(job, request(), device=self.device, group=group, timeout=group_timeout,
                             reached=reached)[0]

    def _attack_args(self, *, profile, eps, step, steps, norm, random_start, method, queries, batch, seed,
                     robrank_compat, surrogate, repeats, per_query) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """The options and the run-folder fields ``attack`` and ``robustness`` share, by name (two
        of one type swapped by position would run a different attack silently)."""
        options = _keywords.options(profile=profile, eps=eps, step=step, steps=steps, norm=norm, random_start=random_start,
                           method=method, queries=queries, batch=batch, seed=seed, robrank_compat=robrank_compat,
                           per_query=per_query)
        run = dict(surrogate=None if surrogate is None else path_of(surrogate, "surrogate"), repeats=int(repeats), data=self.data,
                   progress=not self.quiet)
        return _wire.drop_none(options), _wire.drop_none(run)

    def report(self, *, grid: int = 4) -> str:
        """``rdml report``: writes the run's report.html; returns its path."""
        return _wire.run("report", dict(dir=self.path, data=self.data, grid=int(grid)), device=self.device)[0]
