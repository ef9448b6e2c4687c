"""Scoring across ranks ("Score across ranks"): `rdml.robustness`, `rdml.attack`, `rdml.certify`
and `rdml.embed` called on every rank of a torch.distributed process group (`torchrun
--nproc_per_node 2`, gloo on the CPU; python/tests/ranks_worker.py is each rank) split their
work, and every rank returns what one process returns; each rank's model is asked for about
half the rows (counted by the model itself); out= is written by rank 0 alone; a failing rank,
a rank asked otherwise, models whose batch-norm statistics differ and a rank never asked all
end in an error on every rank, in bounded time."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import rdml  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_model import L2, c2f2, fashion  # noqa: E402

#: Numbers that are times, or what crossed on one process against the ranks' sum.
UNTIMED = ("seconds", "metric_seconds", "route")


class Counted(nn.Module):
    """A model that counts the rows it is asked to embed (and raises, on one rank, after a few
    calls: a model failing inside the work)."""

    def __init__(self, inner, fail_on_rank=None, fail_after=None):
        super().__init__()
        self.inner, self.rows, self.calls = inner, 0, 0
        self.fail_on_rank, self.fail_after = fail_on_rank, fail_after

    def forward(self, x):
        self.rows += x.shape[0]
        self.calls += 1
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else None
        if rank is not None and rank == self.fail_on_rank and self.calls > self.fail_after:
            raise ValueError("boom in the model")
        return self.inner(x)


class Normalize(nn.Module):
    def forward(self, x):
        return nn.functional.normalize(x, dim=1)


def tiny():
    """A small CNN, the same weights in every process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 16), Normalize())


