"""The design that decides every open claim of a cell (issue 33 item 3).

Every claim the verdict judges gets a power function of the design (``T`` tasks × ``m``
trials, paired episodes ``T·m``), from :mod:`pytest_quantagent.stats.power` and the pilot's
own figures:

- **score**: the TOST within ±margin when the arms are equal, its standard error from the
  per-pair differences' variance components (task-level and trial-level);
- **each channel** at its observed base rate: the chance that its ratio's one-sided bound
  falls below ``max_ratio`` or its per-call increase's below ``rare_tolerance`` (LOSSLESS's
  two routes; the better one counts) when the true ratio is 1, with the design effect
  (clustering, pairing) the pilot's own bounds showed; and, when the pilot's estimate lies in
  the damage region (ratio above ``max_ratio`` and increase above ``rare_tolerance``), the
  chance that the damage test rejects at its Holm weight if that estimate is the truth;
- **each tight-budget gap**: the chance that the widening's bound falls below the margin
  when nothing widens, and the damage power when the pilot's widening is beyond the margin.

The advised design is the smallest one in which (a) the product of the claims' powers under
"the arms are equal" reaches the requested power (LOSSLESS needs every claim at once: the
product is its power if the claims' errors are independent, and a lower bound when they are
positively associated), and (b) every claim whose estimate shows damage would be shown
damaged at that power. Designs respect the pool:

1. more tasks at one trial, up to the pool (a split, the bundled test split, a τ²-bench
   split, or every task of the domain);
2. then, when the domain generates tasks, a fresh pool ``fresh:N`` (N up to its cap,
   :data:`pytest_quantagent.env.fresh.FRESH_CAP`) rather than trials;
3. then trials over the largest pool, unless repeated trials add nothing.

**When trials add nothing.** With deterministic decoding and a seedless user every trial
of a task replays the same episode. The records carry no decoding settings, so the data
decide: when some task ran several trials and, in both arms, every task's trials are
identical (success, failed calls, agent calls, every channel count), trials are never
advised. With one trial per task it cannot be told; trials are then advised only past the
pool, with that caveat. When no design can decide (the pool is exhausted and trials add
nothing, or more than :data:`MAX_ADVISED_TRIALS` trials would be needed) the advice says
so and names the closest design with its power.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy import stats as _st

from pytest_quantagent.analysis.arms import Pairing
from pytest_quantagent.metrics.episode import ArmData
from pytest_quantagent.stats.power import (
    VarianceComponents,
    bound_power,
    floored_bound_power,
    log_ratio_se,
    score_bound_power,
    tango_null_variance,
    variance_components,
)
from pytest_quantagent.verdict import SUCCESS_WEIGHT, AnalysisConfig, ChannelEvidence, GapEvidence

MAX_ADVISED_TRIALS = 1000
"""The most trials per task the advice names; beyond it no design is said to decide."""
_MAX_UNKNOWN_POOL = 100_000
"""Tasks searched when the pool's size is unknown."""


# --------------------------------------------------------------------------- the pool


@dataclass(frozen=True)
class PoolInfo:
    """What the advice may ask of the run's pool."""

    tasks: int | None
    """Tasks of the fixed pool (None: unknown, unlimited)."""
    fresh_cap: int | None = None
    """Fresh tasks the domain can generate (None: no generator)."""
    fresh: bool = False
    """The run already plays a fresh pool (then ``tasks`` is the fresh cap)."""
    label: str = "the pool"


def pool_info(pool_tasks: int | None, cfg: AnalysisConfig) -> PoolInfo:
    """The pool behind a cell: ``pool_tasks`` (a
    :class:`~pytest_quantagent.runner.selection.PoolSize`, or a bare count) capped by
    ``cfg.max_tasks``."""
    n: int | None = int(pool_tasks) if pool_tasks else None
    cap = getattr(pool_tasks, "fresh_cap", None)
    fresh = bool(getattr(pool_tasks, "fresh", False))
    label = str(getattr(pool_tasks, "label", "the pool"))
    if cfg.max_tasks is not None and (n is None or cfg.max_tasks < n):
        n, label = cfg.max_tasks, f"the {cfg.max_tasks} tasks available"
    return PoolInfo(n, None if fresh else cap, fresh, label)


