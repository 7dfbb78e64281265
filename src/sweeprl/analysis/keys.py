"""The metric vocabulary: which logged keys hold which quantity, for every algorithm sweeprl reads.

TRL's GRPO/RLOO names come first, then the classic PPO names (sweeprl's own PPO logs those). Histories from
other tools are mapped onto these names by :data:`VOCABULARY` (one row per framework and name), which the
readers (:mod:`sweeprl.analysis.readers`) apply.
"""

from __future__ import annotations

import math
import re
from typing import Any, List, Mapping, Sequence

REWARD = ("reward", "objective/scores")
REWARD_STD = ("reward_std",)
BEST_OF_N = ("reward_best_of_n",)
KL = ("kl", "objective/kl")
ENTROPY = ("entropy", "objective/entropy")
LOSS = ("loss", "loss/policy_avg")
VALUE_LOSS = ("loss/value_avg",)
GRAD_NORM = ("grad_norm",)
ZERO_STD = ("frac_reward_zero_std",)
CLIP_FRACTION = ("policy/clipfrac_avg", "clip_ratio/region_mean")
APPROX_KL = ("policy/approxkl_avg",)
EXPLAINED_VARIANCE = ("val/explained_var",)
COMPLETION_LENGTH = ("completions/mean_length",)
TRUNCATED = ("completions/clipped_ratio",)
KL_COEF = ("kl_coef",)  # the KL penalty's coefficient, where the log records it (0: no penalty)
#: a NaN/inf in any of these makes a logged step non-finite
FINITE_WATCH = (*REWARD, *LOSS, *KL, *ENTROPY, *GRAD_NORM, *VALUE_LOSS)


def non_finite_steps(history: Sequence[Mapping[str, Any]]) -> List[int]:
    """Steps (the record's ``step``, else its position from 1) with a NaN/inf in a watched metric."""
    out = []
    for i, rec in enumerate(history):
        for k in FINITE_WATCH:
            v = rec.get(k)
            if v is None:
                continue
            try:
                bad = not math.isfinite(float(v))
            except (TypeError, ValueError):
                bad = False
            if bad:
                out.append(int(rec.get("step", i + 1)))
                break
    return out


# ------------------------------------------------------------------------------------- other tools' names
#: Preference optimisation (TRL's DPO/ORPO/KTO/CPO names; LLaMA-Factory logs the same)
PREF_CHOSEN = ("rewards/chosen",)
PREF_REJECTED = ("rewards/rejected",)
PREF_MARGIN = ("rewards/margins",)
PREF_ACCURACY = ("rewards/accuracies",)
#: ORPO's odds-ratio term, mean log sigmoid(log odds of chosen over rejected): -ln 2 while no pair separates
PREF_LOG_ODDS = ("log_odds_ratio",)
PREFERENCE = (*PREF_CHOSEN, *PREF_REJECTED, *PREF_MARGIN, *PREF_ACCURACY, "logps/chosen", "logps/rejected")
#: evidence of a learned value function (PPO-style): a critic's loss or explained variance
VALUE_FUNCTION = (*VALUE_LOSS, *EXPLAINED_VARIANCE, "val/vpred", "critic/values/mean")

