"""The number of intra-op threads changes how the kernels split their sums, not what a run
computes: a few BayesNCL steps with one thread and with two give the same losses and first
gradients to float tolerance. (The study's runs trained with two threads and, from two
benchmarks sharing two cores, with one each; docs/results.md says which.)"""

from __future__ import annotations

import pytest

pytest.importorskip("solo", reason="needs upstream solo-learn installed")

import torch  # noqa: E402
from helpers import (  # noqa: E402
    assert_same_training_to_rounding,
    compose,
    few_training_steps,
    image_folder_overrides,
    real_image_batch,
)

from solo_bayesncl.training.pretrain import prepare_pretrain_cfg  # noqa: E402


def _steps_with_threads(image_folder, threads: int):
    cfg = prepare_pretrain_cfg(
        compose(
            "scripts/pretrain/cifar",
            "bayesncl.yaml",
            [
                *image_folder_overrides(image_folder),
                "method_kwargs.proj_hidden_dim=64",
                "method_kwargs.proj_output_dim=32",
                "optimizer.batch_size=8",
                "accelerator=cpu",
            ],
        ),
        check_data=False,
    )
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert torch.get_num_threads() == threads
        losses, first_grads, _ = few_training_steps(cfg, real_image_batch(image_folder))
        return losses, first_grads
    finally:
        torch.set_num_threads(before)


def test_a_few_bayesncl_steps_are_the_same_with_one_thread_and_with_two(image_folder) -> None:
    assert_same_training_to_rounding(
        _steps_with_threads(image_folder, 1), _steps_with_threads(image_folder, 2)
    )
