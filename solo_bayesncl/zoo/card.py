"""The model card of a Hub folder: the ``README.md`` a Hugging Face model repository shows.

Written from the run alone (spec, stored config, the export's figures): YAML front matter the
Hub indexes, then the method, data, budget, recipe, figures, how to load the weights and the
paper to cite. A setting the config does not hold is left out; nothing is invented.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from solo_bayesncl.config.settings import RunSpec

from .hub import HUB_CONFIG, HUB_WEIGHTS

#: Where to put the repository id in a card written before the repository exists.
REPO_PLACEHOLDER = "OWNER/NAME"

#: method -> (title, citation line, arXiv id)
PAPERS: dict[str, tuple[str, str, str]] = {
    "bayesncl": (
        "BayesNCL: Bayesian Gated Non-Negative Contrastive Learning",
        "Bayesian Gated Non-Negative Contrastive Learning (ICML 2026), arXiv:2605.28441",
        "2605.28441",
    ),
    "ncl": (
        "NCL: Non-negative Contrastive Learning",
        "Wang et al., Non-negative Contrastive Learning (ICLR 2024), arXiv:2403.12459",
        "2403.12459",
    ),
    "simclr": (
        "SimCLR",
        "Chen et al., A Simple Framework for Contrastive Learning of Visual Representations "
        "(ICML 2020), arXiv:2002.05709",
        "2002.05709",
    ),
    "mocov2plus": (
        "MoCo v2+",
        "Chen et al., Improved Baselines with Momentum Contrastive Learning (2020), "
        "arXiv:2003.04297",
        "2003.04297",
    ),
}

#: The Hub dataset ids of the datasets this package trains on (others are named as they are).
HUB_DATASETS = {
    "cifar10": ("uoft-cs/cifar10", "CIFAR-10"),
    "cifar100": ("uoft-cs/cifar100", "CIFAR-100"),
    "imagenet": ("ILSVRC/imagenet-1k", "ImageNet-1k"),
    "fashion-mnist": ("zalando-datasets/fashion_mnist", "Fashion-MNIST"),
}

_RECIPE = (
    ("optimizer", "optimizer.name"),
    ("learning rate", "optimizer.lr"),
    ("weight decay", "optimizer.weight_decay"),
    ("scheduler", "scheduler.name"),
    ("warm-up epochs", "scheduler.warmup_epochs"),
    ("large crops", "data.num_large_crops"),
    ("small crops", "data.num_small_crops"),
    ("precision", "precision"),
    ("seed", "seed"),
)


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _metric_type(name: str) -> str:
    low = name.lower()
    return "accuracy" if "acc" in low or "top" in low else low.replace("/", "_")


def front_matter(
    *,
    name: str,
    spec: RunSpec,
    metrics: Mapping[str, float],
    license: str,
    base_model: str | None = None,
) -> dict[str, Any]:
    """The card's YAML metadata as a dict (the Hub's model card fields)."""
    method, dataset = str(spec.method.name), str(spec.data.name or None)
    hub_id, pretty = HUB_DATASETS.get(dataset, (dataset, dataset))
    tags = ["solo-bayesncl", "solo-learn", "self-supervised-learning", "contrastive-learning"]
    tags += [method, "image-feature-extraction", "safetensors"]
    if method in PAPERS:
        tags.append(f"arxiv:{PAPERS[method][2]}")
    meta: dict[str, Any] = {
        "license": license,
        "library_name": "solo-bayesncl",
        "pipeline_tag": "image-feature-extraction",
        "tags": tags,
        "datasets": [hub_id],
    }
    if base_model:
        meta["base_model"] = base_model
    if metrics:
        meta["model-index"] = [
            {
                "name": name,
                "results": [
                    {
                        "task": {"type": "image-classification", "name": "Image Classification"},
                        "dataset": {"type": hub_id, "name": pretty},
                        "metrics": [
                            {"type": _metric_type(k), "name": k, "value": float(v)}
                            for k, v in metrics.items()
                        ],
                    }
                ],
            }
        ]
    return meta


def _plain_loading(backbone: str, small_stem: bool) -> str:
    """Plain torchvision + safetensors code giving the backbone (ResNets, which solo-learn takes
    from torchvision), or a description of the keys for the other backbones."""
    if backbone not in ("resnet18", "resnet50"):
        return (
            f"The `backbone.*` tensors are solo-learn's `{backbone}` backbone "
            "(`solo.methods.base.BaseMethod._BACKBONES`); build it and load them with the prefix "
            "removed, as above."
        )
    stem = (
        "backbone.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)\n"
        "backbone.maxpool = torch.nn.Identity()  # the small-image stem this run used\n"
        if small_stem
        else ""
    )
    return (
        "```python\n"
        "import torch\n"
        "import torchvision\n"
        "from safetensors.torch import load_file\n\n"
        f'state = load_file("{HUB_WEIGHTS}")\n'
        f"backbone = torchvision.models.{backbone}()\n"
        "backbone.fc = torch.nn.Identity()\n"
        f"{stem}"
        'weights = {k.removeprefix("backbone."): v.float() for k, v in state.items()\n'
        '           if k.startswith("backbone.")}\n'
        "backbone.load_state_dict(weights)\n"
        "backbone.eval()  # backbone(images) gives the features\n"
        "```"
    )


def model_card(
    *,
    name: str,
    spec: RunSpec,
    cfg: Mapping[str, Any],
    metrics: Mapping[str, float],
    dtype: str,
    small_stem: bool,
    license: str = "mit",
    base_model: str | None = None,
    repo_id: str | None = None,
    description: str | None = None,
) -> str:
    """The ``README.md`` of a Hub folder (see the module docstring): what the run is from its
    ``spec``, its budget and recipe as the stored config ``cfg`` shows them."""
    method, dataset = str(spec.method.name), str(spec.data.name or None)
    pretty = HUB_DATASETS.get(dataset, (dataset, dataset))[1]
    backbone = str(spec.method.backbone)
    title, citation, arxiv = PAPERS.get(method, (method, method, ""))
    if method == "bayesncl":  # it builds on NCL
        citation += "\n\n" + PAPERS["ncl"][1]
    repo = repo_id or REPO_PLACEHOLDER
    meta = yaml.safe_dump(
        front_matter(name=name, spec=spec, metrics=metrics, license=license, base_model=base_model),
        sort_keys=False,
        allow_unicode=True,
    )
    epochs, batch = _get(cfg, "max_epochs"), _get(cfg, "optimizer.batch_size")
    devices = _get(cfg, "devices")
    budget = [f"- epochs: {epochs}" if epochs is not None else None]
    budget += [f"- batch size per device: {batch}" if batch is not None else None]
    budget += [f"- devices: {devices}" if devices is not None else None]
    budget_text = "\n".join(b for b in budget if b) or "- not recorded in the config"
    recipe = [(label, _get(cfg, key)) for label, key in _RECIPE]
    kwargs = _get(cfg, "method_kwargs")
    if isinstance(kwargs, Mapping):  # every method setting of the run, as it is
        recipe += [(f"method_kwargs.{k}", v) for k, v in sorted(kwargs.items())]
    recipe_rows = "\n".join(
        f"| {label} | `{value}` |" for label, value in recipe if value is not None
    )
    if metrics:
        results = "| figure | value |\n|---|---|\n" + "\n".join(
            f"| {k} | {v:g} |" for k, v in metrics.items()
        )
    else:
        results = "No evaluation figures were given to the export; none are claimed."
    classes = _get(cfg, "data.num_classes")
    data = f"Pretrained on **{pretty}** (`{dataset}`" + (
        f", {classes} classes)" if classes else ")"
    )
    data += " without labels (self-supervised); the labels serve only the evaluation figures."
    paper_link = f"[arXiv:{arxiv}](https://arxiv.org/abs/{arxiv})" if arxiv else citation
    return f"""---
{meta}---