def bn_model(rank):
    """A CNN with batch norm whose running mean differs by rank (as each rank's last training
    forward leaves it)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                      nn.Flatten(), nn.Linear(32, 8))
    with torch.no_grad():
        m[1].running_mean += 0.01 * rank
    return m.eval()


def data():
    return fashion(48)


def _robustness(m):
    x, y = data()
    return rdml.robustness(m, x[:24], y[:24], queries=24, batch=4, per_query=True, out="rob", quiet=True)


def _attack(m):
    x, y = data()
    return rdml.attack(m, x[:12], y[:12], "CA+", gallery=x[12:], gallery_labels=y[12:], queries=16, batch=4,
                       per_query=True, quiet=True)


def _certify(m):
    x, y = data()
    return rdml.certify(m, x[:24], y[:24], samples=200, select=20, queries=10, batch=64, per_query=True, quiet=True)


def _embed(m):
    return rdml.embed(m, data()[0], batch=8).tolist()


CALLS = dict(robustness=_robustness, attack=_attack, certify=_certify, embed=_embed)


def run_folder(d):
    """An rdml run of a PyTorch C2F2 (imported: no training), scored on its Fashion-MNIST test split."""
    torch.manual_seed(0)
    torch.save(L2(c2f2(16)).state_dict(), d / "c2f2.pth")
    return rdml.import_torch(d / "c2f2.pth", d / "run", arch="c2f2", quiet=True)


def _run_robustness(run):
    return run.robustness(queries=16, batch=8, per_query=True)


def _run_certify(run):
    return run.certify(queries=4, samples=100, select=10, batch=128, per_query=True)


#: The same jobs on a run folder (`Run.robustness`, `Run.certify`): its record kept by rank 0.
RUN_CALLS = dict(run_robustness=_run_robustness, run_certify=_run_certify)


def untimed(v):
    if isinstance(v, dict):
        return {k: untimed(x) for k, x in v.items() if k not in UNTIMED}
    if isinstance(v, list):
        return [untimed(x) for x in v]
    return v


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each rank's answers, and the wall time of the two-rank run."""
    out = tmp_path_factory.mktemp("ranks")
    run = run_folder(out)
    env = dict(os.environ, OUT=str(out), RUN=run.path, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29521",
           str(HERE / "ranks_worker.py")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, [json.loads((out / f"rank{k}.json").read_text()) for k in range(2)], r.stderr


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """The same calls on one process (no process group), each with its rows and seconds."""
    d = tmp_path_factory.mktemp("alone")
    here = os.getcwd()
    os.chdir(d)
    said = {}
    try:
        for name, call in CALLS.items():
            m = Counted(tiny())
            t0 = time.perf_counter()
            said[name] = dict(value=call(m), rows=m.rows, seconds=time.perf_counter() - t0)
        run = rdml.open(run_folder(d).path, quiet=True)
        for name, call in RUN_CALLS.items():
            t0 = time.perf_counter()
            said[name] = dict(value=call(run), seconds=time.perf_counter() - t0)
    finally:
        os.chdir(here)
    return json.loads(json.dumps(said))


@pytest.mark.parametrize("name", list(CALLS))
def test_every_rank_returns_the_single_process_result_and_half_the_rows(ranks, alone, name):
    _, said, _ = ranks
    r0, r1 = said[0][name], said[1][name]
    assert "error" not in r0 and "error" not in r1, (r0, r1)
    # The ranks return one dict, timings and what crossed included (the slowest rank's, the sum).
    assert r0["value"] == r1["value"]
    assert untimed(r0["value"]) == untimed(alone[name]["value"])
    whole = alone[name]["rows"]
    for r in (r0, r1):
        assert 0.35 * whole <= r["rows"] <= 0.65 * whole, (name, r["rows"], whole)
    assert abs(r0["rows"] + r1["rows"] - whole) <= 8, (name, r0["rows"], r1["rows"], whole)
    print(f"{name}: 2 ranks {max(r0['seconds'], r1['seconds']):.2f} s, one process {alone[name]['seconds']:.2f} s")


@pytest.mark.parametrize("name", list(RUN_CALLS))
def test_a_run_scored_on_every_rank_returns_the_single_process_record(ranks, alone, name):
    out, said, _ = ranks
    r0, r1 = said[0][name], said[1][name]
    assert "error" not in r0 and "error" not in r1, (r0, r1)
    assert r0["value"] == r1["value"]
    # The same weights in another folder (the single process scored a copy).
    mine, its = (dict(untimed(r["value"]), model=None) for r in (r0, alone[name]))
    assert mine == its
    kept = json.loads((out / "run" / f"{name[4:]}.json").read_text())
    assert untimed(kept) == untimed(r0["value"])


def test_the_record_is_written_by_rank_0_alone_and_per_query_values_are_kept(ranks):
    out, said, _ = ranks
    assert (out / "r0" / "rob" / "robustness.json").is_file() and (out / "r0" / "rob" / "report.html").is_file()
    assert not (out / "r1" / "rob").exists()
    record = json.loads((out / "r0" / "rob" / "robustness.json").read_text())
    assert record["table"] == said[0]["robustness"]["value"]["table"]
    per = said[0]["robustness"]["value"]["table"]["results"][0]["per_query"]
    assert per["item"] == list(range(24))


def test_a_rank_whose_model_raises_stops_both_in_bounded_time(ranks):
    _, said, _ = ranks
    own, other = said[1]["model_raises"], said[0]["model_raises"]
    assert own["error"] == "ValueError" and "boom in the model" in own["text"]
    assert other["error"] == "RuntimeError" and "rank 1: the model raised ValueError('boom in the model')" in other["text"]
    assert max(own["seconds"], other["seconds"]) < 60


def test_a_rank_refused_before_its_call_and_ranks_asked_otherwise_stop_both(ranks):
    _, said, _ = ranks
    assert said[1]["bad_input"]["error"] == "ValueError"
    assert said[0]["bad_input"]["error"] == "RuntimeError" and "rank 1: ValueError" in said[0]["bad_input"]["text"]
    for k in range(2):
        s = said[k]["other_seed"]
        assert s["error"] == "ValueError" and s["text"].startswith("options.seed: rank 0 and rank 1 were asked"), s
        assert said[k]["after"]["value"] == said[0]["embed"]["value"]


def test_ranks_given_other_images_are_told_so(ranks):
    _, said, _ = ranks
    for k in range(2):
        s = said[k]["other_images"]
        assert s["error"] == "ValueError" and s["text"].startswith("images: rank 1 was given other images"), s
        assert "group=False" in s["text"], s


def test_a_ddp_wrapped_model_is_scored_through_its_module(ranks):
    _, said, _ = ranks
    assert "error" not in said[0]["ddp_wrapped"], said[0]["ddp_wrapped"]
    assert said[0]["ddp_wrapped"]["value"] == said[1]["ddp_wrapped"]["value"]
    x, y = data()
    alone = rdml.attack(bn_model(0), x[:16], y[:16], "ES", queries=16, batch=4, quiet=True)["scores"]
    assert untimed(said[0]["ddp_wrapped"]["value"]) == untimed(alone)


def test_models_whose_batch_norm_statistics_differ_are_refused_until_broadcast(ranks):
    _, said, _ = ranks
    for k in range(2):
        s = said[k]["bn_differs"]
        assert s["error"] == "ValueError" and "batch-norm statistics" in s["text"] and "broadcast" in s["text"], s
    assert said[0]["bn_broadcast"]["value"] == said[1]["bn_broadcast"]["value"]
    x, _ = data()
    assert said[0]["bn_broadcast"]["value"] == rdml.embed(bn_model(0), x, batch=8).tolist()


def test_a_gathered_loss_of_other_widths_is_refused_on_every_rank(ranks):
    _, said, _ = ranks
    for k in range(2):
        s = said[k]["loss_widths"]
        assert s["error"] == "ValueError" and s["text"].startswith("embeddings: rank 1 gives 2-d rows of shape (8,)"), s
        assert "rank 0 2-d rows of shape (16,) in torch.float32" in s["text"], s


def test_a_rank_never_asked_is_not_waited_on_forever(ranks):
    _, said, _ = ranks
    s = said[0]["alone_asked"]
    assert s["error"] == "TimeoutError" and "did not reach this exchange within 2 s" in s["text"], s
    assert s["seconds"] < 10


def test_warnings_are_told_once(ranks):
    _, said, stderr = ranks
    assert "error" not in said[0]["warned"] and said[0]["warned"]["value"] == said[1]["warned"]["value"]
    # The run's warnings (the gallery holds the queries' own images; a run imported without a
    # config), from rank 0 alone.
    assert stderr.count("the gallery holds 12 of the 12 queries' own items") == 1, stderr[-3000:]
    assert stderr.count("was imported without a config") == 1, stderr[-3000:]
