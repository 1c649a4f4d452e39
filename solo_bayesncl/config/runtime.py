"""Resolution of accelerator, devices, precision, strategy and memory format from the machine,
and the ``performance`` switches (:func:`performance_settings`).

``auto`` (or left out) follows the machine, explicit values are kept. Devices are stored as a
list of ids, since solo-learn's ``parse_cfg`` scales the learning rate by ``len(cfg.devices)``.
:func:`job_processes` is the job's process count.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import omegaconf
import torch
from omegaconf import OmegaConf

from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.validation import ConfigError, parse_bool

__all__ = [
    "PRECISIONS",
    "PerformanceSettings",
    "cpp_compiler",
    "job_processes",
    "performance_settings",
    "pick_device",
    "resolve_runtime",
]

CPU_STRATEGIES: tuple[str, ...] = (
    "auto",
    "ddp",
    "ddp_find_unused_parameters_false",
    "ddp_find_unused_parameters_true",
)
"""``strategy`` values a CPU run takes. ``ddp_spawn`` (and its variants) pickles the trainer and
its callbacks, some of which are classes defined inside functions, so it fails at launch; ``fsdp``
and ``deepspeed`` need CUDA (Lightning refuses them on the CPU)."""

PRECISIONS: tuple[str, ...] = (
    "auto",
    "16-mixed",
    "bf16-mixed",
    "32-true",
    "64-true",
    "16-true",
    "bf16-true",
    "transformer-engine",
    "transformer-engine-float16",
    "16",
    "32",
    "64",
    "bf16",
)
"""``precision`` values: ``auto`` and those Lightning's Trainer takes (``_PRECISION_INPUT``)."""
_CPU_PRECISIONS = {"32", "32-true", "64", "64-true", "bf16", "bf16-mixed", "bf16-true"}


def _select(cfg: omegaconf.DictConfig, key: str, default):
    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def job_processes(cfg: omegaconf.DictConfig) -> int:
    """The job's process count, ``len(devices) * num_nodes`` (``devices`` not a list: one per
    node): the one place it is computed."""
    devices = OmegaConf.select(cfg, "devices", default=None)
    count = len(devices) if isinstance(devices, list | tuple | omegaconf.ListConfig) else 1
    nodes = OmegaConf.select(cfg, "num_nodes", default=1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"num_nodes={nodes!r}: give the number of machines, an integer >= 1")
    return count * nodes


def resolve_runtime(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Fills ``accelerator``, ``devices`` (a list), ``strategy`` and ``precision`` in place
    (docs/training.md): ``auto`` follows the machine, explicit values are kept. On the CPU only
    :data:`CPU_STRATEGIES` are taken, an unrunnable precision falls back to ``32`` (warning),
    ``sync_batchnorm`` is off and ``performance.disable_channel_last`` defaults to ``True``."""
    accelerator = str(_select(cfg, "accelerator", "auto")).lower()
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator in {"gpu", "cuda"} and not torch.cuda.is_available():
        raise RuntimeError(
            f"accelerator={accelerator!r} but no CUDA device is visible; "
            "use accelerator=auto or accelerator=cpu"
        )
    cfg.accelerator = accelerator

    devices = _select(cfg, "devices", "auto")
    if isinstance(devices, str) and devices.lower() == "auto":
        count = torch.cuda.device_count() if accelerator in {"gpu", "cuda"} else 1
        devices = list(range(max(count, 1)))
    elif isinstance(devices, int) or (isinstance(devices, str) and devices.isdigit()):
        devices = list(range(int(devices)))
    else:
        devices = list(OmegaConf.to_container(devices) if OmegaConf.is_config(devices) else devices)
    if not devices:
        raise ValueError(f"devices={devices!r}: give 'auto', a positive count or a list of ids")
    cfg.devices = devices
    processes = job_processes(cfg)  # refuses a num_nodes that is not an integer >= 1

    strategy = _select(cfg, "strategy", "auto")
    if strategy in (None, "auto"):
        strategy = "ddp" if processes > 1 else "auto"
    if accelerator == "cpu" and isinstance(strategy, str) and strategy not in CPU_STRATEGIES:
        raise ConfigError(
            f"strategy={strategy!r} cannot run on the CPU; allowed there: "
            f"{', '.join(CPU_STRATEGIES)} (auto: ddp with more than one device)"
        )
    cfg.strategy = strategy

    precision = str(_select(cfg, "precision", "auto"))
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision={precision!r} is not supported; allowed values: {', '.join(PRECISIONS)}"
        )
    if precision == "auto":
        precision = "32" if accelerator == "cpu" else "16-mixed"
    if accelerator == "cpu" and precision not in _CPU_PRECISIONS:
        warnings.warn(f"precision={precision} is not supported on CPU; using 32", stacklevel=2)
        precision = "32"
    cfg.precision = precision
    if accelerator == "cpu":
        processes = job_processes(cfg)
        if (
            bool(_select(cfg, "sync_batchnorm", False))
            and processes > 1
            and launched_as_rank_zero()
        ):
            print(
                "sync_batchnorm: torch's SyncBatchNorm runs on GPUs only; on the CPU each of the "
                f"{processes} processes normalises its part of the batch with its own BatchNorm "
                "statistics",
                flush=True,
            )
        cfg.sync_batchnorm = False
    if OmegaConf.select(cfg, "performance.disable_channel_last", default=None) is None:
        # channels-last helps cuDNN; oneDNN's CPU convolutions of ResNet-18 at 32 px measured
        # as fast or faster on contiguous (NCHW) tensors, with the same numbers (README)
        OmegaConf.update(cfg, "performance.disable_channel_last", accelerator == "cpu")
    return cfg


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device an evaluation runs on: ``device``, else the GPU if any, else the CPU."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def _inductor_cxx() -> str:
    """The C++ compiler inductor calls on the CPU: ``$CXX``, else ``g++`` (macOS ``clang++``)."""
    return os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")


def cpp_compiler() -> str | None:
    """The path of the C++ compiler inductor would call on the CPU, or None when not executable."""
    return shutil.which(_inductor_cxx()) if _inductor_cxx() else None


@dataclass(frozen=True)
class PerformanceSettings:
    """The ``performance.*`` switches, decided once: ``channels_last`` is solo-learn's memory
    layout; the others name modules of :mod:`solo_bayesncl.training`."""

    channels_last: bool = True
    small_map_convs: bool = True
    compile: bool = False


def _flag(section: Mapping[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, None)
    if value is None:
        return default
    # the run checks parsed these strictly; a config that skipped them is read the same way
    return parse_bool(f"performance.{key}", value)


def performance_settings(
    section: Mapping[str, Any] | None, accelerator: str, compiles: bool = True
) -> PerformanceSettings:
    """The ``performance`` section read once (None: defaults); :class:`ConfigError` for a non-bool
    or ``compile=True`` without a C++ compiler on the CPU. Without ``compiles``, no compiling."""
    section = section or {}
    contiguous = _flag(section, "disable_channel_last", False)
    compile_ = compiles and _flag(section, "compile", False)
    if compile_ and accelerator == "cpu" and cpp_compiler() is None:
        raise ConfigError(
            "performance.compile=True: torch.compile needs a C++ compiler on the CPU and "
            f"{_inductor_cxx()!r} (CXX, else g++) is not one on the path; install g++ or point "
            "CXX at a C++ compiler, or set performance.compile=False"
        )
    return PerformanceSettings(
        channels_last=not contiguous,
        small_map_convs=_flag(section, "small_map_convs", True),
        compile=compile_,
    )
