"""Where the shipped Hydra configs are, in a source checkout and in an installed package.

The files live in ``solo_bayesncl/configs/{pretrain,linear}/<group>/`` (package data); a
checkout links them into solo-learn's layout, ``scripts/{pretrain,linear}/<group>/``. Every
command finds them through :func:`config_root`, from any folder.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "config_root",
    "linear_config_dir",
    "linear_dir_for",
    "pretrain_config_dir",
    "resolve_config_dir",
    "shipped_configs",
]

_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
KINDS: tuple[str, ...] = ("pretrain", "linear")


def config_root() -> Path:
    """The folder holding ``pretrain/`` and ``linear/``: the package's ``configs``."""
    if all((_CONFIGS / kind).is_dir() for kind in KINDS):
        return _CONFIGS
    raise FileNotFoundError(
        f"the shipped configs are missing: {_CONFIGS} holds no pretrain/ and linear/; "
        "reinstall solo-bayesncl"
    )


def shipped_configs(kind: str) -> dict[str, list[str]]:
    """The shipped configs of ``kind`` (``pretrain`` or ``linear``): for each folder, named as
    ``--config-path`` takes it, its configs' sorted file names (sub-folders are groups)."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; allowed: {', '.join(KINDS)}")
    folders = sorted(p for p in (config_root() / kind).iterdir() if p.is_dir())
    return {
        f"scripts/{kind}/{folder.name}": sorted(p.name for p in folder.glob("*.yaml"))
        for folder in folders
    }


def _group_dir(kind: str, group: str) -> Path:
    folder = config_root() / kind / group
    if not folder.is_dir():
        groups = sorted(p.name for p in (config_root() / kind).iterdir() if p.is_dir())
        raise FileNotFoundError(
            f"no shipped {kind} config group {group!r}; available: {', '.join(groups)}"
        )
    return folder


def pretrain_config_dir(group: str = "cifar") -> Path:
    """``pretrain/<group>`` of the shipped configs (``cifar`` or ``imagenet-100``)."""
    return _group_dir("pretrain", group)


def linear_config_dir(group: str = "cifar") -> Path:
    """``linear/<group>`` of the shipped configs (``cifar`` or ``imagenet-100``)."""
    return _group_dir("linear", group)


def resolve_config_dir(value: str | Path) -> Path:
    """A user's or preset's config folder as an absolute path: relative to the current folder if
    there, else in the shipped configs (``scripts/pretrain/cifar``: ``pretrain/cifar``)."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    if path.is_dir():
        return path.absolute()  # not resolve(): scripts/ is a link the user named
    parts = path.parts[1:] if path.parts[:1] == ("scripts",) else path.parts
    shipped = config_root().joinpath(*parts)
    if shipped.is_dir():
        return shipped
    raise FileNotFoundError(
        f"config folder {str(value)!r} is neither a folder here nor one of the shipped configs "
        f"(pretrain/<group>, linear/<group> under {config_root()})"
    )


def linear_dir_for(pretrain_dir: str | Path) -> Path:
    """The linear config folder of a pretraining one (``pretrain/<g>`` -> ``linear/<g>``)."""
    pretrain_dir = Path(pretrain_dir)
    group = pretrain_dir.name
    if pretrain_dir.parent.name == "pretrain":
        sibling = pretrain_dir.parent.parent / "linear" / group
        if sibling.is_dir():
            return sibling
    return linear_config_dir(group)
