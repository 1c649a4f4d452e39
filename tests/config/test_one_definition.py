"""Each rule of the settings computed in one place and each default written once: the job's
process count, the small-image stem, the decoding of the dataset and its defaults."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest
from helpers import REPO
from omegaconf import OmegaConf

from solo_bayesncl.data import names, resolve


def _string_uses(text: str) -> list[str]:
    """The functions (by name) of the package whose code holds the string constant ``text``."""
    found = []
    for path in sorted((REPO / "solo_bayesncl").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.Constant) and node.value == text:
                        found.append(f"{path.relative_to(REPO).as_posix()}:{func.name}")
    return found


def test_the_job_process_count_is_computed_in_one_function():
    from solo_bayesncl.config.runtime import job_processes

    assert _string_uses("num_nodes") == ["solo_bayesncl/config/runtime.py:job_processes"]
    cfg = OmegaConf.create({"devices": [0, 1], "num_nodes": 3})
    assert job_processes(cfg) == 6
    assert job_processes(OmegaConf.create({"devices": "1"})) == 1


def _cifar(tmp_path, **backbone):
    return OmegaConf.create(
        {
            "data": {"dataset": "cifar10", "train_path": str(tmp_path)},
            "backbone": {"name": "resnet18", **backbone},
        }
    )


def test_resolution_leaves_the_small_stem_to_the_one_rule(tmp_path):
    """The resolution writes no ``backbone.small_stem``: the spec's rule
    (:func:`~solo_bayesncl.data.names.small_stem`) decides it, from what the user gave."""
    from solo_bayesncl.config.settings import run_spec

    cfg = _cifar(tmp_path)
    resolve.resolve_dataset_cfg(cfg)
    assert OmegaConf.select(cfg, "backbone.small_stem", default=None) is None
    assert run_spec(cfg).method.small_stem is True
    other = OmegaConf.create(
        {"data": {"dataset": "stl10"}, "backbone": {"name": "resnet18", "small_stem": True}}
    )
    assert run_spec(other).method.small_stem is True
    assert run_spec(OmegaConf.create({"data": {"dataset": "stl10"}})).method.small_stem is False


@pytest.mark.parametrize("dataset", ["cifar10", "fashion-mnist"])
def test_the_dataset_is_decoded_once_while_resolving(dataset, tmp_path, monkeypatch):
    if dataset == "fashion-mnist":
        pytest.importorskip("solo_bayesncl.data.fashion_mnist").fashion_mnist_root()
    calls = []

    def counted(cfg):
        calls.append(1)
        return names.dataset_spec(cfg)

    monkeypatch.setattr(resolve, "dataset_spec", counted)
    cfg = OmegaConf.create({"data": {"dataset": dataset, "train_path": str(tmp_path)}})
    spec = resolve.resolve_dataset_cfg(cfg)
    assert len(calls) == 1
    assert spec.name == dataset


def test_the_dataset_defaults_are_the_dataclass_fields(monkeypatch):
    """Every default of :class:`DatasetSpec` is its field's: changed there, the decoder follows."""

    @dataclasses.dataclass(frozen=True)
    class Other(names.DatasetSpec):
        format: str = "dali"
        num_workers: int = 7
        fraction: float = 0.5
        crop_size: int = 99
        augment_on: str = "batch"
        dali_device: str = "gpu"

    monkeypatch.setattr(names, "DatasetSpec", Other)
    spec = names.dataset_spec(OmegaConf.create({"data": {"dataset": "cifar10"}}))
    assert (spec.format, spec.num_workers, spec.fraction) == ("dali", 7, 0.5)
    assert (spec.crop_size, spec.augment_on, spec.dali_device) == (99, "batch", "gpu")
    given = names.dataset_spec({"data": {"dataset": "cifar10", "num_workers": 0}})
    assert given.num_workers == 0


