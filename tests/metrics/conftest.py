"""The metric tests run on tiny tensors with one intra-op thread."""

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny tensors: one intra-op thread avoids thread-pool stalls on a busy shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
