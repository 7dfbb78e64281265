"""The chain: plan a round, run it, judge it, plan the next, and end by re-running the winner on fresh seeds.

Budget: round 1 may spend ``first_share`` of what is left once the re-runs still due are set aside (this round's
confirmation, the winner's final re-run), each later round half of the rest, or all of it when what it would leave
could not pay for another round (:data:`MIN_ROUND_TRIALS` full-length trials and their confirmation): budget left
at the end buys nothing. A round's sweep is grown (resumed with a larger ``n_trials``) while
one more trial at its worst case (all ``max_steps`` updates) fits in its share, so trials the pruner stops early
leave room for more and the chain never spends more than the budget.

Noise: a round's best trial is a maximum over its trials, so its value is optimistic. Its config is re-run on
``confirm_seeds`` fresh training seeds and judged on the mean of those re-runs alone. The seed spread is the
pooled standard deviation of every re-run so far; a round improves on the best so far when its re-run mean is
higher by more than one standard error of a difference of two such means (``sd * sqrt(2 / confirm_seeds)``,
at least :data:`MIN_GAIN` of the best). ``patience`` rounds in a row without improvement end the chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from hydra_plugins.sweeprl_sweeper.api import format_value
from sweeprl.autopilot import space as spaces
from sweeprl.autopilot import state as records
from sweeprl.autopilot import steps
from sweeprl.autopilot.state import Chain, Rerun, Round, Spent
from sweeprl.formatting import num

MIN_GAIN = 0.005  # a gain under 0.5 % of the best never counts as an improvement
WARM_STARTUP = 3  # warm-started trials enough for TPE to model from the first new trial (else its random start-up)
MIN_ROUND_TRIALS = 3  # a round that cannot pay for this many full trials is not worth its start-up
CONFIRM_SEED_BASE = 1000  # round k re-runs on seeds 1000 k + 1, …; the final re-run on FINAL_SEED_BASE + 1, …
FINAL_SEED_BASE = 9000
# keys the chain sets on every step's command line (a user's value for them is replaced)
MANAGED = ("hydra.sweeper.study_name", "hydra.sweep.dir", "hydra.sweeper.n_trials", "hydra.sweeper.report")


@dataclass
class Setup:
    """What the chain needs from the composed command line."""

    plain: List[str]  # overrides that set one value
    sweep: List[str]  # overrides that sweep (round 1's own)
    base: Dict[str, Any]  # the resolved task config (generation batch, max_steps)
    max_steps: int
    directions: List[str]
    sampler_seed: Optional[int]
    tpe_default_startup: bool  # TPE with Optuna's default n_startup_trials (10 random trials before modelling)
    storage: Optional[str]  # the command line's hydra.sweeper.storage, else None (a sqlite file per step)
    tracking_uri: Optional[str]  # None when tracking is off


def key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def without(overrides: List[str], keys: Any) -> List[str]:
    keys = set(keys)
    return [o for o in overrides if key_of(o) not in keys]


def full_trial(setup: Setup) -> Tuple[int, int]:
    """(completions, updates) of one trial that runs all its updates."""
    from sweeprl.analysis.advice import generation_batch

    batch = generation_batch(setup.base, (setup.base.get("algo") or {}).get("name")) or 1
    return setup.max_steps * int(batch), setup.max_steps


def pooled_sd(reruns: List[Rerun]) -> Optional[float]:
    """The seed standard deviation pooled over every re-run with two values or more."""
    ss, df = 0.0, 0
    for r in reruns:
        vals = list(r.values.values())
        if len(vals) >= 2:
            m = sum(vals) / len(vals)
            ss += sum((v - m) ** 2 for v in vals)
            df += len(vals) - 1
    return math.sqrt(ss / df) if df else None


def mean(r: Rerun) -> Optional[float]:
    vals = list(r.values.values())
    return sum(vals) / len(vals) if vals else None


def config_of(rnd: Round) -> Dict[str, Any]:
    """The full config of a round's best trial: its sampled params and the params fixed in earlier rounds."""
    assert rnd.best is not None
    return {**rnd.fixed, **rnd.best["params"]}


