"""The baseline: a bare TRL GRPO script with the quickstart's settings (tiny model path as argv[1])."""

import json  # noqa: E401
import sys
import time

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

allowed = set("abcdefghijklmnopqrstuvwxyz ")


def charset(completions, **kw):  # noqa: E302
    return [sum(c in allowed for c in x) / len(x) if x else 0.0 for x in completions]


steps = int(sys.argv[2])  # noqa: E305
args = GRPOConfig(
    output_dir=sys.argv[3],
    learning_rate=1e-3,
    beta=0.0,
    num_generations=4,
    per_device_train_batch_size=8,
    max_completion_length=16,
    temperature=1.0,
    max_steps=steps,
    logging_steps=1,
    seed=0,
    data_seed=0,
    lr_scheduler_type="constant",
    disable_dropout=True,
    activation_checkpointing=False,
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
)
ds = Dataset.from_list([{"prompt": f"Task {i}:"} for i in range(64)])
trainer = GRPOTrainer(model=sys.argv[1], reward_funcs=charset, args=args, train_dataset=ds)
t0 = time.perf_counter()
out = trainer.train()
wall = time.perf_counter() - t0  # noqa: E702
rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
print(json.dumps({"train_runtime": out.metrics["train_runtime"], "steps": steps, "last_reward": rewards[-1]}))
