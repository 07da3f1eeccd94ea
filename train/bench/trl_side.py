"""TRL's side of train/bench/real_step.py: one GRPO step of TRL's
GRPOTrainer (PyTorch, CPU) on the agent's half of our step.

  .venv-trl/bin/python train/bench/trl_side.py '{"hf_dir": ..., ...}'

Run by real_step.py in the Python of requirements-trl.txt (this file
imports nothing of the project). The setup (one JSON argument): hf_dir (the
agent's HF directory), prompts (the agent's prompt texts as templated,
one per task), generations (G), new_tokens (the agent's max_new_tokens),
temperature, learning_rate, minibatches (optimizer steps per generation
batch, as our agent update's), dtype ("float32" or "bfloat16"), repeats,
seed. A step is TRL's: the G completions of every prompt sampled by
`model.generate`, rewarded, and `minibatches` AdamW steps over them, with
beta 0 (no reference model, our grpo.kl_coef 0) and one iteration (our one
GRPO epoch). The reward is 1 when a completion holds a digit; it sets no
shape. Prints, last, one JSON line: {"step_s": the median of `repeats`
steps after a first, "steps": every step's seconds}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(setup: dict) -> dict:
  import datasets  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import trl  # pylint: disable=g-import-not-at-top

  torch.manual_seed(setup["seed"])
  dtype = getattr(torch, setup["dtype"])
  tokenizer = transformers.AutoTokenizer.from_pretrained(setup["hf_dir"])
  model = transformers.AutoModelForCausalLM.from_pretrained(
      setup["hf_dir"], dtype=dtype)
  prompts = setup["prompts"]
  rows = len(prompts) * setup["generations"]
  steps = setup["repeats"] + 1
  # One generation batch (every prompt's G completions) per step, split into
  # `minibatches` optimizer steps.
  per_step = rows // setup["minibatches"]
  config = trl.GRPOConfig(
      output_dir="/tmp/genenv_trl_side", use_cpu=True, report_to=[],
      seed=setup["seed"], max_steps=steps * setup["minibatches"],
      per_device_train_batch_size=per_step,
      steps_per_generation=setup["minibatches"],
      num_generations=setup["generations"],
      max_completion_length=setup["new_tokens"],
      temperature=setup["temperature"], top_k=0, top_p=1.0,
      learning_rate=setup["learning_rate"], beta=0.0, num_iterations=1,
      bf16=setup["dtype"] == "bfloat16", logging_steps=10**6,
      save_strategy="no", disable_dropout=True, dataloader_num_workers=0)
  dataset = datasets.Dataset.from_dict(
      {"prompt": prompts * (steps * 2)})

  def has_digit(completions, **_):
    return [float(any(ch.isdigit() for ch in text)) for text in completions]

  times: list[float] = []

  class StepTimer(transformers.TrainerCallback):
    """Seconds of each generation batch: from the first optimizer step that
    samples it to the end of its last."""

    def __init__(self):
      self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
      if state.global_step % setup["minibatches"] == 0:
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
      if state.global_step % setup["minibatches"] == 0:
        times.append(time.perf_counter() - self._start)

  trainer = trl.GRPOTrainer(model=model, reward_funcs=has_digit, args=config,
                            train_dataset=dataset, processing_class=tokenizer,
                            callbacks=[StepTimer()])
  trainer.train()
  return {"step_s": statistics.median(times[1:]), "steps": times}


if __name__ == "__main__":
  print(json.dumps(main(json.loads(sys.argv[1]))))