def trials_useful(a: ArmData, r: ArmData) -> bool | None:
    """Whether repeated trials of a task can differ, from the data at hand: False when some
    task ran several trials and, in both arms, every task's trials are identical (success,
    failed calls, agent calls, every channel count: deterministic decoding and a seedless
    user), True when some task's trials differ, None when no task ran twice."""
    seen_repeat = False
    for d in (a, r):
        if not d.n:
            continue
        assert d.agent_calls is not None
        sig = np.column_stack([d.success.astype(np.int64), d.n_errors, d.agent_calls,
                               d.channel_counts])
        labels, inv = np.unique(d.task_ids.astype(str), return_inverse=True)
        for g in range(labels.size):
            rows = sig[inv == g]
            if rows.shape[0] < 2:
                continue
            seen_repeat = True
            if np.any(rows != rows[0]):
                return True
    return False if seen_repeat else None


# --------------------------------------------------------------------------- the claims


class Claim(Protocol):
    """A claim as a power function of the design (``tasks`` × ``trials``)."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...

    def null_power(self, tasks: int, trials: int) -> float: ...

    def damage_power(self, tasks: int, trials: int) -> float | None: ...


@dataclass(frozen=True)
class MeanClaim:
    """A paired mean difference over tasks × trials: the score (TOST, two-sided) or a gap's
    widening (one-sided bound below the margin)."""

    name: str
    text: str
    var: VarianceComponents
    margin: float
    alpha: float
    two_sided: bool
    damage: float | None = None
    """The pilot's effect beyond the margin in the damage direction (None: not shown)."""
    damage_alpha: float = 0.05

    def null_power(self, tasks: int, trials: int) -> float:
        # Tango's score test (the verdict's, for the score and the widening alike) takes its
        # variance under H0 at the margin: the larger of that and the design's own variance
        # (the cluster-robust one with several trials); the estimate varies with the latter
        se = self.var.se(tasks, trials)
        q = self.var.between + self.var.within
        se0 = max(math.sqrt(tango_null_variance(q, self.margin) / (tasks * trials)), se)
        one = score_bound_power(self.margin, se0, se, self.alpha)
        return max(0.0, 2 * one - 1) if self.two_sided else one

    def damage_power(self, tasks: int, trials: int) -> float | None:
        if self.damage is None:
            return None
        return bound_power(self.damage - self.margin, self.var.se(tasks, trials),
                           self.damage_alpha)


