"""The cell analysis behind the verdicts: one function per claim returning its evidence
(:mod:`.claims`: score, budget gaps, channels, failure sets, margins, the user side) and the
assembly of a cell and of a report's cells, Holm's families and the verdicts
(:mod:`.cell`). :mod:`pytest_quantagent.verdict` holds the thresholds and the rule;
:mod:`pytest_quantagent.report` only turns the finished analysis into the report model and
renders it. Nothing here imports pytest or the report."""