def _counting_parses(monkeypatch) -> list[str]:
    """Counts every parse of a method's settings (:meth:`ContrastiveSettings.check_kwargs`)."""
    from solo_bayesncl.methods.keys import ContrastiveSettings

    calls: list[str] = []
    parse = ContrastiveSettings.check_kwargs.__func__

    def counted(cls, *args, **kwargs):
        calls.append(cls.__name__)
        return parse(cls, *args, **kwargs)

    monkeypatch.setattr(ContrastiveSettings, "check_kwargs", classmethod(counted))
    return calls


@pytest.mark.parametrize("config", ["bayesncl.yaml", "ncl.yaml"])
def test_a_pretraining_run_parses_its_method_settings_once(
    config, image_folder, tmp_path, monkeypatch
):
    """From the config to the model the run trains: one parse, and the model holds its result."""
    pytest.importorskip("solo")
    from helpers import compose, image_folder_overrides

    from solo_bayesncl.training import pretrain

    monkeypatch.chdir(tmp_path)
    built = {}
    monkeypatch.setattr(pretrain, "fit", lambda spec, model, **kwargs: built.update(model=model))
    calls = _counting_parses(monkeypatch)
    overrides = [
        *image_folder_overrides(image_folder),
        "method_kwargs.proj_hidden_dim=16",
        "method_kwargs.proj_output_dim=8",
        "optimizer.batch_size=4",
        "accelerator=cpu",
        "wandb.enabled=False",
    ]
    spec = pretrain.prepare_pretrain(compose("scripts/pretrain/cifar", config, overrides))
    pretrain.train_pretrain(spec)
    assert len(calls) == 1
    assert built["model"].settings is spec.method.settings


def test_the_spec_leaves_its_input_config_as_it_was(image_folder):
    pytest.importorskip("solo")
    from helpers import small_bayesncl_cfg

    from solo_bayesncl.config.settings import run_spec

    cfg = small_bayesncl_cfg(image_folder)
    cfg.resume_from_checkpoint = "last.ckpt"
    cfg.interpretability = {"retrieval": "false", "frequency": 2.0}
    cfg.method_kwargs = {"proj_hidden_dim": 16, "proj_output_dim": 8, "use_kl": "0"}
    before = OmegaConf.to_container(cfg)
    spec = run_spec(cfg, pretraining=True)
    assert OmegaConf.to_container(cfg) == before
    assert "resume_from_checkpoint" not in spec.solo and spec.checkpoint.resume_from == "last.ckpt"
    assert spec.solo.interpretability == {"retrieval": False, "frequency": 2}
    assert spec.solo.method_kwargs.use_kl is False and spec.solo.method_kwargs.kl_eps == 0.01
    assert spec.solo.optimizer.gating_head_lr == 0.1


@pytest.mark.parametrize("method", ["simclr", "ncl", "mocov2plus"])
def test_gating_head_lr_is_refused_where_no_gating_head_reads_it(method):
    from solo_bayesncl.config.checks import check_run_cfg
    from solo_bayesncl.core.validation import ConfigError

    cfg = OmegaConf.create({"method": method, "optimizer": {"gating_head_lr": 0.1}})
    with pytest.raises(ConfigError) as err:
        check_run_cfg(cfg)
    assert str(err.value) == (
        f"optimizer.gating_head_lr is read by method=bayesncl only; method={method} would "
        "ignore it: remove it"
    )
    check_run_cfg(OmegaConf.create({"method": "bayesncl", "optimizer": {"gating_head_lr": 0.1}}))


def test_gating_head_lr_is_a_bayesncl_setting():
    from solo_bayesncl.core.validation import ConfigError
    from solo_bayesncl.methods.keys import BayesNCLSettings

    dims = {"proj_hidden_dim": 8, "proj_output_dim": 4}
    assert BayesNCLSettings.from_kwargs(dims).gating_head_lr == 0.1
    assert BayesNCLSettings.from_kwargs(dims, {"gating_head_lr": 0.03}).gating_head_lr == 0.03
    with pytest.raises(ConfigError, match=r"^optimizer\.gating_head_lr=-1 is out of range"):
        BayesNCLSettings.from_kwargs(dims, {"gating_head_lr": -1})


