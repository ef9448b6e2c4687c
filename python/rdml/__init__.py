"""rdml: robust deep metric learning, from Python.

The Rust library rdml underneath: the package turns NumPy arrays and torch tensors into the
library's requests and its answers into dicts, and computes nothing itself. This module is its
face; the rooms behind it: ``_wire`` (the transport), ``_inputs`` (what callers pass in: one
host conversion, one label, image and triplet rule), ``_keywords`` (keywords under the library's
field names), ``_jobs`` (data and run jobs), ``_model`` (jobs on a caller's model), ``_run``
(the run folder), ``_torch`` (a PyTorch model as rdml's oracle) and the loop pieces ``_attack``,
``_defense``, ``_loss``, ``_loop``, ``_bn``. The names are the command line's:

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

from . import _rdml
from ._attack import Attack
from ._bn import batch_norm_set, split_batch_norm
from ._defense import Defense
from ._jobs import devices, import_torch, metrics, presets, train
from ._loss import Loss
from ._model import attack, certify, embed, robustness
from ._run import Run, open

__version__ = _rdml.__version__
#: The category of rdml's warnings and notes (``warnings.warn``): a result to read with care
#: (a gallery that is the queries, embeddings off the unit sphere), or something rdml did on its
#: own (an interrupted write finished). ``warnings.simplefilter("error", rdml.RdmlWarning)``
#: makes them errors.
RdmlWarning = _rdml.RdmlWarning
__all__ = ["Attack", "Defense", "Loss", "RdmlWarning", "Run", "attack", "batch_norm_set", "certify", "devices", "embed",
           "import_torch", "metrics", "open", "presets", "robustness", "split_batch_norm", "train"]