@dataclass(frozen=True)
class RateClaim:
    """A channel's failures per agent call: LOSSLESS's ratio or increase route at a true
    ratio of 1, damage (both conditions) at the pilot's rates when they lie in its region."""

    name: str
    text: str
    rate: float
    """Base rate per call planned with (both arms pooled)."""
    calls_per_episode: float
    ratio_effect: float
    """Design effect of the log ratio (1: Poisson)."""
    increase_effect: float
    max_ratio: float
    tolerance: float
    alpha: float
    rate_arm: float | None = None
    rate_reference: float | None = None
    """The pilot's rates, when they lie in the damage region (None: no damage shown)."""
    damage_alpha: float = 0.05

    def _df(self, tasks: int, trials: int, rate: float) -> float:
        # the test's t(G'-1): G' tasks holding a failure of the channel in either arm
        g = tasks * (1.0 - math.exp(-2.0 * rate * self.calls_per_episode * trials))
        return max(1.0, g - 1.0)

    def null_power(self, tasks: int, trials: int) -> float:
        n_calls = self.calls_per_episode * tasks * trials
        lam = self.rate * n_calls
        route_ratio = 0.0
        if lam > 0 and self.max_ratio > 1:
            route_ratio = bound_power(math.log(self.max_ratio),
                                      log_ratio_se(lam, lam, self.ratio_effect), self.alpha,
                                      self._df(tasks, trials, self.rate))
        route_inc = floored_bound_power(
            self.tolerance, self.increase_effect * 2 * self.rate / n_calls, 2 / n_calls**2,
            self.alpha) if n_calls > 0 else 0.0
        return max(route_ratio, route_inc)

    def damage_power(self, tasks: int, trials: int) -> float | None:
        if self.rate_arm is None or self.rate_reference is None:
            return None
        n_calls = self.calls_per_episode * tasks * trials
        ra, rr = self.rate_arm, self.rate_reference
        p_ratio = bound_power(math.log(ra / rr / self.max_ratio),
                              log_ratio_se(ra * n_calls, rr * n_calls, self.ratio_effect),
                              self.damage_alpha, self._df(tasks, trials, (ra + rr) / 2))
        p_inc = floored_bound_power(ra - rr - self.tolerance,
                                    self.increase_effect * (ra + rr) / n_calls, 2 / n_calls**2,
                                    self.damage_alpha)
        return p_ratio * p_inc


DESIGN_EFFECT_BOUND = 0.65
"""A channel's cluster-robust variance is planned at this one-sided upper confidence bound
(chi-square over its clusters). Measured in ``benchmarks/calibration.py`` (pilot 40×1 null
worlds): the point estimate gave advised designs a P(LOSSLESS) of 0.72–0.73 against the
predicted 0.80 (the power averaged over a pilot's noisy variance is below the power at the
true variance); 80% bounds gave 0.95–0.975 (designs ~40% larger than needed); 65% is the
smallest level that reached the predicted power."""


def _upper(df: float) -> float:
    """Factor taking a variance estimate on ``df`` degrees of freedom to its
    :data:`DESIGN_EFFECT_BOUND` upper confidence bound."""
    return df / float(_st.chi2.ppf(1 - DESIGN_EFFECT_BOUND, df)) if df >= 1 else 2.0


DAMAGE_PLAN_P = 0.25
"""A claim's damage is planned for (the design must show it if the pilot's estimate holds)
only when the pilot's own damage test gives a raw p below this: an estimate in the damage
region that the pilot tells from the threshold at 75% one-sided confidence. A weaker one is
a small pilot's noise (with 40 episodes a channel's ratio estimate crosses ×1.2 in about a
third of null cells), and sizing a design to confirm it would size it for noise."""


@dataclass(frozen=True)
class Strata:
    """A cell's channel strata as the channel tests use them (one per paired episode, the
    unpaired episodes of a task pooled; or one per task)."""

    na: np.ndarray
    ya: np.ndarray
    nr: np.ndarray
    yr: np.ndarray
    labels: np.ndarray
    paired: bool


