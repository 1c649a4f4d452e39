"""Static feature dashboard: what each dimension of a representation responds to.

Turns an evaluation report folder into an offline HTML dashboard (``index.html`` with one card per
active dimension, a page per dimension, and a side-by-side comparison of two models)::

    from solo_bayesncl.dashboard import build_dashboard, write_feature_bundle

    write_feature_bundle("report/", features=F, labels=y, class_names=names, thumbnails=thumbs,
                         method="bayesncl", gate_open_rate=rates)
    index = build_dashboard("report/", "dashboard/", compare_dir="ncl_report/")

or from the shell: ``python -m solo_bayesncl.dashboard report/ --compare ncl_report/ --out dashboard/``.
"""

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
