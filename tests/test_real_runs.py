"""The diagnosis on other people's runs: the labelled corpus of public logs (``tests/data/real_runs``), scored as
``bench/real_runs.py`` scores it. The corpus grew in batches, each scored blind once as it came (its figures and
commit are in ``bench/real_runs.BLIND``) and then used to revise the rules; all runs must keep the figures the
current rules reach (BENCHMARKS.md row ``real_runs_all``)."""

from __future__ import annotations

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import label_agreement  # noqa: E402
import real_runs  # noqa: E402

#: (min recall, min share of healthy runs without a warning, max false alarms per run, max runs with learning-rate
#: advice against the label) over all 263 runs: measured 80 % of 126, 95 % of 111, 0.20, 3 runs (BENCHMARKS.md)
FLOORS = (0.80, 0.94, 0.22, 3)


@pytest.fixture(scope="module")
def verdicts():
    return [real_runs.judge(label) for label in real_runs.labels()]


def test_the_corpus_is_large_and_varied():
    labels = real_runs.labels()
    assert len(labels) >= 30 and len({r["repo"] for r in labels}) >= 15
    assert {r["batch"] for r in labels} == set(real_runs.BATCHES)
    assert sum(r["health"] == "unhealthy" for r in labels) >= 10 and sum(r["health"] == "healthy" for r in labels) >= 10
    for r in labels:
        assert set(r["problems"]) <= set(real_runs.MATCHES), r["id"]
        assert r["lr_direction"] in ("lower", "raise", "none", "unknown"), r["id"]
        assert (real_runs.CORPUS / r["file"]).is_file() and r["url"].startswith("https://github.com/"), r["id"]


#: corpus runs with fewer than 5 logged points, and why they are kept
FEW_RECORDS = {
    "medicalgpt_qwen15b_grpo_smoke": "a 14-step smoke run: one TRL step dict; its per-step rewards are debug lists",
}


def test_every_file_of_the_corpus_is_read_with_its_points(verdicts):
    assert [v.id for v in verdicts if not v.read] == []
    assert {v.id: v.records for v in verdicts if v.records < 5 and v.id not in FEW_RECORDS} == {}


def test_verdicts_keep_their_measured_figures(verdicts):
    recall, quiet, alarms, lr_against = FLOORS
    f = real_runs.figures(verdicts)
    assert f["read"] == 1.0, [v.id for v in verdicts if not v.read]
    assert f["recall"] >= recall and f["quiet_healthy"] >= quiet, real_runs.summary_line(f)
    assert f["false_alarms_per_run"] <= alarms and f["lr_against"] <= lr_against, real_runs.summary_line(f)


def test_every_blind_run_has_a_second_label_in_the_same_vocabulary():
    first = {r["id"]: r for r in real_runs.labels()}
    second = label_agreement.second_labels()
    assert {i for i, r in first.items() if r["batch"] != "seed"} <= set(second) <= set(first)
    for i, r in second.items():
        assert r["health"] in ("healthy", "unhealthy", "inconclusive"), i
        assert set(r["problems"]) <= set(real_runs.MATCHES) and (r["health"] == "unhealthy") == bool(r["problems"]), i
        assert r["lr_direction"] in ("lower", "raise", "none", "unknown") and r["reasoning"], i


def test_labellers_are_scored_like_the_tool_and_their_consensus_leaves_out_what_they_disagree_on():
    def lab(health, problems=(), lr="none"):
        return {"health": health, "problems": list(problems), "lr_direction": lr, "batch": "blind1"}

    a = {"1": lab("healthy"), "2": lab("unhealthy", ["no_signal"]), "3": lab("unhealthy", ["kl_runaway"], "lower")}
    a["4"] = lab("unhealthy", ["divergence"])
    b = {
        "1": lab("unhealthy", ["kl_runaway"], "lower"),
        "2": lab("unhealthy", ["no_learning"]),
        "3": lab("inconclusive"),
    }
    b["4"] = lab("unhealthy", ["divergence", "reward_collapse"], "lower")
    ids = list(a)
    same = label_agreement.labeller_figures(a, a, ids)
    assert (same["recall"], same["quiet_healthy"], same["false_alarms_per_run"], same["lr_against"]) == (1, 1, 0, 0)
    f = label_agreement.labeller_figures(a, b, ids)
    # run 2: no_learning and no_signal share reward_flat, the finding that reports both; run 3 was left inconclusive
    assert f["recall"] == 2 / 3 and f["quiet_healthy"] == 0.0 and f["lr_against"] == 2
    assert f["false_alarms_per_run"] == 1 / 4  # kl_runaway on the healthy run; reward_collapse is a divergence finding
    both = label_agreement.consensus(a, b, ids)
    assert set(both) == {"4"} and both["4"]["problems"] == ["divergence", "reward_collapse"]
    assert both["4"]["lr_direction"] == "unknown"
    assert label_agreement.kappa(["h", "h", "u", "u"], ["h", "u", "u", "u"]) == pytest.approx(0.5)


