"""The module paths of release 0.1.0 still import, for one release, as the moved modules."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import solo_bayesncl


def test_every_old_module_path_warns_once_with_its_new_home():
    code = (
        "import importlib, json, warnings\n"
        "import solo_bayesncl\n"
        "said = {}\n"
        "for old in sorted(solo_bayesncl.MOVED):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always', DeprecationWarning)\n"
        "        importlib.import_module(old)\n"
        "    said[old] = [str(w.message) for w in caught if ' moved to ' in str(w.message)]\n"
        "print(json.dumps(said))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    said = json.loads(out.stdout.splitlines()[-1])
    assert said == {
        old: [f"{old} moved to {new}; the old name goes in the next release"]
        for old, new in solo_bayesncl.MOVED.items()
    }


@pytest.mark.parametrize("old", ["solo_bayesncl.losses", "solo_bayesncl.files"])
def test_an_old_module_path_is_the_moved_module_itself(old):
    with pytest.warns(DeprecationWarning):
        sys.modules.pop(old, None)
        module = importlib.import_module(old)
    assert module is importlib.import_module(solo_bayesncl.MOVED[old])


def test_the_readme_names_of_release_0_1_0_still_import():
    with pytest.warns(DeprecationWarning):
        for name in ("gates", "losses", "nonneg"):
            sys.modules.pop(f"solo_bayesncl.{name}", None)
        from solo_bayesncl.gates import BernoulliGate, bernoulli_kl  # noqa: F401
        from solo_bayesncl.losses import gated_representation, info_nce_loss
    from solo_bayesncl.core import losses

    assert info_nce_loss is losses.info_nce_loss
    assert gated_representation is losses.gated_representation