def _design_effects(st: Strata, j: int, cfg: AnalysisConfig) -> tuple[float, float]:
    """The pilot's design effects of channel ``j``: the variance the tests use (the larger
    of the model and the cluster-robust one, the robust part at its
    :data:`DESIGN_EFFECT_BOUND` upper bound over its clusters) over the Poisson variance, for the score of the log ratio (at ``max_ratio``,
    where a powered bound lands) and for the per-call increase. Clustering and bursts raise
    them above 1; the pairing's matched failures lower them."""
    ya, yr, na, nr = st.ya[:, j], st.yr[:, j], st.na, st.nr
    t = ya + yr
    keep = (t > 0) & (na > 0) & (nr > 0)
    _, lab = np.unique(st.labels, return_inverse=True)
    g_all = int(lab.max()) + 1 if lab.size else 0
    d_ratio = 1.0
    if keep.sum() >= 2:
        rho = cfg.max_ratio
        pi = rho * na[keep] / (rho * na[keep] + nr[keep])
        pi1 = na[keep] / (na[keep] + nr[keep])
        tk = t[keep]
        matched = np.minimum(ya[keep], yr[keep]) if st.paired else np.zeros_like(tk)
        v_pois = float(np.sum(tk * pi * (1 - pi)))
        tm = np.maximum(tk - 2 * matched, tk * np.abs(2 * pi - 1))
        v_model = float(np.sum(tm * pi * (1 - pi)))
        res = np.bincount(lab[keep], weights=ya[keep] - tk * pi1, minlength=g_all)
        res = res[np.bincount(lab[keep], minlength=g_all) > 0]
        g = res.size
        if g >= 2 and v_pois > 0:
            c = res - res.mean()
            v_rob = g / (g - 1) * float(np.sum(c * c)) * _upper(g - 1)
            d_ratio = max(v_model, v_rob) / v_pois
    d_inc = 1.0
    sa, sr = float(na.sum()), float(nr.sum())
    ca, cr = float(ya.sum()), float(yr.sum())
    if ca + cr > 0 and g_all >= 2 and sa > 0 and sr > 0:
        u = np.bincount(lab, weights=(ya - ca / sa * na) / sa - (yr - cr / sr * nr) / sr,
                        minlength=g_all)
        v_rob = g_all / (g_all - 1) * float(np.sum(u * u)) * _upper(g_all - 1)
        matched = np.minimum(ya, yr) if st.paired else np.zeros_like(ya)
        v_floor = float((ya - matched).sum()) / sa**2 + float((yr - matched).sum()) / sr**2
        d_inc = max(max(v_rob, v_floor) / (ca / sa**2 + cr / sr**2), 1e-3)
    return max(d_ratio, 1e-3), d_inc


def _channel_claim(ev: ChannelEvidence, st: Strata, j: int, episodes: int,
                   calls_a: int, calls_r: int, damage_alpha: float, cfg: AnalysisConfig
                   ) -> RateClaim:
    """A channel's claim at its observed base rate (both arms pooled) and the pilot's
    design effects. A channel silent in the pilot is planned at its observed rate, 0: its
    increase bound falls below the tolerance once ``z_{1−α} √2 / N < τ`` (N calls per arm:
    1,163 at the defaults); should it fire in the design, its rate is above what the pilot
    showed and the design may fall short."""
    ya, yr = ev.arm_count, ev.reference_count
    n_calls = calls_a + calls_r
    cpe = n_calls / max(1, episodes)
    rate = (ya + yr) / n_calls
    d_ratio, d_inc = _design_effects(st, j, cfg)
    ra, rr = ya / calls_a, yr / calls_r
    shows_damage = (yr > 0 and ra > cfg.max_ratio * rr and ra - rr > cfg.rare_tolerance
                    and ev.p is not None and ev.p < DAMAGE_PLAN_P)
    return RateClaim(
        f"channel:{ev.name}", ev.name, rate, cpe, d_ratio, d_inc, cfg.max_ratio,
        cfg.rare_tolerance, cfg.alpha, ra if shows_damage else None,
        rr if shows_damage else None, damage_alpha)