def test_verdicts_on_the_runs_both_labellers_agree_on(verdicts):
    """Current rules against the consensus of the two labellings (83 % of 82, 96 % of 75, 0.17, 1 run, printed
    by bench/label_agreement.py): a floor, like FLOORS."""
    first = {r["id"]: r for r in real_runs.labels()}
    both = label_agreement.consensus(first, label_agreement.second_labels(), list(label_agreement.second_labels()))
    f = real_runs.figures(label_agreement.rescored({v.id: v for v in verdicts}, both))
    assert f["unhealthy"] >= 70 and f["healthy"] >= 70, real_runs.summary_line(f)
    assert f["recall"] >= 0.80 and f["quiet_healthy"] >= 0.94, real_runs.summary_line(f)
    assert f["false_alarms_per_run"] <= 0.2 and f["lr_against"] <= 1, real_runs.summary_line(f)


def test_a_preference_log_is_ranked_by_its_pair_accuracy_and_a_log_without_reward_says_so(verdicts, tmp_path):
    from sweeprl.analysis.diagnosis import diagnose, to_markdown
    from sweeprl.analysis.history import load

    d = diagnose(load(str(real_runs.CORPUS / "trl_dpo_llama2_7b_guanaco.trainer_state.json")))
    assert d.summary["algo"] == "dpo" and d.objective["basis"] == "preference"
    assert 0.5 < d.objective["terms"]["late_accuracy"] < 1.0
    (tmp_path / "sft.jsonl").write_text(
        "".join(f'{{"step": {i}, "loss": {1 / i}, "grad_norm": 1.0}}\n' for i in range(1, 9))
    )
    md = to_markdown(diagnose(load(str(tmp_path / "sft.jsonl"))))
    assert "No reward signal in this log" in md and "columns used" in md
    md = to_markdown(diagnose(load(str(real_runs.CORPUS / "contrapref_qwen15_18b_lora_dpo_nbtable.html"))))
    assert "only the evaluation records have rewards/accuracies, rewards/margins" in md


def test_advice_for_a_foreign_log_is_given_in_that_tools_terms(tmp_path):
    """A verl run whose first updates broke it (entropy 0.5 -> 4, reward 0.4 -> 0.02, KL far over target): lower
    the learning rate, named as verl's config names it."""
    from sweeprl.analysis.diagnosis import diagnose, to_markdown
    from sweeprl.analysis.history import load

    lines = []
    for step in range(1, 31):
        broken = step > 3
        reward, entropy, kl, clip = (0.02, 4.0, 2.0, 0.3) if broken else (0.4, 0.5, 0.001, 0.01)
        pairs = {
            "step": step,
            "critic/score/mean": reward + 0.01 * (step % 3),
            "actor/entropy": entropy + 0.01 * (step % 2),
            "actor/kl_loss": kl,
            "actor/pg_clipfrac": clip,
            "response_length/mean": 300,
        }
        lines.append(" - ".join(f"{k}:{x}" for k, x in pairs.items()))
    (tmp_path / "verl.log").write_text("\n".join(lines) + "\n")
    d = diagnose(load(str(tmp_path / "verl.log")))
    lr = [c for c in d.changes() if c["param"] == "learning_rate"]
    assert lr and lr[0]["direction"] == "decrease" and lr[0]["setting"] == "actor_rollout_ref.actor.optim.lr"
    assert "in verl: `actor_rollout_ref.actor.optim.lr` down" in to_markdown(d)


@pytest.mark.parametrize(
    "file, finding, severity, words",
    [
        # an HF notebook table by epoch: the columns after Validation Loss are evaluation's; train loss ~0.005
        # while the eval loss rises 0.75 -> 1.8 is memorised pairs
        ("tooba26_gpt2_dpo_overfit_nbtable.ipynb", "preference_overfit", "warning", "eval loss bottomed"),
        # a loss-only table of a KTOTrainer notebook: KTO starts at 0.5, not ln 2, and never leaves it
        ("aiplans_qwen3_06b_helpsteer2_kto_nbtable.ipynb", "preference_no_learning", "warning", "KTO's start"),
        # a reward never above 0 sitting at exactly 0 with 89 % of groups alike: nothing is earned, not "solved"
        ("sclr_qwen25_7b_recall_l3_grpo.log", "mode_collapse", "warning", "every sample fails"),
        # verl PPO: the score saturates by step ~20, then the entropy falls 10x more with no further gain
        ("playverl_qwen2_7b_gsm8k_ppo_min.log", "entropy_collapse", "warning", "after the reward reached its plateau"),
        # sixth batch: a PPO loop that logs its reward model's score as rm_reward, clip fraction 0 on every step
        ("omnijax_qwen_identity_ppo_lora_tutorial.ipynb", "updates_too_small", "warning", "clip fraction 0"),
        # ninth batch: a notebook table of train loss and eval metrics; the train loss saturates under 0.01 while
        # only the eval margin is logged, and it keeps rising
        ("contrapref_qwen15_18b_lora_dpo_nbtable.html", "preference_overfit", "warning", "eval margin keeps rising"),
        # fifteenth batch: a reward whose penalties cancel to exactly 0 for every sample: no signal, not "solved"
        ("siddharajshirke_govworkflow_grpo_qwen2_1p5b.html", "reward_variance_died", "warning", "never above it"),
    ],
)
def test_held_out_shapes_of_the_later_batches(file, finding, severity, words):
    """Shapes the fifth, sixth and ninth blind batches showed that the rules had not met (each scored blind first:
    bench/real_runs)."""
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load

    d = diagnose(load(str(real_runs.CORPUS / file)))
    f = next((f for f in d.findings if f.id == finding), None)
    assert f is not None and f.severity == severity and words in f.evidence, [(x.id, x.severity) for x in d.findings]