def _literal_defaults(name: str) -> list[str]:
    """Where the package gives a parameter or a dataclass field called ``name`` a literal
    default (a number or string written in place, not a named constant)."""
    found = []
    for path in sorted((REPO / "solo_bayesncl").rglob("*.py")):
        where = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, ast.arguments):
                positional = node.posonlyargs + node.args
                defaulted = positional[len(positional) - len(node.defaults) :]
                pairs += list(zip(defaulted, node.defaults, strict=True))
                pairs += [
                    (a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d
                ]
                pairs = [(a.arg, d) for a, d in pairs]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                pairs = [(node.target.id, node.value)] if node.value is not None else []
            found += [where for arg, d in pairs if arg == name and isinstance(d, ast.Constant)]
    return found


@pytest.mark.parametrize("name", ["shuffle_permutations", "temperature", "ks"])
def test_interpretability_and_knn_defaults_are_written_once(name):
    """The shuffled baseline's permutations (metrics.accumulator) and kNN's defaults
    (evaluation.knn) are named constants; no other place writes the number."""
    assert _literal_defaults(name) == []


def test_knn_defaults_come_from_one_place():
    pytest.importorskip("solo")
    import inspect

    from solo_bayesncl.cli.knn import build_parser
    from solo_bayesncl.evaluation import knn

    args = build_parser().parse_args(["x.ckpt"])
    assert (args.k, args.temperature) == ([knn.K], knn.TEMPERATURE)
    assert (args.batch_size, args.num_workers) == (knn.BATCH_SIZE, knn.NUM_WORKERS)
    defaults = inspect.signature(knn.knn_eval).parameters
    assert defaults["ks"].default == (knn.K,) and defaults["temperature"].default == knn.TEMPERATURE


def test_the_interpretability_defaults_and_rule_are_shared():
    from solo_bayesncl.config.settings import InterpretabilitySpec, check_interpretability
    from solo_bayesncl.core.validation import ConfigError
    from solo_bayesncl.evaluation.options import ReportError, ReportOptions
    from solo_bayesncl.metrics.accumulator import SHUFFLE_PERMUTATIONS

    assert InterpretabilitySpec().shuffle_permutations == SHUFFLE_PERMUTATIONS
    assert ReportOptions().shuffle_permutations == SHUFFLE_PERMUTATIONS
    with pytest.raises(ConfigError, match=r"^interpretability\.shuffle_permutations=0 is out of"):
        check_interpretability(OmegaConf.create({"interpretability": {"shuffle_permutations": 0}}))
    with pytest.raises(ReportError, match=r"^--shuffle-permutations=0 is out of range"):
        ReportOptions(shuffle_permutations=0)
    with pytest.raises(ConfigError, match=r"^interpretability\.max_samples=1 is out of range"):
        check_interpretability(OmegaConf.create({"interpretability": {"max_samples": 1}}))


def test_each_benchmark_run_gets_one_typed_order(tmp_path):
    from solo_bayesncl.benchmark.presets import RunOrder, load_preset
    from solo_bayesncl.benchmark.runner import _run_order
    from solo_bayesncl.evaluation.options import ReportOptions

    path = tmp_path / "p.yaml"
    path.write_text("methods: [ncl]\nknn: {k: 5}\nreport: {top_dims: 4, dataset: cifar10}\n")
    order = _run_order(load_preset(path), "ncl", 3, "paper")
    assert isinstance(order, RunOrder)
    assert order.report == ReportOptions(top_dims=4, dataset="cifar10", protocol="paper")
    assert RunOrder.from_json(order.to_json()) == order


def test_a_preset_report_section_is_checked_as_the_report_checks_it(tmp_path):
    """Not by a copy of the report's fields: a value the report would refuse after training is
    refused when the preset is read."""
    from solo_bayesncl.benchmark.presets import PresetError, load_preset

    path = tmp_path / "p.yaml"
    path.write_text("methods: [ncl]\nreport: {retrieval_max_samples: 1}\n")
    with pytest.raises(PresetError, match=r"report: --retrieval-max-samples=1 is out of range"):
        load_preset(path)
    path.write_text("methods: [ncl]\nreport: {protocol: paper}\n")
    with pytest.raises(PresetError, match=r"unknown key report.protocol; known keys of report: "):
        load_preset(path)


def _docs_table(heading: str) -> dict[str, str]:
    """``{key: default}`` of the table under ``heading`` in docs/training.md."""
    text = (REPO / "docs" / "training.md").read_text()
    rows = text.split(heading, 1)[1].split("\n\n", 2)[1].splitlines()[2:]
    table = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        keys = [k.strip(" `") for k in cells[0].split(",")]
        defaults = [d.strip(" `") for d in cells[1].split(",")]
        if len(defaults) != len(keys):  # one default for several keys
            defaults = [cells[1].strip("`")] * len(keys)
        table.update(zip(keys, defaults, strict=True))
    return table


def test_the_docs_table_of_bayesncl_keys_is_the_declaration():
    from solo_bayesncl.methods.keys import BayesNCLSettings

    table = _docs_table("### `bayesncl` config keys (`method_kwargs`)")
    for f in dataclasses.fields(BayesNCLSettings):
        key = f.name if f.metadata["section"] == "method_kwargs" else f"optimizer.{f.name}"
        written = table.pop(key)
        if f.metadata["default_from"]:
            assert written == f.metadata["default_from"], key
        elif f.default is dataclasses.MISSING:
            assert written == "required", key
        elif isinstance(f.default, bool | str):
            assert written == str(f.default), key
        else:
            assert float(written) == f.default, key
    assert table == {}, f"rows for keys bayesncl does not declare: {table}"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "++distributed.timeout=10",
            r"^distributed has unknown key\(s\) timeout; known keys: timeout_s$",
        ),
        ("checkpoint.dir=null", r"^checkpoint\.dir=null: give the folder the runs are written"),
        ("++knn_eval.kk=5", r"^knn_eval has unknown key\(s\) kk; known keys: distance_func, "),
        (
            "++data.augmentations.crop_size=32",
            r"^data\.augmentations is read by linear evaluation only; a pretraining config ",
        ),
        ("++auto_resume.max_hours=-1", r"^auto_resume\.max_hours=-1 is out of range; allowed: "),
        ("++auto_resume.max_hours=null", r"^auto_resume\.max_hours=None is out of range"),
        ("optimizer.lr=null", r"^optimizer\.lr=None is out of range; allowed: a number in \(0, "),
        (
            "++optimizer.kwargs.etaa=0.02",
            r"^optimizer\.kwargs\.etaa is not an argument of LARS \(did you mean eta\?\); "
            r"allowed: clip_lr, dampening, eps, eta, exclude_bias_n_norm, momentum, nesterov$",
        ),
        (
            "++backbone.kwargs.zero_init_residul=True",
            r"^backbone\.kwargs\.zero_init_residul is not an argument of ResNet \(did you mean "
            r"zero_init_residual\?\)",
        ),
        (
            "backbone.name=vit_tiny ++backbone.kwargs.patch_size=64",
            r"^backbone\.kwargs\.patch_size=64 is larger than the 32 px crops ",
        ),
    ],
)
def test_settings_that_would_be_misread_are_refused_before_training(
    override, message, image_folder
):
    """Each in one line naming the key and what is allowed, before a model is built."""
    pytest.importorskip("solo")
    from helpers import compose, image_folder_overrides

    from solo_bayesncl.core.validation import ConfigError
    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = [
        *image_folder_overrides(image_folder),
        "method_kwargs.proj_hidden_dim=16",
        "method_kwargs.proj_output_dim=8",
        "optimizer.batch_size=4",
        "accelerator=cpu",
        *override.split(),
    ]
    with pytest.raises(ConfigError) as err:
        prepare_pretrain(compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides))
    assert "\n" not in str(err.value)
    assert re.search(message, str(err.value)), str(err.value)


def test_the_docs_table_of_interpretability_keys_is_the_spec():
    from solo_bayesncl.config.settings import InterpretabilitySpec

    table = _docs_table("### `interpretability` config keys")
    for f in dataclasses.fields(InterpretabilitySpec):
        written = table.pop(f.name)
        assert written == ("null" if f.default is None else str(f.default)), f.name
    assert table == {}
