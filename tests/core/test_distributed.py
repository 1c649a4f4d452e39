"""Two CPU processes (gloo) give the same loss and gradients as one process on the whole batch.

Every rank holds half of the images, with all of their views. The reference is a single process
computing the loss on the concatenation of the two local batches.

Why the gradients compare as ``local_grad / world_size == global_grad[rows of this rank]``:
the single-process loss is the mean over all ``2n`` rows, i.e. the mean of the two local losses
(each a mean over ``n`` rows). Rank ``r``'s local loss depends on the other rank's features through
the gather, and the backward of ``gather_with_grad`` sums, onto this rank's features, the
gradients that *every* rank's loss gives them. So this rank's input gradient is
``d(L_0 + L_1)/dx_r``. DDP then averages parameter gradients over ranks (divides by the world
size), which turns it into ``d((L_0 + L_1) / 2)/dx_r = dL_global/dx_r``: the single-process
gradient of this rank's rows.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

# The modules under test are imported inside the functions, not here: the spawned workers import
# this file to find ``_worker``, and the package's ``__init__`` registers the methods into
# solo-learn, an import of several seconds per process that the host-independent code does not
# need. ``_worker`` loads the same modules without the package ``__init__``.

WORLD_SIZE = 2
TEMPERATURE = 0.2
KL_LAMBDA = 0.05  # large enough that the KL's share of the gate gradient is visible


def _make_case(n_images: int, n_views: int, dim: int, seed: int) -> dict[str, torch.Tensor]:
    """Per-rank local batches: ``z``/``logits`` of shape ``(n_views * n_images_local, dim)``."""
    g = torch.Generator().manual_seed(seed)
    local = n_images // WORLD_SIZE
    case = {}
    for r in range(WORLD_SIZE):
        ids = torch.arange(r * local, (r + 1) * local)
        case[f"idx{r}"] = ids.repeat(n_views)  # solo-learn's layout: view after view
        case[f"z{r}"] = torch.randn(n_views * local, dim, generator=g)
        case[f"logits{r}"] = 2.0 * torch.randn(n_views * local, dim, generator=g)
    return case


CASES = {
    "two_views": _make_case(n_images=6, n_views=2, dim=16, seed=0),
    "three_views": _make_case(n_images=4, n_views=3, dim=12, seed=1),
}


def _import_core_without_registration() -> None:
    """Makes ``solo_bayesncl.<module>`` importable without running ``solo_bayesncl/__init__``."""
    if "solo_bayesncl" in sys.modules:
        return
    spec = importlib.util.find_spec("solo_bayesncl")  # locates the package, runs nothing
    package = types.ModuleType("solo_bayesncl")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["solo_bayesncl"] = package


def _plain(z: torch.Tensor, idx: torch.Tensor, gather: bool) -> tuple[torch.Tensor, dict]:
    from solo_bayesncl.core.losses import info_nce_loss

    z = z.clone().requires_grad_(True)
    loss = info_nce_loss(F.normalize(z, dim=-1), idx, TEMPERATURE, gather_distributed=gather)
    loss.backward()
    return loss.detach(), {"z": z.grad}


def _gated(
    z: torch.Tensor, logits: torch.Tensor, idx: torch.Tensor, gather: bool
) -> tuple[torch.Tensor, dict]:
    from solo_bayesncl.core.gates import BernoulliGate, bernoulli_kl
    from solo_bayesncl.core.losses import gated_representation, info_nce_loss

    z = z.clone().requires_grad_(True)
    logits = logits.clone().requires_grad_(True)
    out = BernoulliGate("ste", 0.5, 1.0)(logits)
    v = gated_representation(z, out.mask, "rep_relu", None)
    loss = info_nce_loss(v, idx, TEMPERATURE, gather_distributed=gather)
    loss = loss + KL_LAMBDA * bernoulli_kl(out.probs, 0.8, 0.01)
    loss.backward()
    return loss.detach(), {"z": z.grad, "logits": logits.grad}


def _module(
    z: torch.Tensor, logits: torch.Tensor, idx: torch.Tensor, gather: bool
) -> tuple[torch.Tensor, dict]:
    """``_gated`` as ``BayesNCLLoss`` computes it, built from the settings as training builds it."""
    from solo_bayesncl.methods.keys import BayesNCLSettings

    z = z.clone().requires_grad_(True)
    logits = logits.clone().requires_grad_(True)
    settings = {"proj_hidden_dim": 8, "proj_output_dim": 8, "temperature": TEMPERATURE}
    settings["bayesian_kl_lambda"] = KL_LAMBDA
    criterion = BayesNCLSettings.from_kwargs(settings).objective(gather_distributed=gather)
    loss = criterion(z, logits, idx)
    loss.backward()
    return loss.detach(), {"z": z.grad, "logits": logits.grad}


PATHS = {"plain": _plain, "gated": _gated, "module": _module}


def _worker(local_rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    _import_core_without_registration()
    from solo_bayesncl.core.distributed import (
        gather_no_grad,
        gather_with_grad,
        is_distributed,
        rank,
    )

    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=local_rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=60),
    )
    try:
        results: dict[str, object] = {
            "rank": rank(),
            "is_distributed": is_distributed(),
            "gathered_ids": gather_no_grad(torch.tensor([10 + local_rank])),
        }
        x = torch.full((2, 3), float(local_rank + 1), requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gathered = gather_with_grad(x)
        results["gather_warnings"] = [str(w.message) for w in caught]
        # every rank's loss weighs rank r's rows by (rank + 1): grad = sum over ranks = 3
        (gathered.sum() * (local_rank + 1)).backward()
        results["gathered_x"] = gathered.detach()
        results["gather_grad"] = x.grad
        for name, case in CASES.items():
            idx, z, logits = (case[f"{k}{local_rank}"] for k in ("idx", "z", "logits"))
            results[f"{name}/plain"] = _plain(z, idx, gather=True)
            results[f"{name}/gated"] = _gated(z, logits, idx, gather=True)
            results[f"{name}/module"] = _module(z, logits, idx, gather=True)
        torch.save(results, os.path.join(out_dir, f"rank{local_rank}.pt"))
        dist.barrier()  # neither process tears its group down while the other still uses it
    finally:
        dist.destroy_process_group()
    # Results are on disk. Leave without the interpreter's teardown, in which gloo's threads
    # have aborted a process that had finished everything ("terminate called without an active
    # exception", SIGABRT, seen once in CI).
    os._exit(0)


@pytest.fixture(scope="module")
def distributed_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Runs every case once on two spawned gloo processes (one spawn: imports are slow)."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=WORLD_SIZE, join=True)
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(WORLD_SIZE)]


def _global(case: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    return torch.cat([case[f"{key}{r}"] for r in range(WORLD_SIZE)])


def test_gather_helpers_across_processes(distributed_results: list[dict]) -> None:
    for r, res in enumerate(distributed_results):
        assert res["rank"] == r
        assert res["is_distributed"] is True
        assert res["gathered_ids"].tolist() == [10, 11]
        expected = torch.cat([torch.full((2, 3), 1.0), torch.full((2, 3), 2.0)])
        assert torch.equal(res["gathered_x"], expected)
        # d/dx_r of sum_s (s + 1) * sum(gathered) = 1 + 2: the backward sums over ranks
        assert torch.equal(res["gather_grad"], torch.full((2, 3), 3.0))
        assert res["gather_warnings"] == []  # no deprecated collective under the hood


def test_helpers_without_process_group() -> None:
    from solo_bayesncl.core.distributed import (
        gather_no_grad,
        gather_with_grad,
        is_distributed,
        rank,
    )

    x = torch.randn(3, 2)
    assert not is_distributed()
    assert rank() == 0
    assert gather_with_grad(x) is x
    assert gather_no_grad(x) is x


@pytest.mark.parametrize("case_name", sorted(CASES))
@pytest.mark.parametrize("path", sorted(PATHS))
def test_two_processes_match_one(
    distributed_results: list[dict], case_name: str, path: str
) -> None:
    case = CASES[case_name]
    idx, z, logits = (_global(case, k) for k in ("idx", "z", "logits"))
    if path == "plain":
        ref_loss, ref_grads = _plain(z, idx, gather=False)
    else:
        ref_loss, ref_grads = PATHS[path](z, logits, idx, gather=False)
    local = [res[f"{case_name}/{path}"] for res in distributed_results]

    mean_local_loss = sum(loss for loss, _ in local) / WORLD_SIZE
    torch.testing.assert_close(mean_local_loss, ref_loss, rtol=1e-5, atol=1e-6)

    rows = z.shape[0] // WORLD_SIZE
    for r, (_, grads) in enumerate(local):
        for name, grad in grads.items():
            expected = ref_grads[name][r * rows : (r + 1) * rows]
            assert expected.abs().max() > 0
            torch.testing.assert_close(grad / WORLD_SIZE, expected, rtol=1e-4, atol=1e-6)


def test_cases_have_both_gate_states() -> None:
    """The gated case is only meaningful if some gates are open and some closed."""
    probs = torch.sigmoid(_global(CASES["two_views"], "logits"))
    assert 0.2 < (probs > 0.5).float().mean() < 0.8
