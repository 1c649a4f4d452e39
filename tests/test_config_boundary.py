"""The raw config stops at the boundary: outside the resolution layer (``config/``,
``data/names.py``, ``data/resolve.py``, ``methods/keys.py``) a module reads the spec
(:class:`~solo_bayesncl.config.settings.RunSpec`), not the config. Read with ``ast``: a read is an
attribute or item access on a variable named like a config (``cfg``, ``config``, ``*_cfg``) or
on solo-learn's config in a spec (``spec.solo.augmentations``), or a call to
``OmegaConf.select``/``OmegaConf.update`` or ``omegaconf_select``.

The modules still reading are hand-offs to solo-learn, each with a ceiling here, so that no read
is added. The dataset is decoded (``dataset_spec``) only while a config is resolved and once into
its spec.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

from helpers import REPO

PACKAGE = REPO / "solo_bayesncl"
RESOLUTION = ("config/", "data/names.py", "data/resolve.py", "methods/keys.py")
CONFIG_NAME = re.compile(r"^(cfg|config|.*_cfg)$")

CEILINGS: dict[str, int] = {
    # each a hand-off to solo-learn (docs/architecture.md)
    "data/dali_modules.py": 1,  # solo-learn's DALI transforms take its augmentation pipelines
    "data/pipelines.py": 1,  # solo-learn's transforms take its augmentation pipelines
    "benchmark/stages.py": 2,  # the probe config it composes for solo-learn's linear evaluation
    "methods/bayesncl.py": 6,  # solo-learn's BaseMethod takes the config
    "methods/ncl.py": 3,  # solo-learn's BaseMethod takes the config
}


def _is_read(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute | ast.Subscript):
        owner = node.value
        if isinstance(owner, ast.Attribute):  # solo-learn's config read through a spec
            return owner.attr == "solo"
        return isinstance(owner, ast.Name) and bool(CONFIG_NAME.match(owner.id))
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id == "omegaconf_select"
        if isinstance(func, ast.Attribute):
            if func.attr == "omegaconf_select":
                return True
            owner = func.value
            return (
                isinstance(owner, ast.Name)
                and owner.id == "OmegaConf"
                and func.attr
                in (
                    "select",
                    "update",
                )
            )
    return False


def raw_reads(source: str) -> int:
    """The raw config reads of a module's source."""
    return sum(_is_read(node) for node in ast.walk(ast.parse(source)))


def reads_by_module() -> Counter[str]:
    counts: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(RESOLUTION):
            count = raw_reads(path.read_text())
            if count:
                counts[name] = count
    return counts


def test_the_counter_sees_each_kind_of_read_and_nothing_else():
    source = (
        "cfg.data\nx = run_cfg['a']\nOmegaConf.select(c, 'a')\nOmegaConf.update(c, 'a', 1)\n"
        "omegaconf_select(c, 'a', 1)\nmisc.omegaconf_select(c, 'a', 1)\n"
        "spec.solo.augmentations\nspec.data.name\nOmegaConf.create({})\nconfigure.x\n"
        "build(spec.solo)\n"
    )
    assert raw_reads(source) == 7


def test_raw_config_reads_stay_within_their_ceilings():
    counts = reads_by_module()
    over = {m: (n, CEILINGS.get(m, 0)) for m, n in counts.items() if n > CEILINGS.get(m, 0)}
    assert not over, f"raw config reads outside the resolution layer (reads, ceiling): {over}"
    assert sum(counts.values()) <= sum(CEILINGS.values())
    assert len(counts) <= len(CEILINGS)


def test_the_dataset_is_decoded_only_where_a_config_is_resolved():
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dataset_spec":
                calls.append(name)
    outside = [name for name in calls if name != "data/names.py"]
    assert sorted(outside) == ["config/settings.py", "data/resolve.py"]