def cell_claims(a: ArmData, r: ArmData, p: Pairing, run_a: np.ndarray, run_r: np.ndarray,
                ma: np.ndarray, mr: np.ndarray, max_k: int, gaps: Sequence[GapEvidence],
                channels: Sequence[ChannelEvidence], calls: tuple[int, int],
                cfg: AnalysisConfig, *, score_only: bool = False,
                score_damage_p: float | None = None) -> list[Claim]:
    """Every claim of a paired cell as a power function of the design."""
    labels = a.task_ids[p.ia].astype(str)
    d = run_a[p.ia].astype(float) - run_r[p.ir].astype(float)
    others = len(gaps) + sum(1 for c in channels if c.p is not None)
    w_other = (1.0 - SUCCESS_WEIGHT) / others if others else 1.0
    drop = -float(d.mean())
    out: list[Claim] = [MeanClaim(
        "score", "score", variance_components(d, labels), cfg.margin, cfg.alpha, True,
        drop if drop > cfg.margin and (score_damage_p or 1.0) < DAMAGE_PLAN_P else None,
        cfg.alpha * (SUCCESS_WEIGHT if others else 1.0))]
    if score_only:
        return out
    n = p.n
    for gap in gaps:
        k = gap.k
        kept_a = 1.0 - (ma[p.ia, max_k] & ~ma[p.ia, k]).astype(float)
        kept_r = 1.0 - (mr[p.ir, max_k] & ~mr[p.ir, k]).astype(float)
        # no widening seen: plan with the rule of three (upper 95% bound of a rate of
        # discordant pairs when none was seen), not the score's one-in-ten
        var = variance_components(kept_a - kept_r, labels, floor=min(0.1, 3.0 / n))
        out.append(MeanClaim(f"gap:{k}", f"gap at K={k}", var, cfg.margin, cfg.alpha, False,
                             gap.widening if gap.widening > cfg.margin
                             and (gap.p or 1.0) < DAMAGE_PLAN_P else None,
                             cfg.alpha * w_other))
    calls_a, calls_r = calls
    if calls_a and calls_r:
        from pytest_quantagent.analysis.claims import channel_strata
        from pytest_quantagent.vocab.channels import ALL_CHANNELS

        st = Strata(*channel_strata(a, r, p, cfg.channel_pairing))
        index = {ch.value: j for j, ch in enumerate(ALL_CHANNELS)}
        for ev in channels:
            if ev.testable:
                out.append(_channel_claim(ev, st, index[ev.name], a.n + r.n, calls_a,
                                          calls_r, cfg.alpha * w_other, cfg))
    return out


# --------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class ClaimNeed:
    claim: str
    episodes: int | None
    """Paired episodes this claim alone needs at the advised trials (None: out of reach)."""
    power: float
    """Its power at the advised design (under "equal arms"; damage power where shown)."""
    direction: str
    """``decided`` (shown outside its damage region when the arms are equal) or
    ``damage`` (shown damaged if the pilot's estimate holds)."""


@dataclass(frozen=True)
class CellPlan:
    """The design that decides every open claim of a cell."""

    tasks: int | None
    trials: int | None
    reachable: bool
    power: float
    """Predicted chance that the advised design decides every claim (LOSSLESS when the arms
    are equal; the lowest damage power where damage is shown)."""
    tasks_value: str | None
    """The value of the tasks option: ``N`` or ``fresh:N``."""
    fresh: bool
    trials_useful: bool | None
    needs: list[ClaimNeed] = field(default_factory=list)
    message: str = ""
    between_var: float = 0.0
    within_var: float = 0.0

    @property
    def n_pairs(self) -> int | None:
        return self.tasks * self.trials if self.tasks and self.trials else None

    def as_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "trials": self.trials, "reachable": self.reachable,
                "tasks_value": self.tasks_value, "fresh": self.fresh,
                "power": round(self.power, 4), "episodes": self.n_pairs,
                "trials_useful": self.trials_useful,
                "between_task_var": self.between_var, "within_task_var": self.within_var,
                "claims": [{"claim": c.claim, "episodes": c.episodes,
                            "power": round(c.power, 4), "direction": c.direction}
                           for c in self.needs],
                "message": self.message}


def _joint(claims: Sequence[Claim], t: int, m: int) -> tuple[float, float]:
    """(product of the null powers, lowest damage power — 1 when none is shown)."""
    null = 1.0
    dmg = 1.0
    for c in claims:
        null *= c.null_power(t, m)
        dp = c.damage_power(t, m)
        if dp is not None:
            dmg = min(dmg, dp)
    return null, dmg


