"""Type stubs of the compiled part of rdml (see rdml/__init__.py for the documented API)."""

from typing import Any, List, Optional, Sequence, Tuple

__version__: str

def metrics(
    query: bytes, n: int, dim: int, labels: Sequence[int], gallery: Optional[bytes], gallery_n: int,
    gallery_labels: Optional[Sequence[int]], recall_ks: Sequence[int], cosine: bool, nmi: bool, pi_ratio: bool, seed: int,
) -> str: ...
def presets() -> List[Tuple[str, str]]: ...
def devices() -> List[str]: ...
def train(
    config: str, out: str, set: Sequence[str], epochs: Optional[int], max_batches: Optional[int], defense: Optional[str],
    resume: bool, overwrite: bool, device: Optional[str], data: Optional[str], quiet: bool,
) -> None: ...
def run_info(dir: str) -> str: ...
def embed(dir: str, images: bytes, shape: Tuple[int, int, int, int], batch: int, device: Optional[str]) -> Tuple[bytes, int]: ...
def embed_split(
    dir: str, split: str, data: Optional[str], device: Optional[str]
) -> Tuple[bytes, int, List[int], List[int], List[int]]: ...
def attack(
    dir: str, spec: str, profile: str, eps: Optional[float], step: Optional[float], steps: Optional[int], norm: Optional[str],
    random_start: bool, method: str, queries: int, batch: int, seed: int, robrank_compat: bool, surrogate: Optional[str],
    repeats: int, bn_set: int, data: Optional[str], device: Optional[str], quiet: bool,
) -> str: ...
def robustness(
    dir: str, profile: str, eps: Optional[float], step: Optional[float], steps: Optional[int], norm: Optional[str],
    random_start: bool, method: str, queries: int, batch: int, seed: int, robrank_compat: bool, surrogate: Optional[str],
    repeats: int, data: Optional[str], device: Optional[str], quiet: bool,
) -> str: ...
def report(dir: str, data: Optional[str], grid: int, device: Optional[str]) -> str: ...
def import_torch(
    path: str, out: str, arch: str, embedder: Optional[str], embedding_dim: Optional[int], key_map: Sequence[str],
    allow_unused: bool, allow_missing: bool, l2_normalize: bool, input_norm: Optional[str], config: Optional[str],
    set: Sequence[str], overwrite: bool,
) -> str: ...
def score_model(
    model: Optional[Any], run: Optional[str], surrogate_model: Optional[Any], surrogate_run: Optional[str],
    device: Optional[str], differentiable: bool, images: bytes, shape: Tuple[int, int, int, int],
    labels: Sequence[int],
    gallery: Optional[Tuple[bytes, Tuple[int, int, int, int], Sequence[int]]], spec: Optional[str], profile: str, eps: Optional[float], step: Optional[float],
    steps: Optional[int], norm: Optional[str], random_start: bool, method: str, queries: Optional[int], batch: int,
    seed: int, robrank_compat: bool, repeats: int, out: Optional[str], quiet: bool,
) -> str: ...
def embed_model(
    model: Optional[Any], run: Optional[str], device: Optional[str], images: bytes, shape: Tuple[int, int, int, int], batch: int
) -> Tuple[bytes, int]: ...
def model_scoring_defaults() -> Tuple[str, str, int, int, int, int, int]: ...