# {name}

{description or f"A {backbone} pretrained with {title} on {pretty}."}
Weights of the backbone, the projector{" and the gating head" if method == "bayesncl" else ""}
(everything a feature extractor, the dashboard and the evaluation report need), stored in
{dtype}, with the run's full config.

## Method

{title}: {paper_link}. Trained with solo-bayesncl, a plugin of the solo-learn
library (method `{method}`, backbone `{backbone}`).

## Data

{data}

## Budget

{budget_text}

## Recipe

| setting | value |
|---|---|
{recipe_rows}

The complete config is `{HUB_CONFIG}` (solo-learn's `args.json` of the run).

## Results

{results}

## How to load

With solo-bayesncl installed (and solo-learn, which builds the model), the method in eval mode
or its backbone:

```python
from huggingface_hub import hf_hub_download
from solo_bayesncl.zoo import load_artifact

path = hf_hub_download("{repo}", "{HUB_WEIGHTS}")  # pin revision= for reproducibility
model = load_artifact(path)                         # {method}, eval mode
backbone = load_artifact(path, as_="backbone")      # backbone(images): (B, D) features
```

With plain PyTorch and safetensors (no solo-learn):

{_plain_loading(backbone, small_stem)}

## Files

- `{HUB_WEIGHTS}`: the weights; its metadata also holds the config and the figures.
- `{HUB_CONFIG}`: the run's config.
- `README.md`: this card.

## Citation

{citation}

## License

The weights are released under `{license}`.
"""


def read_front_matter(text: str) -> dict[str, Any]:
    """The YAML metadata of a card (``{}`` when it has none)."""
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    meta = yaml.safe_load(text[4:end]) if end > 0 else None
    return meta if isinstance(meta, dict) else {}