def _smallest_tasks(ok: Any, lo: int, hi: int) -> int | None:
    """The smallest t in [lo, hi] with ok(t) (ok monotone), None if ok(hi) fails."""
    if hi < lo or not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _fresh_flag(tasks_flag: str) -> str:
    # `quantagent run` spells a fresh pool --tasks fresh:N; pytest --quant-tasks fresh:N
    return tasks_flag.replace("--num-tasks", "--tasks")


def plan_cell(claims: Sequence[Claim], pool: PoolInfo, useful: bool | None,
              pilot: tuple[int, int], cfg: AnalysisConfig,
              var: VarianceComponents | None = None) -> CellPlan:
    """The smallest design (see the module docstring) deciding every claim at
    ``cfg.power``; ``pilot`` is the (tasks, episodes) run so far: the advice names more
    episodes than it ran (an INCONCLUSIVE pilot is not decided by running it again) and
    never fewer tasks."""
    target = cfg.power
    pilot_tasks, pilot_episodes = pilot

    def meets(t: int, m: int) -> bool:
        if t * m <= pilot_episodes:
            return False
        null, dmg = _joint(claims, t, m)
        return null >= target and dmg >= target

    fixed = pool.tasks if pool.tasks is not None else _MAX_UNKNOWN_POOL
    fresh_cap = pool.fresh_cap
    largest = max(fixed, fresh_cap or 0)
    lo_t = min(max(2, pilot_tasks), fixed)  # never fewer tasks than the pilot ran
    chosen: tuple[int, int] | None = None
    # 1. tasks of the fixed pool at one trial, 2. a fresh pool at one trial
    t = _smallest_tasks(lambda x: meets(x, 1), lo_t, fixed)
    if t is not None:
        chosen = (t, 1)
    elif fresh_cap is not None and fresh_cap > fixed:
        t = _smallest_tasks(lambda x: meets(x, 1), fixed + 1, fresh_cap)
        if t is not None:
            chosen = (t, 1)
    # 3. trials over the largest pool
    trial_room = useful is not False
    if chosen is None and trial_room:
        lo_m = 2
        if meets(largest, MAX_ADVISED_TRIALS):
            hi_m = MAX_ADVISED_TRIALS
            while lo_m < hi_m:
                mid = (lo_m + hi_m) // 2
                if meets(largest, mid):
                    hi_m = mid
                else:
                    lo_m = mid + 1
            m = lo_m
            t = _smallest_tasks(lambda x: meets(x, m), min(lo_t, largest), largest)
            chosen = (t if t is not None else largest, m)
    reachable = chosen is not None
    if chosen is None:
        chosen = (largest, MAX_ADVISED_TRIALS if trial_room else 1)
    t, m = chosen
    null, dmg = _joint(claims, t, m)
    needs: list[ClaimNeed] = []
    for c in claims:
        dp = c.damage_power(t, m)

        def ok(x: int, c: Claim = c) -> bool:
            d = c.damage_power(x, m)
            return c.null_power(x, m) >= target and (d is None or d >= target)

        need_t = _smallest_tasks(ok, 2, max(t, largest))
        needs.append(ClaimNeed(c.name, need_t * m if need_t is not None else None,
                               min(c.null_power(t, m), dp if dp is not None else 1.0),
                               "damage" if dp is not None else "decided"))
    needs.sort(key=lambda x: -(x.episodes if x.episodes is not None else math.inf))
    fresh = t > fixed
    value = f"fresh:{t}" if fresh or pool.fresh else str(t)
    power = min(null, dmg)
    msg = _message(claims, needs, pool, useful, t, m, value, fresh, reachable, power, cfg)
    return CellPlan(t, m, reachable, power, value, fresh or pool.fresh, useful, needs, msg,
                    var.between if var else 0.0, var.within if var else 0.0)