@pytest.mark.parametrize(
    "file, quiet",
    [
        # verl PPO printed to 3 decimals: approx-KL reads 0.000, yet the entropy fell 0.95 -> 0.25 and the sparse
        # reward rises beyond its noise (Mann-Kendall p < 1e-4): neither "updates too small" nor a collapse to fix
        ("houkawa_qwen25_15b_coderl_verl_ppo.log", {"updates_too_small", "entropy_collapse"}),
        # a clip fraction of 1.0 on every step while the KL never leaves 3e-8: the column is not a clip fraction
        ("rlhfsystemskit_gpt2_ppo_toy_zero_reward.jsonl", {"clip_fraction_high"}),
        # groups all alike at the start (frac_reward_zero_std ~0.85); their spread grows as a format reward begins
        # to fire and the reward rises with it: a signal appearing, not an erratic policy
        ("panacea_openenv_grpo_qwen25_1p5b.log", {"reward_variance_rising"}),
        # a flat reward (2.28 -> 2.34) with one high block of ten (2.59): a transient, not a level reached and lost
        ("ricalanis_answering_grpo_qwen25_3b.html", {"reward_collapse", "reward_dip"}),
    ],
)
def test_what_the_fifteenth_batch_showed_is_not_a_warning(file, quiet):
    """Warnings the fifteenth blind batch showed were wrong (scored blind first: bench/real_runs), each with the
    learning-rate advice it gave."""
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load

    d = diagnose(load(str(real_runs.CORPUS / file)))
    assert not {f.id for f in d.findings if f.severity != "info"} & quiet, [(f.id, f.severity) for f in d.findings]


def test_what_the_sixteenth_batch_showed():
    """Two files the sixteenth blind batch showed unread (scored blind first: bench/real_runs): a TRL log_history
    exported as CSV, whose summary columns (train_runtime, ...) exist, empty, in every row; and a JSON object of
    named ablation runs, each with its per-step ``reward_curve``, whose DAPO run ends at exactly 0."""
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load_runs

    (csv_run,) = load_runs(str(real_runs.CORPUS / "metascaler_llama3b_dsc_grpo.csv"))
    assert len(csv_run.records) == 400 and csv_run.records[-1]["step"] == 400
    assert "truncation_high" in diagnose(csv_run).ids()
    runs = load_runs(str(real_runs.CORPUS / "rayyy032_qwen05b_gsm8k_dapo_ablations.json"))
    assert [r.source.split("'")[1] for r in runs] == [
        "grpo",
        "clip_higher",
        "dynamic",
        "token_level",
        "overlong",
        "dapo",
        "entropy_reg",
    ]
    assert all(len(r.records) == 100 for r in runs)
    frozen = {r.source.split("'")[1]: "reward_frozen" in diagnose(r).ids() for r in runs}
    assert frozen == {name: name == "dapo" for name in frozen}


def test_values_printed_before_their_step_line_belong_to_that_step():
    """A hand-written loop that prints ``Average Reward: r`` and then ``Iteration 1/1, Step n/500, GRPO iter 1/1,
    loss: x``: one record per step (not per outer iteration), the reward at its own step, and the GRPO its text
    names decides how its loss is judged (a surrogate, not an SFT loss: no spike in its 4-decimal jitter)."""
    from sweeprl.analysis.diagnosis import diagnose
    from sweeprl.analysis.history import load

    run = load(str(real_runs.CORPUS / "theLMbook_qwen25_15b_gsm8k_grpo_scratch.log"))
    assert len(run.records) == 497 and run.named_algo == "grpo"
    assert run.records[0]["reward"] == pytest.approx(0.714285671710968) and run.records[1]["step"] == 2
    assert "loss_spike" not in diagnose(run).ids()


def test_a_loop_that_prints_its_steps_between_rules():
    """TRL's old PPO in a notebook: each step prints ``objective/kl: x`` and two more stats, then a dashed rule, and
    no step number; the set-up's prints before the first rule are not a step's."""
    from sweeprl.analysis.history import load

    run = load(str(real_runs.CORPUS / "mjeremy_flant5_lora_ppo_detox.ipynb"))
    assert run.format == "console_blocks" and len(run.records) == 10
    assert set(run.records[0]) == {"step", "objective/kl", "ppo/returns/mean", "ppo/policy/advantages_mean"}
    assert run.records[0]["objective/kl"] == pytest.approx(0.01323603093624115) and run.records[-1]["step"] == 10
