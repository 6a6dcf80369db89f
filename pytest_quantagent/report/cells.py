"""The plugin's cells analysed into the report JSON: each cell's fault counts, how its NL
assertions were scored, then :func:`pytest_quantagent.report.model.analyze`.

Callers pass plain (domain, arm, reference, arm records, reference records) tuples, so this
knows nothing of pytest or of the session's cell keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.verdict import AnalysisConfig

CellRecords = tuple[str, str, str, list[EpisodeRecord], list[EpisodeRecord]]
"""(domain, arm, reference, the arm's records, the reference's records) of one cell."""


def analyze_cells(cells: Sequence[CellRecords], config: AnalysisConfig,
                  run: dict[str, Any], pools: Mapping[str, int | None] | None = None,
                  sequential: Mapping[tuple[str, str], dict[str, Any] | None] | None = None,
                  comparability: Mapping[str, dict[str, Any]] | None = None,
                  ) -> dict[str, Any]:
    """Report JSON (DESIGN.md, schema_version 1) over ``cells`` in the order given; ``run``
    (the report's ``run`` section) gains ``nl_assertions``. ``pools``: how many tasks each
    domain's pool holds (the design advice's cap). ``sequential``: per (domain, arm) of a
    run-until-decided cell, its block; the cell is judged at its last look's α.
    ``comparability``: per candidate arm, how it and the reference are served (a setting
    that ``differs`` makes the cell INCONCLUSIVE "not comparable")."""
    seq = sequential or {}
    from pytest_quantagent.metrics.faults import infra_counts
    from pytest_quantagent.metrics.nl_assertions import nl_basis_summary
    from pytest_quantagent.report.model import CellInput, analyze

    inputs = [
        CellInput(domain=domain, arm=arm, reference=reference, arm_records=arm_records,
                  reference_records=reference_records, pool_tasks=(pools or {}).get(domain),
                  alpha=look_alpha(seq.get((domain, arm))), sequential=seq.get((domain, arm)),
                  comparability=(comparability or {}).get(arm),
                  extra={"faults": {arm: infra_counts(arm_records),
                                    reference: infra_counts(reference_records)}})
        for domain, arm, reference, arm_records, reference_records in cells
    ]
    # How NL assertions were scored, per (domain, arm): judged, or not evaluated (no judge).
    run["nl_assertions"] = {
        f"{domain}/{label}": nl_basis_summary(recs)
        for domain, arm, reference, arm_records, reference_records in cells
        for label, recs in ((reference, reference_records), (arm, arm_records))
    }
    data: dict[str, Any] = analyze(inputs, config, run=run).model_dump(mode="json")
    return data


def look_alpha(block: dict[str, Any] | None) -> float | None:
    """The α a run-until-decided cell was judged at (its last look's), or None."""
    if not block or not block.get("looks"):
        return None
    return float(block["looks"][-1]["alpha"])
