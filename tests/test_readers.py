"""Every common log format is read into train and eval records with sweeprl's names (small inline logs in each
format, then every file of the real-run corpus)."""

from __future__ import annotations

import json
import math

import pytest

from sweeprl.analysis import keys, readers
from sweeprl.analysis.history import infer_algo

TRL_DICTS = """\
  5%|▌         | 1/20 [00:03<01:00,  3.1s/it]{'loss': 0.0, 'grad_norm': 0.31, 'learning_rate': 1e-06, 'reward': 0.25, 'reward_std': 0.4, 'kl': 0.0, 'epoch': 0.05}
{'loss': 0.01, 'grad_norm': nan, 'learning_rate': 2e-06, 'reward': 0.5, 'reward_std': 0.3, 'kl': 0.002, 'epoch': 0.1}
{'eval_loss': 0.2, 'eval_reward': 0.45, 'epoch': 0.1}
{'loss': 0.02, 'grad_norm': 0.5, 'learning_rate': 3e-06, 'reward': 0.55, 'reward_std': 0.3, 'kl': 0.004, 'epoch': 0.15}
{'train_runtime': 61.2, 'train_samples_per_second': 1.3, 'train_loss': 0.01, 'epoch': 0.15}
"""  # noqa: E501 - a console line as printed
VERL = """\
(TaskRunner pid=1) \x1b[36mstep:1 - actor/entropy:np.float64(0.52) - actor/kl_loss:0.001 - critic/score/mean:0.10 - response_length/mean:312.0 - actor/pg_clipfrac:0.002
(TaskRunner pid=1) step:2 - actor/entropy:0.50 - actor/kl_loss:0.002 - critic/score/mean:0.20 - response_length/mean:318.0 - actor/pg_clipfrac:0.003 - val-core/test_score/mean:0.3
step:3 - actor/entropy:0.49 - actor/kl_loss:0.003 - critic/score/mean:0.25 - response_length/mean:320.0 - actor/pg_clipfrac:0.003
"""  # noqa: E501
MLX = """\
Iter 1: Train loss 0.693, Chosen reward 0.000, Rejected reward 0.000, Learning Rate 1.000e-05, It/sec 1.0
Iter 2: Train loss 0.500, Chosen reward -0.100, Rejected reward -0.900, Learning Rate 1.000e-05, It/sec 1.1
Iter 3: Train loss 0.300, Chosen reward -0.300, Rejected reward -2.000, Learning Rate 1.000e-05, It/sec 1.0
"""
TABLE_HTML = (
    "<table><tr><th>Step</th><th>Training Loss</th><th>rewards / chosen</th><th>rewards / margins</th></tr>"
    "<tr><td>1</td><td>0.693100</td><td>0.000000</td><td>0.0</td></tr>"
    "<tr><td>2</td><td>0.650000</td><td>0.010000</td><td>No Log</td></tr>"
    "<tr><td>3</td><td>0.600000</td><td>0.020000</td><td>0.3</td></tr></table>"
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trl_console_dicts_keep_eval_apart_and_drop_the_summary_row(tmp_path):
    log = readers.read(write(tmp_path, "train.log", TRL_DICTS))
    assert log.format == "console_dicts" and log.framework == "trl"
    assert [r["reward"] for r in log.train] == [0.25, 0.5, 0.55]  # the eval row did not replace a train row
    assert [r["step"] for r in log.train] == [1, 2, 3]  # by position among the train rows
    assert log.eval == [{"step": 2.0, "loss": 0.2, "reward": 0.45, "epoch": 0.1}]  # at the train row before it
    assert math.isnan(log.train[1]["grad_norm"]) and len(log.train) == 3  # no train_runtime row
    assert {"reward", "kl", "grad_norm"} <= set(log.used)


def test_verl_console_with_colour_codes_and_numpy_wrappers(tmp_path):
    log = readers.read(write(tmp_path, "verl.log", VERL))
    assert log.format == "console_pairs" and log.framework == "verl"
    assert [r["reward"] for r in log.train] == [0.10, 0.20, 0.25]
    assert log.train[0]["entropy"] == 0.52 and log.train[2]["kl"] == 0.003
    assert log.eval and log.eval[0]["test_score/mean"] == 0.3  # val-core/ goes to eval
    assert infer_algo(log.train) == "grpo"  # critic-free, a per-token KL


PROSE_BEFORE_STEPS = """\
histogram:  {'correct with both format and answer reward 1': 17, 'format reward 0 and answer reward 0': 239}
Percentage of correct examples:  0.066
GRPO Iteration:  0 Epoch:  0 Microbatch:  0 / 128
GRPO Iteration 0, Epoch 0, Evaluating...
Percentage of correct examples:  0.041
Percentage of correct examples:  0.043
GRPO Iteration:  1 Epoch:  0 Microbatch:  0 / 128
Percentage of correct examples:  0.102
GRPO Iteration:  2 Epoch:  0 Microbatch:  0 / 128
"""


def test_prose_metrics_before_their_step_line_and_an_evaluation_block(tmp_path):
    """A hand-written loop prints ``Percentage of correct examples: x`` before each step line, and after the line
    that opens an evaluation the evaluation's own value: that value is the evaluation's (up to a name it already
    has), the next one is the next step's; the share of correct answers stands in for the reward it does not log
    (a phrase whose last word is a metric, ``Average Reward: x``, is that metric: the theLMbook corpus run)."""
    log = readers.read(write(tmp_path, "loop.log", PROSE_BEFORE_STEPS))
    assert log.format == "console_steps"
    assert [(r["step"], r["reward"]) for r in log.train] == [(0, 0.066), (1, 0.043), (2, 0.102)]
    assert log.eval == [{"step": 0.0, "percentage_of_correct_examples": 0.041}]
    assert "percentage_of_correct_examples" in log.used
    # a step line with metrics of its own is a train line, whatever else it says
    inline = "".join(f"Step {i} | loss: 0.5 | validation set cached\nreward: {i / 10}\nkl: 0.01\n" for i in (1, 2, 3))
    log = readers.read(write(tmp_path, "inline.log", inline))
    assert [r["reward"] for r in log.train] == [0.1, 0.2, 0.3] and not log.eval


def test_a_hand_written_dpo_loops_train_and_val_columns(tmp_path):
    text = "step,train_loss,train_reward_margin,train_reward_accuracy,val_loss,val_reward_margin\n"
    text += "".join(
        f"{5 * i},{0.69 / (i + 1)},{2.0 * i},{min(1.0, 0.5 + 0.1 * i)},{0.7 / (i + 1)},{1.5 * i}\n" for i in range(6)
    )
    log = readers.read(write(tmp_path, "dpo.csv", text))
    assert [r["rewards/margins"] for r in log.train] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert log.train[1]["rewards/accuracies"] == 0.6 and log.eval[2]["rewards/margins"] == 3.0


def test_a_log_of_numbered_evaluations_only_is_read_as_the_runs_curve(tmp_path):
    """trlx's notebook output prints no training statistics, only ``Evaluation #k reward/mean: x`` (with rich's
    colour codes): those evaluations are the run's curve, and the reading says so."""
    text = "".join(
        f"[RANK 0] Evaluating model\nEvaluation #{k} reward/mean: {0.4 * k:.2f}   \x1b[0m\n" for k in range(6)
    )
    log = readers.read(write(tmp_path, "trlx.log", text))
    assert log.format == "console_evals" and log.eval_only and not log.eval
    assert [(r["step"], r["reward"]) for r in log.train] == [(0, 0.0), (1, 0.4), (2, 0.8), (3, 1.2), (4, 1.6), (5, 2.0)]
    mixed = readers.read(write(tmp_path, "mixed.log", TRL_DICTS))  # a log with training records keeps them apart
    assert not mixed.eval_only and mixed.eval


def test_space_separated_names_and_numbers(tmp_path):
    """A hand-written loop that prints ``pass 1/4 step 3/128 lr 5.000e-06 reward 0.055``: no ``:`` or ``=``, the
    names and numbers alternate; a sentence with a number in it is no record."""
    text = "Loading weights 100 of the model\n" + "".join(
        f"pass 1/4 step {i}/128 lr {5e-6 * (1 - i / 128):.3e} reward {0.04 + i / 1000:.3f}\n" for i in range(1, 7)
    )
    log = readers.read(write(tmp_path, "loop.log", text))
    assert [r["step"] for r in log.train] == [1, 2, 3, 4, 5, 6]
    assert log.train[0]["reward"] == 0.041 and log.train[5]["learning_rate"] == pytest.approx(4.766e-6)


def test_a_logger_line_per_step_without_a_step_number_and_totals_over_a_count(tmp_path):
    """A hand-written loop's logger prints the same ``key: value, ...`` set each step, with a dict of totals; the
    example completions printed between (their own one-sample ``reward`` dicts) are not steps."""
    lines = []
    for i, (total, entropy) in enumerate([(144.0, 0.82), (112.0, 0.53), (60.0, 2.4), (3.0, 7.1)]):
        lines.append(
            f"2025-09-25 04:0{i}:16,956 - train - INFO - rl_loss: 0.00{i}, time: 109.8, token_entropy: {entropy}, "
            f"reward_data: {{'total_num': 256, 'total_reward': {total}, 'total_format_reward': 241.0}}, "
            f"metadata: {{'clamped_at_min_count': tensor(0.28, device='cuda:0')}}"
        )
        lines.append(f"2025-09-25 04:0{i}:17,000 - train - INFO - reward: {{'format_reward': 1.0, 'reward': 0.0}}")
    log = readers.read(write(tmp_path, "train.log", "\n".join(lines) + "\n"))
    assert log.format == "console_pairs" and [r["step"] for r in log.train] == [1, 2, 3, 4]
    assert [round(r["reward"], 4) for r in log.train] == [0.5625, 0.4375, 0.2344, 0.0117]
    assert log.train[3]["entropy"] == 7.1 and log.train[0]["loss"] == 0.0
    assert log.train[0]["metadata/clamped_at_min_count"] == 0.28


def test_verl_jsonl_with_a_nested_data_dict(tmp_path):
    rows = [
        {"step": i, "data": {"critic/score/mean": 0.1 * i, "actor/entropy": 0.5, "critic/vf_loss": 1.0}} for i in (1, 2)
    ]
    log = readers.read(write(tmp_path, "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    assert [r["reward"] for r in log.train] == [0.1, 0.2] and log.train[0]["loss/value_avg"] == 1.0
    assert infer_algo(log.train) == "ppo"  # a critic: PPO, whatever the KL is called


def test_pretty_printed_json_list_and_bare_log_history_and_a_wrapper(tmp_path):
    records = [
        {"step": i, "loss": 0.7 - 0.1 * i, "rewards/chosen": 0.1 * i, "rewards/margins": 0.2 * i} for i in (1, 2, 3)
    ]
    for name, text in (
        ("list.json", json.dumps(records, indent=2)),
        ("state.json", json.dumps({"log_history": records, "global_step": 3})),
        ("wrapped.json", json.dumps({"train_loss": [{"step": 1, "loss": 0.6}], "raw_log_history": records})),
    ):
        log = readers.read(write(tmp_path, name, text))
        assert [r["step"] for r in log.train] == [1, 2, 3], name
        assert infer_algo(log.train) == "dpo"


def test_llamafactory_trainer_log_uses_current_steps(tmp_path):
    rows = [
        {"current_steps": s, "total_steps": 10, "loss": 0.6, "accuracy": 0.5, "lr": 1e-6, "epoch": 0.1} for s in (5, 10)
    ]
    log = readers.read(write(tmp_path, "trainer_log.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    assert [r["step"] for r in log.train] == [5, 10] and log.framework == "llamafactory"
    assert log.train[0]["rewards/accuracies"] == 0.5 and log.train[0]["learning_rate"] == 1e-6


def test_mlx_lines_html_table_and_csv(tmp_path):
    mlx = readers.read(write(tmp_path, "mlx.log", MLX))
    assert [r["step"] for r in mlx.train] == [1, 2, 3] and mlx.train[2]["rewards/chosen"] == -0.3
    table = readers.read(write(tmp_path, "nb.html", TABLE_HTML))
    assert table.format == "table" and [r["loss"] for r in table.train] == [0.6931, 0.65, 0.6]
    assert "rewards/margins" not in table.train[1]  # "No Log" is no value
    csv = readers.read(write(tmp_path, "export.csv", "_step,train/reward,train/kl\n1,0.1,0.0\n2,0.2,0.01\n"))
    assert [r["reward"] for r in csv.train] == [0.1, 0.2] and csv.train[1]["kl"] == 0.01


def test_the_richest_of_several_tables_and_an_entropy_never_computed(tmp_path):
    sft = (
        "<table><tr><th>Step</th><th>Training Loss</th></tr>"
        + "".join(f"<tr><td>{i}</td><td>0.{9 - i}</td></tr>" for i in range(1, 9))
        + "</table>"
    )
    grpo = (
        "<table><tr><th>Step</th><th>Training Loss</th><th>reward</th><th>kl</th></tr>"
        + "".join(f"<tr><td>{i}</td><td>0.0</td><td>0.{i}</td><td>0.00{i}</td></tr>" for i in range(1, 6))
        + "</table>"
    )
    nb = readers.read(write(tmp_path, "nb.html", sft + "\n" + grpo))  # an SFT warm-up, then the RL run
    assert [r["reward"] for r in nb.train] == [0.1, 0.2, 0.3, 0.4, 0.5]
    rows = [{"step": i, "reward": 0.1 * i, "entropy": 0.0, "approx_kl": 0.0} for i in range(1, 6)]
    log = readers.normalise(rows)  # a loop that logs 0.0 for an entropy it does not compute
    assert "entropy" not in log.train[0] and log.train[0][keys.APPROX_KL[0]] == 0.0  # a KL of 0 is a measure
    assert "entropy (0 on every step: not computed)" in log.ignored and "entropy" not in log.used


def test_tensor_reward_lines_a_markdown_preference_table_and_a_config_dict(tmp_path):
    tensors = "".join(
        f"Generated answers: ['x']\ntime: 7.2s     rewards: tensor([-1., {r},  1., -1.])\n" for r in ("-1.", "1.", "1.")
    )
    log = readers.read(write(tmp_path, "grpo.log", tensors))  # simple_GRPO: no step counter, one batch per line
    assert [r["reward"] for r in log.train] == [-0.5, 0.0, 0.0] and log.train[0]["reward_std"] == pytest.approx(
        0.866, abs=1e-3
    )
    table = "| epoch | step | loss | acc | margins |\n|---|---|---|---|---|\n| 0.2 | 10 | 0.87 | 0.0 | -0.02 |\n" + (
        "| 0.4 | 20 | 0.82 | 0.0 | -0.019 |\n"
    )
    pref = readers.read(write(tmp_path, "notes.md", table))
    assert [r["step"] for r in pref.train] == [10, 20] and pref.train[1]["rewards/accuracies"] == 0.0
    assert pref.train[0]["rewards/margins"] == -0.02 and infer_algo(pref.train) == "dpo"
    dicts = "{'max_capture_size': 256}\n" + "".join(f"{{'loss': 0.{i}, 'reward': 0.{i}}}\n" for i in range(1, 4))
    console = readers.read(write(tmp_path, "run.log", dicts))  # vLLM prints its config as a dict first
    assert [(r["step"], r["reward"]) for r in console.train] == [(1, 0.1), (2, 0.2), (3, 0.3)]


def test_epochs_without_steps_and_repeated_epochs(tmp_path):
    per_epoch = readers.normalise([{"epoch": e, "loss": 1.0 / e} for e in (1, 2, 3)])
    assert [r["step"] for r in per_epoch.train] == [1, 2, 3]
    same_epoch = readers.normalise([{"epoch": 0.0, "loss": x} for x in (1.0, 2.0, 3.0)])  # KTO's console: epoch 0.0
    assert [r["loss"] for r in same_epoch.train] == [1.0, 2.0, 3.0]  # by position, not merged into one
    # TRL's console dicts carry the fraction of an epoch done (0.01, 0.02, ...): a position, not a step number
    fractional = readers.normalise([{"epoch": round(0.01 * i, 2), "reward": 0.1 * i} for i in range(1, 6)])
    assert [r["step"] for r in fractional.train] == [1, 2, 3, 4, 5]


def test_a_file_of_no_known_metrics_says_what_was_tried(tmp_path):
    with pytest.raises(readers.LogFormatError, match="no per-step records of known metrics"):
        readers.read(write(tmp_path, "notes.txt", "hello\nworld\n"))
    with pytest.raises(readers.LogFormatError, match="no per-step records"):
        readers.read(write(tmp_path, "cfg.json", json.dumps({"model": "x", "lr": 1e-5})))


def test_the_vocabulary_maps_each_foreign_name_to_one_key():
    seen = {}
    for framework, theirs, ours in keys.VOCABULARY:
        assert seen.setdefault(theirs, ours) == ours, (framework, theirs)
        assert ours in keys.READ or ours in readers.DERIVED, (framework, theirs, ours)


#: corpus files with fewer than 5 training records, and why (read all the same, then told their history is short)
WANDB_PANEL = (
    '"Step","a - reward/avg_raw_reward","a - reward/avg_raw_reward__MIN","a - reward/avg_raw_reward__MAX",'
    '"b - train/kl","b - reward/avg_raw_reward"\n'
    '"1","0.5","0.4","0.6","0.01","0.2"\n"2","0.6","0.5","0.7","0.02","0.3"\n"3","","","","0.03","0.35"\n'
)


def test_a_wandb_panel_export_is_one_run_per_run_name(tmp_path):
    """W&B's "export panel data" CSV: one ``<run> - <metric>`` column per run, ``__MIN``/``__MAX`` a group's
    range, blank where a run is shorter."""
    a, b = readers.read_runs(write(tmp_path, "panel.csv", WANDB_PANEL))
    assert a.format == b.format == "wandb_panel_csv" and (a.run, b.run) == ("run 'a', steps 1-2", "run 'b', steps 1-3")
    assert [r["reward"] for r in a.train] == [0.5, 0.6] and a.framework == "skyrl"  # no MIN/MAX, no blank row
    assert [r["kl"] for r in b.train] == [0.01, 0.02, 0.03] and [r["step"] for r in b.train] == [1, 2, 3]
    with pytest.raises(readers.LogFormatError, match="holds 2 runs"):
        readers.read(tmp_path / "panel.csv")


def test_runs_appended_to_one_log_are_told_apart_but_a_resume_or_an_epoch_counter_is_not(tmp_path):
    def jsonl(steps, **extra):
        return "".join(json.dumps({"step": s, "reward": 0.1 * i, **extra}) + "\n" for i, s in enumerate(steps))

    appended = jsonl([1, 2, 3]) + jsonl([1, 2, 3, 4, 5])  # a launch that died, then the real one
    first, second = readers.read_runs(write(tmp_path, "a.jsonl", appended))
    assert [r["step"] for r in first.train] == [1, 2, 3] and [r["step"] for r in second.train] == [1, 2, 3, 4, 5]
    assert second.run == "run 2 of 2, steps 1-5" and second.train[4]["reward"] == pytest.approx(0.4)
    resumed = jsonl([10, 20, 30, 40]) + jsonl([30, 40, 50])  # resumed from the checkpoint of step 30
    (log,) = readers.read_runs(write(tmp_path, "r.jsonl", resumed))
    assert [r["step"] for r in log.train] == [10, 20, 30, 40, 50] and log.run is None
    epochs = jsonl([1, 2], epoch=0) + jsonl([1, 2], epoch=1)  # a loop whose step counts within the epoch
    assert len(readers.read_runs(write(tmp_path, "e.jsonl", epochs))) == 1
    evals = jsonl([5, 10]) + json.dumps({"step": 0, "eval_reward": 0.2}) + "\n" + jsonl([15])  # eval at step 0
    assert len(readers.read_runs(write(tmp_path, "v.jsonl", evals))) == 1


def test_a_log_history_csv_whose_summary_columns_are_empty_until_the_last_row(tmp_path):
    """``pd.DataFrame(trainer.state.log_history).to_csv()``: every row has the summary's columns, empty but in the
    last one; only that row is the summary."""
    text = (
        "step,loss,reward,kl,train_runtime,train_loss\n"
        "1,0.1,0.2,0.0,,\n2,0.1,0.3,0.01,,\n3,0.1,0.4,0.02,,\n3,,,,61.2,0.1\n"
    )
    log = readers.read(write(tmp_path, "history.csv", text))
    assert [r["reward"] for r in log.train] == [0.2, 0.3, 0.4] and "train_runtime" not in log.train[-1]


def test_a_json_object_of_named_runs_each_with_its_metric_series(tmp_path):
    runs = {
        "grpo": {"accuracy": 0.3, "status": "ok", "reward_curve": [0.1, 0.2, 0.3], "kl_curve": [0.0, 0.01, 0.02]},
        "dapo": {"accuracy": 0.0, "reward_curve": [0.1, 0.0, 0.0]},
        "notes": {"seed": 1},  # no series: not a run
    }
    logs = readers.read_runs(write(tmp_path, "ablations.json", json.dumps(runs)))
    assert [log.run for log in logs] == ["run 'grpo', steps 1-3", "run 'dapo', steps 1-3"]
    assert [r["reward"] for r in logs[0].train] == [0.1, 0.2, 0.3] and logs[0].train[2]["kl"] == 0.02
    assert logs[0].format == "json_runs" and "accuracy" not in logs[0].train[0]  # a final score is no series
