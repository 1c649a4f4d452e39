"""Packaging of solo-bayesncl, a solo-learn plugin.

Upstream solo-learn is published on GitHub only (the PyPI release is from 2021 and pins torch
1.9), so it is an extra that pins the tested commit rather than a hard requirement::

    pip install "setuptools<81" && pip install --no-build-isolation \
        "solo-learn @ git+https://github.com/vturrisi/solo-learn@9187ea39c2c3f43c455ab06664d2b019a9802954"
    pip install -e ".[test]"
"""

from pathlib import Path

from setuptools import find_packages, setup

SOLO_LEARN = (
    "solo-learn @ git+https://github.com/vturrisi/solo-learn"
    "@9187ea39c2c3f43c455ab06664d2b019a9802954"
)

setup(
    name="solo-bayesncl",
    version="0.1.0",
    description=(
        "Bayesian Gated Non-Negative Contrastive Learning (BayesNCL) and NCL for solo-learn, "
        "with interpretability metrics, a side-by-side benchmark, a model zoo and a feature "
        "dashboard."
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    # the Hydra configs and the zoo's manifest stay at the top level (``scripts/`` and ``zoo/``,
    # solo-learn's layout) and ship as the packages ``solo_bayesncl.configs`` and
    # ``solo_bayesncl.zoo.published``: one copy of each file (see solo_bayesncl.config.shipped
    # and solo_bayesncl.zoo.manifest)
    packages=[
        *find_packages(include=["solo_bayesncl", "solo_bayesncl.*"]),
        "solo_bayesncl.configs",
        "solo_bayesncl.zoo.published",
    ],
    package_dir={"solo_bayesncl.configs": "scripts", "solo_bayesncl.zoo.published": "zoo"},
    package_data={
        "solo_bayesncl": ["benchmark/presets/*.yaml", "dashboard/assets/*"],
        "solo_bayesncl.configs": ["pretrain/**/*.yaml", "linear/**/*.yaml"],
        "solo_bayesncl.zoo.published": ["manifest.json", "README.md"],
    },
    include_package_data=True,
    install_requires=[
        "torch>=2.1",
        "torchvision>=0.16",
        # the batched augmentation path (data.augment_on=batch): per-image parameters on batches
        "kornia>=0.9",
        "numpy>=1.24",
        "omegaconf>=2.3",
        "hydra-core>=1.3",
        "matplotlib>=3.7",
        "pillow>=9",
        "tqdm>=4.64",
        "pooch>=1.8",
        "jinja2>=3.1",
        # lightning 2.1.2 (solo-learn's pin) imports pkg_resources at run time
        "setuptools<81",
    ],
    extras_require={
        "solo": [SOLO_LEARN],
        "dali": ["nvidia-dali-cuda130>=2.4"],  # the CUDA of the torch pin; README: other CUDAs
        "test": ["pytest>=7", "selenium>=4.10", "ruff>=0.5"],
    },
    entry_points={
        "console_scripts": [
            "solo-bayesncl-pretrain=solo_bayesncl.cli.pretrain:main",
            "solo-bayesncl-linear=solo_bayesncl.cli.linear:main",
            "solo-bayesncl-knn=solo_bayesncl.cli.knn:main",
            "solo-bayesncl-evaluate=solo_bayesncl.cli.evaluate:main",
            "solo-bayesncl-benchmark=solo_bayesncl.cli.benchmark:main",
            "solo-bayesncl-zoo=solo_bayesncl.cli.zoo:main",
            "solo-bayesncl-dashboard=solo_bayesncl.cli.dashboard:main",
        ]
    },
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "License :: OSI Approved :: MIT License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