#: (framework, its name, sweeprl's key): every foreign name sweeprl reads, in one table. TRL's own names (the
#: groups above) need no row. A name a rule reads that is missing here is ignored, and the diagnosis says so.
VOCABULARY = (
    # TRL, older releases and other trainers
    ("trl", "completion_length", "completions/mean_length"),
    ("trl", "rewards/mean", "reward"),
    ("trl", "policy/entropy_avg", "entropy"),
    ("trl", "env/reward_mean", "reward"),  # the classic PPOTrainer (before 0.12)
    ("trl", "ppo/mean_scores", "objective/scores"),
    ("trl", "ppo/loss/total", "loss"),
    ("trl", "ppo/loss/value", "loss/value_avg"),
    ("trl", "ppo/policy/approxkl", "policy/approxkl_avg"),
    ("trl", "ppo/policy/clipfrac", "policy/clipfrac_avg"),
    ("trl", "ppo/policy/entropy", "objective/entropy"),
    ("trl", "ppo/val/var_explained", "val/explained_var"),
    ("trl", "tokens/responses_len_mean", "completions/mean_length"),
    ("custom", "margins", "rewards/margins"),  # preference tables and hand-written DPO loops
    # verl (console ``key:value`` lines or JSON with a nested ``data`` dict)
    ("verl", "critic/score/mean", "reward"),
    ("verl", "critic/score/std", "reward_std"),
    ("verl", "actor/entropy", "entropy"),
    ("verl", "actor/entropy_loss", "entropy"),
    ("verl", "actor/kl_loss", "kl"),
    ("verl", "critic/kl", "kl"),
    ("verl", "actor/reward_kl_penalty", "kl"),
    ("verl", "actor/ppo_kl", "policy/approxkl_avg"),
    ("verl", "actor/pg_clipfrac", "clip_ratio/region_mean"),
    ("verl", "actor/pg_loss", "loss"),
    ("verl", "actor/grad_norm", "grad_norm"),
    ("verl", "critic/vf_loss", "loss/value_avg"),
    ("verl", "critic/vf_explained_var", "val/explained_var"),
    ("verl", "response_length/mean", "completions/mean_length"),
    ("verl", "response_length/clip_ratio", "completions/clipped_ratio"),
    ("verl", "actor/lr", "learning_rate"),
    # OpenRLHF
    ("openrlhf", "policy_loss", "loss"),
    ("openrlhf", "critic_loss", "loss/value_avg"),
    ("openrlhf", "response_length", "completions/mean_length"),
    ("openrlhf", "actor_lr", "learning_rate"),
    ("openrlhf", "policy_entropy", "entropy"),
    ("openrlhf", "ppo_clip_ratio", "clip_ratio/region_mean"),
    # LLaMA-Factory (trainer_log.jsonl)
    # SkyRL (``policy/`` prefixes its trainer's status; policy_kl is the KL loss to the reference)
    ("skyrl", "reward/avg_raw_reward", "reward"),
    ("skyrl", "policy/policy_loss", "loss"),
    ("skyrl", "policy/policy_entropy", "entropy"),
    ("skyrl", "policy/policy_kl", "kl"),
    ("skyrl", "policy/raw_grad_norm", "grad_norm"),
    ("skyrl", "policy/grad_norm", "grad_norm"),
    ("skyrl", "policy/ppo_clip_ratio", "clip_ratio/region_mean"),
    ("skyrl", "policy/policy_lr", "learning_rate"),
    ("skyrl", "generate/avg_num_tokens", "completions/mean_length"),
    # Tinker (tinker-cookbook metrics.jsonl; its optim/kl_sample_train_* compare sampler and trainer, not the
    # reference, so they are not read as KL)
    ("tinker", "env/all/reward/total", "reward"),
    ("tinker", "optim/entropy", "entropy"),
    ("tinker", "optim/lr", "learning_rate"),
    ("tinker", "env/all/by_group/frac_mixed", "env/all/by_group/frac_mixed"),  # 1 - frac_reward_zero_std
    # trlx (its notebook output prints the evaluations: ``Evaluation #3 reward/mean: 0.78``)
    ("trlx", "reward/mean", "reward"),
    # mlx-lm (``Iter 31: Train loss 0.002, Chosen reward -5.4, ...``)
    ("mlx", "chosen_reward", "rewards/chosen"),
    ("mlx", "rejected_reward", "rewards/rejected"),
    # experiment-tracker exports and hand-written loops
    ("custom", "avg_reward", "reward"),
    ("custom", "mean_reward", "reward"),
    ("custom", "reward_mean", "reward"),
    ("custom", "rewards", "reward"),
    ("custom", "score", "reward"),
    ("custom", "rm_reward", "reward"),  # a reward model's score
    ("custom", "rm_score", "reward"),
    ("custom", "frac_zero_std", "frac_reward_zero_std"),
    ("custom", "zero_advantage_fraction", "frac_reward_zero_std"),
    ("custom", "grad", "grad_norm"),
    ("custom", "gradient_norm", "grad_norm"),
    ("custom", "avg_loss", "loss"),
    ("custom", "train_loss", "loss"),
    ("custom", "grpo_loss", "loss"),
    ("custom", "loss_kl", "kl"),
    ("custom", "kl_div", "kl"),
    ("custom", "kl_divergence", "kl"),
    ("custom", "reward_margin", "rewards/margins"),  # a hand-written DPO loop's train_/val_ columns
    ("custom", "reward_accuracy", "rewards/accuracies"),
    ("custom", "policy_entropy_mean", "entropy"),
    ("custom", "entropy_mean", "entropy"),
    ("custom", "value_loss", "loss/value_avg"),
    ("custom", "clip_fraction", "clip_ratio/region_mean"),
    ("custom", "clipfrac", "clip_ratio/region_mean"),
    ("custom", "clip_frac", "clip_ratio/region_mean"),
    ("custom", "lr", "learning_rate"),  # LLaMA-Factory's trainer_log.jsonl too
    ("custom", "approx_kl", "policy/approxkl_avg"),
    ("custom", "mean_length", "completions/mean_length"),
    ("custom", "completion_length_mean", "completions/mean_length"),
    ("custom", "mean_response_length", "completions/mean_length"),
    ("custom", "clipped_ratio", "completions/clipped_ratio"),
    ("custom", "truncation_rate", "completions/clipped_ratio"),
    ("custom", "best_of_n", "reward_best_of_n"),
    ("custom", "reward_var", "reward_var"),  # turned into reward_std by the reader
    ("custom", "kl_ref", "kl"),
    ("custom", "std_reward", "reward_std"),
    ("custom", "reward_std_mean", "reward_std"),
    ("custom", "rewards_std", "reward_std"),
    ("custom", "token_entropy", "entropy"),
    ("custom", "rl_loss", "loss"),
    ("custom", "dist_entropy", "entropy"),  # the PPO/A2C reference implementations' name
    ("custom", "action_loss", "loss"),
    # DeepSpeed-Chat step 3 (``epoch: 0|step: 12|ppo_ep: 1|act_loss: ...|cri_loss: ...``, ``average reward score``)
    ("deepspeed", "act_loss", "loss/policy_avg"),
    ("deepspeed", "cri_loss", "loss/value_avg"),
    ("custom", "actor_loss", "loss"),
    ("custom", "beta", "kl_coef"),  # RL loops name the KL coefficient after the KL-regularised objective's beta
    ("custom", "kl_coeff", "kl_coef"),
    ("verl", "actor/reward_kl_penalty_coeff", "kl_coef"),
    ("verl", "actor/kl_coef", "kl_coef"),
)
ALIASES = {theirs: ours for _, theirs, ours in VOCABULARY}