class Autopilot:
    def __init__(self, chain: Chain, chain_dir: Path, setup: Setup, say: Callable[[str], None]):
        self.chain, self.dir, self.setup, self.say = chain, chain_dir, setup, say
        self.unit_cost = full_trial(setup)[0 if chain.budget_unit == "completions" else 1]

    # ------------------------------------------------------------------------------------------- bookkeeping
    def save(self) -> None:
        records.save(self.dir, self.chain)

    def storage(self, run_dir: Path) -> str:
        return steps.storage_url(run_dir, self.setup.storage)

    def spent(self) -> int:
        return self.cost(self.chain.spent())

    def reruns(self) -> List[Rerun]:
        out = [r.confirm for r in self.chain.rounds if r.confirm]
        return out + ([self.chain.final] if self.chain.final else [])

    def best(self) -> Optional[Tuple[float, Round]]:
        """(re-run mean, round) of the best confirmed config so far."""
        scored = [(mean(r.confirm), r) for r in self.chain.rounds if r.confirm and mean(r.confirm) is not None]
        return max(scored, key=lambda x: x[0]) if scored else None  # type: ignore[return-value,arg-type]

    def tracking(self) -> List[str]:
        if not self.setup.tracking_uri:
            return []
        out = [f"tracking.experiment_name={self.chain.name}"]
        return out + ([f"tracking.parent_run_id={self.chain.mlflow_run_id}"] if self.chain.mlflow_run_id else [])

    # ------------------------------------------------------------------------------------------- the loop
    def run(self) -> Chain:
        s = self.chain.settings
        while not self.chain.stop_reason:
            current = self.chain.rounds[-1] if self.chain.rounds else None
            if current is None or current.status == "judged":
                if len(self.chain.rounds) >= s["max_rounds"]:
                    self.stop(f"{s['max_rounds']} rounds run (max_rounds)")
                    break
                current = self.plan_round(len(self.chain.rounds) + 1)
                if current is None:
                    break
            if current.status == "planned":
                self.run_round(current)
            if current.status == "ran":
                self.judge(current)
                self.after_judging()
        self.final()
        return self.chain

    def stop(self, reason: str) -> None:
        self.chain.stop_reason = reason
        self.say(f"autopilot: stopping: {reason}")
        self.save()

    def after_judging(self) -> None:
        s = self.chain.settings
        if self.chain.stop_reason:
            return
        misses = 0
        for r in reversed(self.chain.rounds):
            if r.improved:
                break
            misses += 1
        if misses >= s["patience"] and len(self.chain.rounds) > 1:
            self.stop(f"{misses} round(s) in a row did not beat the best so far by more than the seed noise")

    # ------------------------------------------------------------------------------------------- rounds
    def cost(self, spent: Spent) -> int:
        return spent.completions if self.chain.budget_unit == "completions" else spent.updates

    def round_budget(self, k: int) -> int:
        """What round ``k`` may spend on its own trials: round 1 ``first_share`` of the budget left for searching
        (after the re-runs still due), later rounds half of it, at least :data:`MIN_ROUND_TRIALS` full trials, and
        all of it when the rest could not pay for another round of those and its confirmation."""
        s = self.chain.settings
        reserve = (s["confirm_seeds"] + s["final_seeds"]) * self.unit_cost
        left = max(0, self.chain.budget - self.spent() - reserve)
        share = s["first_share"] if k == 1 else 0.5
        floor = MIN_ROUND_TRIALS * self.unit_cost
        if left < floor:
            return 0
        target = max(share * left, floor)
        if left - target < floor + s["confirm_seeds"] * self.unit_cost:
            target = left  # no later round could use what this one leaves
        return int(target)

    def plan_round(self, k: int) -> Optional[Round]:
        target = self.round_budget(k)
        if target == 0:
            if k == 1:
                need = MIN_ROUND_TRIALS + self.chain.settings["confirm_seeds"] + self.chain.settings["final_seeds"]
                raise ValueError(
                    f"budget {self.chain.budget} {self.chain.budget_unit} is too small for one round: a trial costs up "
                    f"to {self.unit_cost}, and a round of {MIN_ROUND_TRIALS} trials with its re-runs needs "
                    f"{need * self.unit_cost}"
                )
            final = self.chain.settings["final_seeds"] * self.unit_cost
            self.stop(
                f"budget spent: {self.spent()} of {self.chain.budget} {self.chain.budget_unit} used"
                + (f", {final} kept for the winner's final re-run" if final else "")
                + f"; what is left buys no round of {MIN_ROUND_TRIALS} trials and its re-runs"
            )
            return None
        name = f"{self.chain.name}-r{k}"
        run_dir = self.dir / f"round{k}"
        if k == 1:
            rnd = Round(index=1, study=name, dir=str(run_dir), space={}, reasons={}, target=target)
        else:
            prev = self.chain.rounds[-1]
            prev_study = steps.load(prev.study, self.storage(Path(prev.dir)))
            assert prev_study is not None
            space, reasons, fixed = spaces.next_space(prev_study, prev.dir)
            fixed = {**prev.fixed, **fixed}
            earlier = [steps.load(r.study, self.storage(Path(r.dir))) for r in self.chain.rounds]
            warm = spaces.warm_start(
                name, self.storage(run_dir), space, [e for e in earlier if e is not None], self.setup.directions
            )
            rnd = Round(
                index=k,
                study=name,
                dir=str(run_dir),
                space=space,
                reasons=reasons,
                fixed=fixed,
                warm=warm,
                target=target,
            )
        self.chain.rounds.append(rnd)
        self.save()
        self.say(self.round_header(rnd))
        return rnd

    def round_header(self, rnd: Round) -> str:
        lines = [
            f"autopilot: round {rnd.index}: up to {rnd.target} {self.chain.budget_unit}"
            + (f", warm-started with {rnd.warm} earlier trials in its space" if rnd.warm else "")
        ]
        for param, rng in rnd.space.items():
            lines.append(f"  {param}: {rng}  ({rnd.reasons.get(param, '')})")
        for param, value in rnd.fixed.items():
            lines.append(f"  {param} = {value}  ({rnd.reasons.get(param, 'fixed in an earlier round')})")
        return "\n".join(lines)

    def round_overrides(self, rnd: Round) -> List[str]:
        seed = self.setup.sampler_seed
        extra = [f"hydra.sweeper.sampler.seed={seed + rnd.index - 1}"] if seed is not None else []
        if rnd.warm >= WARM_STARTUP and self.setup.tpe_default_startup:
            extra.append("hydra.sweeper.sampler.n_startup_trials=0")  # the warm-started trials are its start-up
        if rnd.index == 1:
            base = [*self.setup.plain, *self.setup.sweep]
        else:
            base = [*self.setup.plain, *(f"{k}={v}" for k, v in rnd.space.items())]
            base += [f"{k}={format_value(v)}" for k, v in rnd.fixed.items()]
        managed = [*MANAGED, *(key_of(e) for e in extra), "tracking.experiment_name", "tracking.parent_run_id"]
        return without(base, managed) + extra + self.tracking()

    def run_round(self, rnd: Round) -> None:
        """Grow the round's sweep (its study resumes each time) while a full-length trial still fits in what the
        round may spend: pruned trials leave room for more."""
        cap = self.chain.settings["round_trials"]
        ran = False
        while True:
            study = steps.load(rnd.study, self.storage(Path(rnd.dir)))
            own = steps.own_trials(study) if study is not None else []
            if sum(t.state in steps.FINISHED for t in own) < rnd.new_trials:
                if ran:
                    raise steps.StepFailed(f"round {rnd.index}: its sweep ended before {rnd.new_trials} trials")
                n = rnd.warm + rnd.new_trials
                steps.run(steps.sweep_command(self.round_overrides(rnd), rnd.study, Path(rnd.dir), n))
                ran = True
                continue
            ran = False
            rnd.spent = steps.spent(own, self.setup.base)
            more = (rnd.target - self.cost(rnd.spent)) // self.unit_cost
            if cap:
                more = min(more, cap - rnd.new_trials)
            if more < 1:
                break
            rnd.new_trials += int(more)
            self.save()
        if study is None:
            raise steps.StepFailed(f"round {rnd.index}: its study {rnd.study} was not created")
        rnd.best = steps.best_of(own, self.setup.directions[0] == "maximize")
        if rnd.index == 1:
            rnd.space = spaces.searched(study)
            rnd.reasons = {p: "the given sweep" for p in rnd.space}
        rnd.status = "ran"
        self.save()

    # ------------------------------------------------------------------------------------------- judging
    def rerun(self, label: str, params: Mapping[str, Any], seeds: List[int], source: str) -> Rerun:
        run_dir = self.dir / label
        rerun = Rerun(
            study=f"{self.chain.name}-{label}", dir=str(run_dir), params=dict(params), seeds=seeds, source=source
        )
        overrides = steps.rerun_overrides(without(self.setup.plain, [*MANAGED, *params, "algo.seed"]), params, seeds)
        cmd = steps.sweep_command(
            [*without(overrides, ["tracking.experiment_name", "tracking.parent_run_id"]), *self.tracking()],
            rerun.study,
            run_dir,
            len(seeds),
        )
        steps.run(cmd)
        return steps.read_rerun(rerun, self.storage(run_dir), self.setup.base)

    def threshold(self, best: float) -> Tuple[float, Optional[float]]:
        sd = pooled_sd(self.reruns())
        n = self.chain.settings["confirm_seeds"]
        gain = sd * math.sqrt(2 / n) if sd is not None else 0.0
        return max(gain, MIN_GAIN * abs(best)), sd

    def judge(self, rnd: Round) -> None:
        s = self.chain.settings
        best = self.best()
        if rnd.best is None and best is None:
            rnd.improved, rnd.verdict = False, "no trial of the round completed"
            rnd.status = "judged"
            self.stop(f"round {rnd.index}: {rnd.verdict}")
            return
        if rnd.best is None:
            rnd.improved = False
            rnd.verdict = "no improvement: every trial of the round was stopped early (worse than earlier trials)"
        elif best is not None and rnd.best["value"] <= best[0]:  # type: ignore[index]
            rnd.improved = False
            rnd.verdict = (
                f"no improvement: the round's best trial ({num(rnd.best['value'])}) is below the best config's "
                f"re-run mean ({num(best[0])}, round {best[1].index}); not re-run"
            )
        else:
            if rnd.confirm is None or len(rnd.confirm.values) < s["confirm_seeds"]:
                seeds = [CONFIRM_SEED_BASE * rnd.index + i for i in range(1, s["confirm_seeds"] + 1)]
                self.say(
                    f"autopilot: round {rnd.index}: re-running its best trial {rnd.best['number']} on seeds {seeds}"
                )
                rnd.confirm = self.rerun(
                    f"round{rnd.index}-rerun", config_of(rnd), seeds, f"round {rnd.index} trial {rnd.best['number']}"
                )
                self.save()
            m = mean(rnd.confirm)
            if m is None:
                rnd.improved, rnd.verdict = False, "its re-runs did not complete"
            elif best is None:
                rnd.improved = True
                rnd.verdict = f"first round: best trial {num(rnd.best['value'])}, re-run mean {num(m)}"
            else:
                gain, sd = self.threshold(best[0])
                rnd.improved = m > best[0] + gain
                spread = f"seed sd {num(sd)}" if sd is not None else "no seed spread yet"
                word = "improved" if rnd.improved else "no improvement"
                rnd.verdict = (
                    f"{word}: re-run mean {num(m)} against {num(best[0])} (round {best[1].index}); needed more than "
                    f"+{num(gain)} ({spread}, standard error of a difference of two {s['confirm_seeds']}-seed means)"
                )
        rnd.status = "judged"
        self.say(f"autopilot: round {rnd.index}: {rnd.verdict}")
        self.save()

    # ------------------------------------------------------------------------------------------- the winner
    def final(self) -> None:
        best = self.best()
        if best is None:
            return
        n = self.chain.settings["final_seeds"]
        if n == 0:  # the winner is known by its confirmation re-runs only
            return
        rnd = best[1]
        assert rnd.best is not None
        if self.chain.final is None or len(self.chain.final.values) < n:
            seeds = [FINAL_SEED_BASE + i for i in range(1, n + 1)]
            self.say(f"autopilot: the winner (round {rnd.index} trial {rnd.best['number']}) on fresh seeds {seeds}")
            self.chain.final = self.rerun(
                "final", config_of(rnd), seeds, f"round {rnd.index} trial {rnd.best['number']}"
            )
            self.save()
