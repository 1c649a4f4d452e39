"""Registration of bayesncl and ncl into solo.methods.METHODS cannot be lost: the import hook
stays until it has registered, and ``solo_bayesncl.register()`` is explicit and idempotent.

Each case runs in a fresh interpreter, since registration is about the order of first imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO


def _run(code: str, pythonpath: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(pythonpath)},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def fake_solo(tmp_path):
    """A stand-in ``solo`` whose ``solo.methods`` fails on its first import only (a flag file
    records the attempt), and a stand-in ``solo_bayesncl.methods`` so no real model is built:
    this exercises the hook itself, with or without solo-learn installed."""
    pkg = tmp_path / "solo" / "methods"
    pkg.mkdir(parents=True)
    (tmp_path / "solo" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            import os
            METHODS = {"simclr": object}
            __all__ = ["METHODS"]
            flag = os.environ["FAIL_ONCE_FLAG"]
            if not os.path.exists(flag):
                open(flag, "w").close()
                raise ImportError("simulated failure of the first import of solo.methods")
            """
        )
    )
    return tmp_path


_STUB_METHODS = """
import sys, types
stub = types.ModuleType("solo_bayesncl.methods")
stub.BayesNCL = type("BayesNCL", (), {})
stub.NCL = type("NCL", (), {})
sys.modules["solo_bayesncl.methods"] = stub
"""


def test_hook_survives_a_failed_first_import(fake_solo, tmp_path):
    out = _run(
        _STUB_METHODS
        + """
        import solo_bayesncl
        from solo_bayesncl.host.registration import _SoloMethodsFinder
        try:
            import solo.methods
        except ImportError as err:
            print("first:", err)
        print("hook after failure:", any(isinstance(f, _SoloMethodsFinder) for f in sys.meta_path))
        import solo.methods
        print("registered:", sorted(solo.methods.METHODS))
        print("hook after success:", any(isinstance(f, _SoloMethodsFinder) for f in sys.meta_path))
        """.replace("\n        ", "\n"),
        [str(fake_solo), str(REPO)],
        {"FAIL_ONCE_FLAG": str(tmp_path / "flag")},
    )
    assert "first: simulated failure" in out
    assert "hook after failure: True" in out
    assert "registered: ['bayesncl', 'ncl', 'simclr']" in out
    assert "hook after success: False" in out


def test_register_is_explicit_and_idempotent(fake_solo, tmp_path):
    (tmp_path / "flag").write_text("")  # solo.methods imports on the first try here
    out = _run(
        _STUB_METHODS
        + """
        import solo_bayesncl
        print(solo_bayesncl.register(), solo_bayesncl.register())
        import solo.methods
        print(sorted(solo.methods.METHODS), solo.methods.__all__.count("BayesNCL"))
        """.replace("\n        ", "\n"),
        [str(fake_solo), str(REPO)],
        {"FAIL_ONCE_FLAG": str(tmp_path / "flag")},
    )
    assert "True True" in out
    assert "['bayesncl', 'ncl', 'simclr'] 1" in out


@pytest.mark.solo
def test_importing_the_plugin_methods_first_registers_them_without_a_warning():
    # solo_bayesncl.methods imports solo.methods part-way through its own import, before its
    # classes exist: registration must wait for them, not fail with a circular-import warning
    out = _run(
        """
        import sys, warnings
        warnings.simplefilter("error", RuntimeWarning)
        from solo_bayesncl.methods import NCL, BayesNCL
        import solo.methods
        from solo_bayesncl.host.registration import _SoloMethodsFinder
        print(solo.methods.METHODS["bayesncl"] is BayesNCL, solo.methods.METHODS["ncl"] is NCL)
        print("hook left:", any(isinstance(f, _SoloMethodsFinder) for f in sys.meta_path))
        """,
        [str(REPO)],
    )
    assert "True True" in out
    assert "hook left: False" in out


@pytest.mark.solo
def test_real_solo_methods_registered_after_a_failed_first_import():
    # None in sys.modules makes "import solo.methods.base" fail, hence the first solo.methods
    out = _run(
        """
        import sys
        import solo_bayesncl
        sys.modules["solo.methods.base"] = None
        try:
            import solo.methods
        except ImportError as err:
            print("first import failed")
        del sys.modules["solo.methods.base"]
        import solo.methods
        print("bayesncl" in solo.methods.METHODS, "ncl" in solo.methods.METHODS)
        """,
        [str(REPO)],
    )
    assert "first import failed" in out
    assert "True True" in out


@pytest.mark.solo
def test_entry_point_registers_without_the_package_hook(image_folder):
    # solo.methods imported while no hook was there (e.g. the hook dropped by another tool)
    out = _run(
        f"""
        import solo_bayesncl
        from solo_bayesncl.host import registration
        registration._remove_hook()
        import solo.methods
        print("before:", "bayesncl" in solo.methods.METHODS)
        from helpers import compose
        from solo_bayesncl.training.pretrain import prepare_pretrain
        cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", [
            "data.dataset=custom", "data.train_path={image_folder / "train"}",
            "data.val_path={image_folder / "val"}", "accelerator=cpu"])
        print("method:", prepare_pretrain(cfg, check_data=False).solo.method)
        """,
        [str(REPO), str(REPO / "tests")],
    )
    assert "before: False" in out and "method: bayesncl" in out


class _Called(Exception):
    pass


@pytest.mark.solo
def test_checkpoint_loader_calls_register(monkeypatch, tmp_path):

    from solo_bayesncl.host import registration
    from solo_bayesncl.io import checkpoints

    def called():
        raise _Called

    monkeypatch.setattr(registration, "register", called)
    from solo_bayesncl.config.settings import saved_run_spec

    loaded = checkpoints.LoadedCheckpoint(
        spec=saved_run_spec({"method": "bayesncl"}),
        state_dict={},
        method="bayesncl",
        path=tmp_path,
    )
    for build in (checkpoints.load_method, checkpoints.load_backbone):
        with pytest.raises(_Called):
            build(loaded)
