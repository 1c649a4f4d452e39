"""Static feature dashboard: what each dimension of a representation responds to, from an
evaluation report folder (one card per active dimension, a page per dimension, two models side by
side)::

    write_feature_bundle("report/", features=F, labels=y, class_names=names, thumbnails=thumbs)
    index = build_dashboard("report/", "dashboard/", compare_dir="ncl_report/")

or ``python -m solo_bayesncl.dashboard report/ --compare ncl_report/ --out dashboard/``."""

from .builder import build_dashboard
from .bundle import FeatureBundle, load_feature_bundle, write_feature_bundle
from .summaries import (
    DimensionSummaries,
    class_specificity,
    most_specific_dims,
    summarize_dimensions,
)

__all__ = [
    "DimensionSummaries",
    "FeatureBundle",
    "build_dashboard",
    "class_specificity",
    "load_feature_bundle",
    "most_specific_dims",
    "summarize_dimensions",
    "write_feature_bundle",
]
