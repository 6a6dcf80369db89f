"""Pure statistics (never imports pytest): intervals, paired/unpaired tests, rate ratios,
multiplicity, rank agreement and sample size. Each function returns a frozen result object
from :mod:`pytest_quantagent.stats.results`."""

from __future__ import annotations

from pytest_quantagent.stats.clustered import (
    ChannelRatio,
    PairedScore,
    channel_ratio,
    paired_score,
)
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.multiplicity import holm, weighted_holm
from pytest_quantagent.stats.paired import (
    mcnemar_exact,
    paired_difference,
    paired_tost,
    unpaired_difference,
    unpaired_tost,
)
from pytest_quantagent.stats.power import (
    DesignPlan,
    paired_tost_sample_size,
    plan_design,
    trials_for_equivalence,
)
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.ratio import per_unit_ci, rate_ci, rate_ratio, rate_ratio_from_clusters
from pytest_quantagent.stats.results import (
    ConfidenceInterval,
    DiffResult,
    McNemarResult,
    MultipleTestResult,
    ProportionResult,
    RankCorrelationResult,
    RateRatioResult,
    SampleSizeResult,
    TostResult,
)

__all__ = [
    "ChannelRatio",
    "ConfidenceInterval",
    "DesignPlan",
    "DiffResult",
    "McNemarResult",
    "MultipleTestResult",
    "PairedScore",
    "ProportionResult",
    "RankCorrelationResult",
    "RateRatioResult",
    "SampleSizeResult",
    "TostResult",
    "channel_ratio",
    "failure_set_agreement",
    "holm",
    "mcnemar_exact",
    "paired_difference",
    "paired_score",
    "paired_tost",
    "paired_tost_sample_size",
    "per_unit_ci",
    "plan_design",
    "rate_ci",
    "rate_ratio",
    "rate_ratio_from_clusters",
    "trials_for_equivalence",
    "unpaired_difference",
    "unpaired_tost",
    "weighted_holm",
    "wilson_interval",
]
