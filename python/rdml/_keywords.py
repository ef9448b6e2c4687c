"""Keywords under the library's field names: the scoring options every attack, suite and attacked
embedding takes (the library's ``ScoringOptions``), certification's (``CertifyOptions``) and
``set=`` overrides. The signatures that take them stay explicit in each function (they are the
documentation); their defaults are the library's (``python/tests/test_model.py`` ties them).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Union

# The scoring keywords, passed to the library as one dict.
OPTIONS = ("profile", "eps", "step", "steps", "norm", "random_start", "method", "queries", "batch", "seed",
           "robrank_compat", "per_query")


def options(*, profile, eps, step, steps, norm, random_start, method, queries, batch, seed, robrank_compat,
            per_query=None) -> Dict[str, Any]:
    """The scoring keywords under the library's field names (numbers of any type made Python's: a
    NumPy or torch scalar; one left as ``None`` is dropped by the transport and takes the
    library's default). A value that is no number is passed as given, for the library to name
    (``options.steps: a value of the wrong kind``)."""
    return dict(profile=profile, eps=_num(eps, float), step=_num(step, float), steps=_num(steps, int), norm=norm,
                random_start=bool(random_start), method=method, queries=_num(queries, int), batch=_num(batch, int),
                seed=_num(seed, int), robrank_compat=bool(robrank_compat), per_query=_num(per_query, bool))


def _num(v: Any, t: Any) -> Any:
    if v is None or isinstance(v, (str, bytes)):
        return v
    try:
        return t(v)
    except (TypeError, ValueError):
        return v


def certify_options(*, method, sigma, radii, samples, select, delta, alpha, queries, batch, seed,
                    per_query) -> Dict[str, Any]:
    """The certification keywords under the library's field names, as given: the library checks
    them and names the one it cannot read."""
    return dict(method=method, sigma=sigma, radii=radii, samples=samples, select=select, delta=delta, alpha=alpha,
                queries=queries, batch=batch, seed=seed, per_query=per_query)


def by_radius(record: Dict[str, Any], radii: Sequence[float]) -> Dict[str, Any]:
    """A certify record with ``certified`` keyed by each radius as the caller gave it (the library
    keys it by its text, in the order given)."""
    given = list(dict.fromkeys(radii))
    values = list(record["certified"].values())
    if len(given) == len(values):
        record["certified"] = dict(zip(given, values))
    return record


def overrides(set: Union[None, Mapping[str, Any], Sequence[str]]) -> Union[Dict[str, Any], List[str]]:
    """``set=`` as the library reads it: keys and their values (the library writes them as TOML),
    or ``KEY=VALUE`` texts."""
    if set is None:
        return []
    if isinstance(set, Mapping):
        return {str(k): v for k, v in set.items()}
    return [str(s) for s in set]
