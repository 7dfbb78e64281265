"""Trainer construction (TRL GRPO) and the callbacks that record every logged step."""

import os

# sweeprl records every trial in MLflow itself (off the training thread, sweeprl.tracking_worker) and gives the
# trainers report_to="none"; TRL still imports MLflow wherever it is installed (trl.extras.profiling), about 0.6 s
# of start-up per training process for nothing. transformers' switch turns that off; a user's own value wins.
os.environ.setdefault("DISABLE_MLFLOW_INTEGRATION", "TRUE")
