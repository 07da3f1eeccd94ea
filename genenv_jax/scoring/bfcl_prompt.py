"""BFCL's prompt-mode system prompt and the installed wheel's data directory.

BFCL asks a prompt-mode model with its default system prompt (Python call syntax,
no tool-call tag, the functions as JSON), built from the templates of the
installed `bfcl_eval` package.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any, Sequence

from genenv_jax.scoring import InputError

# BFCL's default prompt-mode variation: Python calls, no tag, JSON function docs.
RETURN_FORMAT, DOC_FORMAT, PROMPT_FORMAT, STYLE = "python", "json", "plaintext", "classic"


def bfcl_system_prompt(functions: Sequence[dict[str, Any]]) -> str:
  """BFCL's default prompt-mode system prompt for these function schemas."""
  try:
    from bfcl_eval.constants import default_prompts as bp  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise InputError("BFCL's prompt is built from the bfcl_eval package, which is "
                     "not installed (pip install bfcl-eval)") from e
  style = bp.PROMPT_STYLE_TEMPLATES[STYLE]
  return bp.PROMPT_TEMPLATE_MAPPING[PROMPT_FORMAT].format(
      persona=style["persona"], task=style["task"],
      tool_call_format=style["tool_call_no_tag"].format(
          output_format=bp.OUTPUT_FORMAT_MAPPING[RETURN_FORMAT],
          param_types=bp.PARAM_TYPE_MAPPING[RETURN_FORMAT]),
      multiturn_behavior=style["multiturn_behavior"],
      available_tools=style["available_tools"].format(
          format=DOC_FORMAT, functions=json.dumps(list(functions), indent=4)))


def wheel_data_dir() -> str:
  """The `data/` directory of the installed bfcl_eval package.

  Raises:
    InputError: bfcl_eval is not installed.
  """
  spec = importlib.util.find_spec("bfcl_eval")
  if spec is None or spec.origin is None:
    raise InputError("BFCL's data comes from the bfcl_eval package, which is not "
                     "installed (pip install bfcl-eval)")
  return os.path.join(os.path.dirname(spec.origin), "data")