def _message(claims: Sequence[Claim], needs: list[ClaimNeed], pool: PoolInfo,
             useful: bool | None, t: int, m: int, value: str, fresh: bool, reachable: bool,
             power: float, cfg: AnalysisConfig) -> str:
    texts = {c.name: c.text for c in claims}
    tflag = _fresh_flag(cfg.tasks_flag) if fresh or pool.fresh else cfg.tasks_flag
    opts = f"{tflag} {value}" + (f" {cfg.trials_flag} {m}" if m > 1 else "")
    design = f"{t} {'fresh ' if fresh else ''}tasks × {m} trial{'s' if m > 1 else ''} ({opts})"
    top = [x for x in needs if x.episodes is None or x.episodes > 0][:3]
    by = "; ".join(
        f"{texts[x.claim]} {'> ' + str(t * m) if x.episodes is None else x.episodes}"
        + (" (damage)" if x.direction == "damage" else "") for x in top)
    pct = f"{cfg.power:.0%}"
    what = "the score" if [c.name for c in claims] == ["score"] else "every claim"
    if not reachable:
        why = ("repeated trials add nothing here (every task's repeated trials were identical "
               "in both arms: deterministic decoding and a seedless user)" if useful is False
               else f"more than {MAX_ADVISED_TRIALS} trials per task would be needed")
        where = (f"{pool.label} ({pool.tasks} tasks)" if pool.tasks is not None else "the pool")
        if pool.fresh_cap and not pool.fresh:
            where += f" and its fresh pool ({pool.fresh_cap} tasks)"
        return (f"no available design decides {what} at {pct} power: {where} is "
                f"exhausted and {why}; the closest is {design}, deciding {what} with "
                f"predicted power {power:.0%}; episodes each claim needs: {by}")
    out = (f"{design}, {t * m} paired episodes, decides {what} with {pct} power "
           f"(predicted {power:.0%})" + (f"; episodes each claim needs: {by}"
                                          if len(claims) > 1 else ""))
    if m > 1 and useful is None:
        out += ("; trials help only if repeated trials differ (sampled decoding or a seeded "
                "user: with deterministic decoding and a seedless user they add nothing, "
                "which one trial per task cannot show) and there is no task-level effect")
    return out


def plan_for_cell(a: ArmData, r: ArmData, p: Pairing, run_a: np.ndarray, run_r: np.ndarray,
                  ma: np.ndarray, mr: np.ndarray, max_k: int, gaps: Sequence[GapEvidence],
                  channels: Sequence[ChannelEvidence], calls: tuple[int, int],
                  pool_tasks: int | None, cfg: AnalysisConfig, *, score_only: bool = False,
                  score_damage_p: float | None = None) -> CellPlan | None:
    """The cell's advice (None when its episodes do not pair)."""
    if not p.paired:
        return None
    claims = cell_claims(a, r, p, run_a, run_r, ma, mr, max_k, gaps, channels, calls, cfg,
                         score_only=score_only, score_damage_p=score_damage_p)
    pilot_tasks = int(np.unique(a.task_ids[p.ia].astype(str)).size)
    score = claims[0]
    var = score.var if isinstance(score, MeanClaim) else None
    return plan_cell(claims, pool_info(pool_tasks, cfg), trials_useful(a, r),
                     (pilot_tasks, p.n), cfg, var)


def plan_score(d: Sequence[float] | np.ndarray, clusters: Sequence[str] | np.ndarray,
               pool_tasks: int | None, cfg: AnalysisConfig, useful: bool | None = None
               ) -> CellPlan:
    """The score's design alone (``assert_score_equivalent``'s advice): the same pool,
    trials and power rules as :func:`plan_for_cell`, with the score as the only claim."""
    var = variance_components(d, clusters)
    claim = MeanClaim("score", "score", var, cfg.margin, cfg.alpha, True)
    return plan_cell([claim], pool_info(pool_tasks, cfg), useful,
                     (var.tasks, int(np.asarray(d).size)), cfg, var)
