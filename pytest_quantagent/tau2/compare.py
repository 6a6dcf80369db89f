"""Several τ²-bench results files as reference/candidate groups (``analyze --tau2``).

The first file is the reference; files are grouped by domain (from each file's ``info``),
and in a domain where the first file is not present, the first file of that domain is its
reference. Episodes are paired by ``(task_id, trial)`` when both files share them;
otherwise the comparison is unpaired, and :func:`pairing_note` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_quantagent.errors import DataFileError, QuantAgentError
from pytest_quantagent.tau2.reader import Tau2Run, default_label, read_results
from pytest_quantagent.tau2.version import Provenance, accounting_conflict

ALLOW_MIXED_FLAG = "--allow-mixed-tau2"


class MixedTau2Error(QuantAgentError, ValueError):
    """Two results files from τ²-bench versions that account for failures differently."""


def check_accounting(reference: tuple[str, Provenance], candidate: tuple[str, Provenance],
                     *, allow_mixed: bool = False, flag: str = ALLOW_MIXED_FLAG) -> str | None:
    """None when the two files may be paired; with ``allow_mixed`` a note saying what
    differs; else raises :class:`MixedTau2Error` naming both files and the difference."""
    (ref_name, ref), (cand_name, cand) = reference, candidate
    diff = accounting_conflict(ref, cand)
    if diff is None:
        return None
    what = (f"{cand_name} ({cand.describe()}) vs {ref_name} ({ref.describe()}): different failure "
            f"accounting — {diff}")
    if not allow_mixed:
        raise MixedTau2Error(
            f"refusing to pair τ²-bench files whose versions account for failures differently: "
            f"{what}. Their scores and error counts do not mean the same; compare files from one "
            f"version, or pass {flag} to pair them anyway with this difference stated"
        )
    return f"mixed τ²-bench versions ({flag}): {what}"


@dataclass
class DomainGroup:
    """The files of one domain: a reference and its candidates."""

    domain: str
    reference: Tau2Run
    candidates: list[Tau2Run] = field(default_factory=list)


def read_comparison(
    paths: Sequence[str | Path], labels: Sequence[str] | None = None, *, allow_mixed: bool = False
) -> list[DomainGroup]:
    """Read every file (the first is the reference) and group them by domain.

    Labels default to :func:`unique_labels` (file names, a repeated one suffixed ``#2``...).
    Raises :class:`DataFileError` for the first bad file and :class:`MixedTau2Error` for a
    candidate whose version accounts for failures unlike its reference's (unless
    ``allow_mixed``; the difference is then in the candidate's ``flags.notes``).
    """
    if len(paths) < 2:
        raise ValueError(
            f"--tau2 needs a reference file and at least one candidate file, got {len(paths)}"
        )
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels given for {len(paths)} files; give one per file")
    names = unique_labels(paths) if labels is None else list(labels)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"labels must differ; repeated: {', '.join(repeated)}")
    groups: dict[str, DomainGroup] = {}
    for p, name in zip(paths, names, strict=True):
        run = read_results(p, label=name)
        if not run.records:
            raise DataFileError(run.path, "simulations",
                                "the file holds no simulations: there is nothing to compare")
        if run.domain not in groups:
            groups[run.domain] = DomainGroup(run.domain, run)
        else:
            ref = groups[run.domain].reference
            note = check_accounting((str(ref.path), ref.provenance), (str(run.path), run.provenance),
                                    allow_mixed=allow_mixed)
            if note:
                run.flags.notes.append(note)
            groups[run.domain].candidates.append(run)
    return list(groups.values())


def unique_labels(paths: Sequence[str | Path]) -> list[str]:
    """One arm label per path (:func:`default_label`), a repeated one suffixed ``#2``,
    ``#3``... (``runs/a/retail.json`` and ``runs/b/retail.json`` are two arms, not one).

    >>> unique_labels(["a/int4.json", "b/int4.json", "bf16.json"])
    ['int4', 'int4#2', 'bf16']
    """
    out: list[str] = []
    for p in paths:
        base = label = default_label(p)
        n = 1
        while label in out:
            n += 1
            label = f"{base}#{n}"
        out.append(label)
    return out


def pairing_note(reference: Tau2Run, candidate: Tau2Run) -> str:
    """One line stating how ``candidate`` is compared with ``reference``."""
    common = reference.keys() & candidate.keys()
    if not common:
        return (
            f"{candidate.label} vs {reference.label}: unpaired (no common (task_id, trial); "
            f"{len(candidate.records)} vs {len(reference.records)} episodes)"
        )
    return (
        f"{candidate.label} vs {reference.label}: paired by (task_id, trial) on "
        f"{len(common)} episodes ({len(candidate.records)} candidate, "
        f"{len(reference.records)} reference)"
    )
