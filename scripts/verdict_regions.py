"""Draw a channel's decision regions (docs/verdict_regions.svg) from the verdict's defaults.

A channel's damage region is "ratio above max_ratio **and** per-call increase above
rare_tolerance" (pytest_quantagent/verdict.py). On a plane of the reference's failure rate
per agent call (x, log) and the candidate/reference ratio (y, log) its boundary is
``ratio = max(max_ratio, 1 + rare_tolerance / rate)``. The script marks the worlds of
issue 33. Run from the repository root::

    python3 scripts/verdict_regions.py            # writes docs/verdict_regions.svg
    python3 scripts/verdict_regions.py --ascii    # prints the ASCII figure of the README
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.verdict import DEFAULT_MAX_RATIO, DEFAULT_RARE_TOLERANCE

R, TAU = DEFAULT_MAX_RATIO, DEFAULT_RARE_TOLERANCE
X0, X1 = 0.0005, 0.2  # reference rate per call
Y0, Y1 = 0.8, 6.0  # ratio
W, H, PAD = 640, 420, 60
POINTS = (  # (rate, ratio, label, inside the damage region?, label below the point?)
    (0.003, 2.5, "×2.5 at 0.3%/call", True, False),
    (0.02, 1.2, "×1.2 at 2%/call (boundary)", True, False),
    (0.06, 1.1, "×1.1 at 6%/call", False, True),
    (0.001, 1.5, "×1.5 at 0.1%/call", False, False),
)


def boundary(rate: float) -> float:
    return max(R, 1 + TAU / rate)


def _x(rate: float) -> float:
    return PAD + (math.log(rate) - math.log(X0)) / (math.log(X1) - math.log(X0)) * (W - 2 * PAD)


def _y(ratio: float) -> float:
    return H - PAD - (math.log(ratio) - math.log(Y0)) / (math.log(Y1) - math.log(Y0)) * (H - 2 * PAD)


def svg() -> str:
    rates = [X0 * (X1 / X0) ** (i / 200) for i in range(201)]
    edge = [(_x(r), _y(min(Y1, boundary(r)))) for r in rates]
    damage = " ".join(f"{x:.1f},{y:.1f}" for x, y in edge)
    damage += f" {_x(X1):.1f},{_y(Y1):.1f} {_x(X0):.1f},{_y(Y1):.1f}"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect x="{PAD}" y="{PAD}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" '
           'fill="#e8f4e8"/>',
           f'<polygon points="{damage}" fill="#f6d5d5"/>',
           f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in edge)}" fill="none" '
           'stroke="#b00" stroke-width="2"/>',
           f'<text x="{W - PAD - 8}" y="{_y(4):.0f}" text-anchor="end" fill="#900">damage region: '
           f'ratio &gt; ×{R:g} and increase &gt; +{TAU * 100:g} per 100 calls</text>',
           f'<text x="{_x(0.0015):.0f}" y="{_y(0.9):.0f}" fill="#060">not damage: LOSSLESS '
           'needs the data to show the channel here</text>']
    for tick in (0.001, 0.003, 0.01, 0.03, 0.1):
        out.append(f'<text x="{_x(tick):.0f}" y="{H - PAD + 16}" text-anchor="middle">'
                   f'{tick * 100:g}%</text>')
    for tick in (1.0, 1.2, 2.0, 3.0, 5.0):
        out.append(f'<text x="{PAD - 6}" y="{_y(tick) + 4:.0f}" text-anchor="end">×{tick:g}</text>')
    out.append(f'<text x="{W / 2:.0f}" y="{H - 16}" text-anchor="middle">reference failures '
               'per agent call (log)</text>')
    out.append(f'<text x="16" y="{H / 2:.0f}" transform="rotate(-90 16 {H / 2:.0f})" '
               'text-anchor="middle">candidate / reference rate ratio (log)</text>')
    for rate, ratio, label, _, below in POINTS:
        out.append(f'<circle cx="{_x(rate):.1f}" cy="{_y(ratio):.1f}" r="4" fill="#000"/>')
        out.append(f'<text x="{_x(rate) + 7:.1f}" y="{_y(ratio) + (16 if below else -6):.1f}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ascii_figure(cols: int = 56) -> str:
    lines = []
    for ratio in (5.0, 4.0, 3.0, 2.5, 2.0, 1.6, 1.4, 1.25, 1.1, 1.0):
        row = "".join("#" if ratio > boundary(X0 * (X1 / X0) ** (j / (cols - 1))) else "."
                      for j in range(cols))
        lines.append(f"×{ratio:4.2f} |{row}")  # '#': inside the damage region
    lines.append("       +" + "-" * cols)
    labels = [" "] * (cols + 8)
    for tick in (0.0005, 0.003, 0.01, 0.05, 0.2):
        j = round(math.log(tick / X0) / math.log(X1 / X0) * (cols - 1))
        text = f"^{tick * 100:g}%"
        labels[8 + j: 8 + j + len(text)] = text
    lines.append("".join(labels).rstrip() + "   reference failures per agent call")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ascii", action="store_true", help="print the ASCII figure instead")
    p.add_argument("--out", default="docs/verdict_regions.svg")
    args = p.parse_args()
    if args.ascii:
        sys.stdout.write(ascii_figure())
        return 0
    for rate, ratio, label, inside, _ in POINTS:
        if (ratio > boundary(rate) or (ratio == R and rate * (R - 1) > TAU)) != inside:
            raise SystemExit(f"{label}: expected {'inside' if inside else 'outside'}")
    Path(args.out).write_text(svg(), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