#: task-success columns that stand in for the reward of a log that has none (hand-written loops log these), and
#: the share-of-correct phrases such loops print (``Percentage of correct examples: 0.31``)
REWARD_STAND_INS = ("success_rate", "accuracy", "acc", "answer_accuracy", "pass_rate", "correct_rate")
_STAND_IN_PHRASE = re.compile(r"(?:percent(?:age)?|fraction|share|rate)_(?:of_)?correct(?:_\w+)?")


def stands_in_for_reward(name: str) -> bool:
    """Is ``name`` (without a ``train_``/``train/`` prefix) a task-success rate that can stand in for a reward?"""
    return name in REWARD_STAND_INS or _STAND_IN_PHRASE.fullmatch(name) is not None


#: step counters, in order of preference (TRL/HF, LLaMA-Factory, wandb, verl/Ray)
STEP_KEYS = (
    "step",
    "Step",  # W&B's panel export
    "global_step",
    "global_steps",
    "current_steps",
    "trainer/global_step",
    "_step",
    "training_iteration",
    "iteration",
    "iter",
)
#: bookkeeping columns that are no metric: never reported as ignored
BOOKKEEPING = {
    "epoch",
    "total_steps",
    "percentage",
    "elapsed_time",
    "remaining_time",
    "total_flos",
    "_runtime",
    "_timestamp",
    "timestamp",
    "time",
    "step_time",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "num_tokens",
    "phase",
    "split",
    "mode",
    *STEP_KEYS,
}
#: every sweeprl key a rule or the objective reads
READ = {
    *PREF_LOG_ODDS,
    *REWARD,
    *REWARD_STD,
    *BEST_OF_N,
    *KL,
    *ENTROPY,
    *LOSS,
    *VALUE_LOSS,
    *GRAD_NORM,
    *ZERO_STD,
    *CLIP_FRACTION,
    *APPROX_KL,
    *EXPLAINED_VARIANCE,
    *COMPLETION_LENGTH,
    *TRUNCATED,
    *KL_COEF,
    *PREFERENCE,
    "learning_rate",
}


EVAL_PREFIXES = ("eval_", "eval/", "val/", "val_", "val-core/", "val-aux/", "test/", "validation/")


def unprefixed(name: str) -> str:
    """The name without an evaluation prefix (``eval_reward`` -> ``reward``)."""
    return next((name[len(p) :] for p in EVAL_PREFIXES if name.startswith(p)), name)


def canonical(name: str) -> str:
    """sweeprl's name for a column: the vocabulary's, after a ``train/`` (or, for a name the vocabulary knows
    without it, ``train_`` or ``rollout_``) prefix is removed."""
    if name.startswith("train/") and name != "train/global_step":
        name = name[len("train/") :]
    for prefix in ("train_", "rollout_"):  # an RL loop's training batch is its rollout
        if name.startswith(prefix) and (name[len(prefix) :] in ALIASES or name[len(prefix) :] in READ):
            name = name[len(prefix) :]
    if name not in ALIASES and name.lower() in ALIASES | {k: k for k in READ}:
        name = name.lower()  # ``KL``, ``Reward``
    # ``rewards_avg``, ``kl_mean``: the averaged quantity itself; ``reward_curve``, ``loss_history``: its series
    for suffix in ("_avg", "_mean", "_average", "_curve", "_history"):
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and name not in ALIASES and name not in READ and stem:
            if stem in ALIASES or stem in READ:
                name = stem
    return ALIASES.get(name, name)
