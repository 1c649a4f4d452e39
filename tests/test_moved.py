"""The module paths of release 0.1.0 still import, for one release, as the moved modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import solo_bayesncl


@pytest.mark.parametrize("old", sorted(solo_bayesncl.MOVED))
def test_an_old_module_path_is_the_moved_module_with_a_deprecation_warning(old):
    new = solo_bayesncl.MOVED[old]
    if old in ("solo_bayesncl.evaluation.callback",):
        pytest.importorskip("lightning")
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "import solo_bayesncl\n"
        "try:\n"
        f"    importlib.import_module({old!r})\n"
        "except DeprecationWarning as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{old} moved to {new}; the old name goes in the next release"
    with pytest.warns(DeprecationWarning):
        sys.modules.pop(old, None)
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_readme_names_of_release_0_1_0_still_import():
    with pytest.warns(DeprecationWarning):
        for name in ("gates", "losses", "nonneg"):
            sys.modules.pop(f"solo_bayesncl.{name}", None)
        from solo_bayesncl.gates import BernoulliGate, bernoulli_kl  # noqa: F401
        from solo_bayesncl.losses import gated_representation, info_nce_loss
    from solo_bayesncl.core import losses

    assert info_nce_loss is losses.info_nce_loss
    assert gated_representation is losses.gated_representation
