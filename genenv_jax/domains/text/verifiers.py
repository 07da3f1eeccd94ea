"""Verifiers of the text domain: how an agent's response is scored against a reference.

Every verifier sees the agent's response tokens only (never its prompt) and the
reference answer the simulator wrote. A response counts up to its first EOS; a
response without an EOS inside its mask was cut off and scores 0, as does any
response to a task whose reference is empty.

In-graph verifiers (pure JAX, fixed shapes) compare *normalised token spans*: each
token is mapped to a canonical id shared by all tokens whose text is the same after
stripping surrounding whitespace and lower-casing, and whitespace-only tokens are
dropped. (Normalisation is per token: a word the tokenizer splits differently in
the two texts does not match.)

  exact     1.0 iff the normalised response equals the normalised reference.

Host verifiers decode both spans with the tokenizer and score the text in Python,
called from inside the jitted step through `jax.pure_callback`, by each device on
the rows it holds (`sharding.rows_per_device`: every process scores its own share
of a batch). They return a
float32[M] of fixed shape whatever the tokens are, and score 0 for anything they
cannot read (a scorer exception is a 0, never a crash). Each takes time linear in the
lengths of the two texts; tool_call, bfcl and api_bank score 0 on text past
`scoring.bfcl`'s limits (MAX_OUTPUT_CHARS, MAX_CALLS, MAX_INT_DIGITS,
MAX_ARITHMETIC_SIZE).

  f1        SQuAD's word F1 (`scoring.qa`: lower case, no punctuation, no
            articles, split at whitespace): 2PR / (P + R) over the words as
            bags, so "58" shares no word with "85" (a tokenizer that writes
            numbers digit by digit would give token bags a perfect match).
  squad_exact  1.0 iff the SQuAD-normalised texts are equal.
  contains  1.0 iff the SQuAD-normalised reference's words occur in the
            response's as a run of whole words ("The capital of France is
            Paris." contains "Paris"; "Parisian" does not).
  numeric   the response's last number (`last_number`: thousands commas,
            signs, decimals; a sentence's closing point is no decimal point)
            equals the reference's, compared as numbers; the reference must be
            one number.
  tool_call `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks: the
            response's calls equal the reference's as a multiset (order-free), names
            exactly and arguments after `scoring.apibank.canonical` (whitespace and
            case of strings, numeric strings as numbers).
  boxed     the content of the response's last `\\boxed{...}` equals the reference's
            last boxed content (or the whole reference when it has none), both
            without whitespace and surrounding `$`.
  bfcl      BFCL's AST rules (`scoring.bfcl.check_calls`): the reference is the
            compact JSON below (`bfcl_reference`); the response is decoded by `scoring.bfcl.decode_calls` (Python calls,
            JSON or `<tool_call>` blocks); category "parallel" when the ground truth
            has several calls, else "simple".
  api_bank  API-Bank's call match (`scoring.apibank.score`): the reference is one
            call, `API-Request: [Name(key='value', ...)]` (or another format
            `scoring.apibank` reads); the response must hold exactly that call,
            parameters compared after `scoring.apibank.canonical`. A ToolSearcher
            call is matched on its keywords too (the Table 1 scorer's retrieval
            needs the API catalogue, which a written task does not carry).

A host verifier also says whether a reference is checkable at all (`reference_ok`):
the text domain marks generated tasks whose reference fails it invalid.

Where the answer lies in a long response (`answer_from`, so the agent may reason
before it answers); a response without such an answer scores 0:

  all             the whole response.
  final_answer    the rest of the line after the response's last answer marker
                  (e.g. `Final answer:`); in-graph the marker is matched as token
                  sequences (alone and after a space), the line ends at the first
                  token holding a newline.
  last_boxed      the last `\\boxed{...}` (host verifiers only).
  last_tool_call  the last run of `<tool_call>` blocks (only whitespace between
                  them), else the last bracketed call list that decodes, e.g.
                  `[f(a=1)]` or a JSON list (host verifiers only).

The BFCL reference (`bfcl_reference`) holds only what the AST check reads: the
ground truth and, for each parameter it names, the schema's type (`array[string]`
for an array of strings) and whether the schema requires it:

  {"ground_truth": [{"f": {"a": [1], "b": ["x", ""]}}],
   "types": {"f": {"a": "integer", "b": "string"}}, "required": {"f": ["a"]}}
"""

from __future__ import annotations

import fractions
import json
import re
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax import sharding
from genenv_jax.scoring import apibank
from genenv_jax.scoring import bfcl
from genenv_jax.scoring import qa

IN_GRAPH_VERIFIERS = ("exact",)
HOST_VERIFIERS = ("f1", "squad_exact", "contains", "numeric", "tool_call",
                  "boxed", "bfcl", "api_bank")
VERIFIERS = IN_GRAPH_VERIFIERS + HOST_VERIFIERS
IN_GRAPH_ANSWERS = ("all", "final_answer")
ANSWERS_FROM = IN_GRAPH_ANSWERS + ("last_boxed", "last_tool_call")

_REPLACEMENT_CHAR = "\ufffd"  # what a token holding part of a UTF-8 character decodes to
_BOXED = "\\boxed{"
_WHITESPACE = re.compile(r"\s+")
_TOOL_CALL_RUN = re.compile(r"(?:<tool_call>.*?</tool_call>\s*)+", re.DOTALL)
_MAX_LIST_STARTS = 64  # bracket positions tried when looking for the last call list


# ------------------------------------------------------------------ token tables


class TokenTables(NamedTuple):
  """Per-token facts of a tokenizer's vocabulary (V = len(tokenizer)).

  Attributes:
    plain: bool[V] the token is ordinary text (not a special token such as an EOS
      or a chat-template marker).
    blank: bool[V] a plain token whose text is whitespace only.
    unspaced: int32[V] the id of the token's text without its leading spaces when
      the vocabulary has such a token, else the token itself (the first token of a
      span written after `Task: ` becomes the token it would be at a line start).
    canonical: int32[V] the smallest id whose text, stripped and lower-cased, is the
      same as this token's; tokens holding partial UTF-8 characters map to
      themselves.
    newline: bool[V] a token whose text holds a line break.
  """

  plain: np.ndarray
  blank: np.ndarray
  unspaced: np.ndarray
  canonical: np.ndarray
  newline: np.ndarray


def special_token_ids(tokenizer: Any) -> set[int]:
  """Ids of the tokenizer's special tokens (named ones and added ones marked special)."""
  ids = {int(i) for i in tokenizer.all_special_ids}
  added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
  ids.update(int(i) for i, token in added.items() if getattr(token, "special", False))
  return ids


def token_texts(tokenizer: Any) -> list[str]:
  """The text of every single token id 0..len(tokenizer)-1, special tokens included."""
  ids = [[i] for i in range(len(tokenizer))]
  backend = getattr(tokenizer, "backend_tokenizer", None)
  if backend is not None:
    return backend.decode_batch(ids, skip_special_tokens=False)
  return tokenizer.batch_decode(ids, skip_special_tokens=False)


def token_tables(tokenizer: Any) -> TokenTables:
  """The `TokenTables` of an HF tokenizer."""
  texts = token_texts(tokenizer)
  size = len(texts)
  special = special_token_ids(tokenizer)
  plain = np.array([i not in special for i in range(size)], bool)
  blank = plain & np.array([not text.strip() for text in texts], bool)
  by_text: dict[str, int] = {}
  by_key: dict[str, int] = {}
  canonical = np.arange(size, dtype=np.int32)
  for i, text in enumerate(texts):
    if not plain[i] or _REPLACEMENT_CHAR in text:
      continue
    by_text.setdefault(text, i)
    canonical[i] = by_key.setdefault(text.strip().lower(), i)
  unspaced = np.arange(size, dtype=np.int32)
  for i, text in enumerate(texts):
    stripped = text.lstrip(" ")
    if plain[i] and stripped and stripped != text:
      unspaced[i] = by_text.get(stripped, i)
  newline = np.array(["\n" in text for text in texts], bool)
  return TokenTables(plain=plain, blank=blank, unspaced=unspaced, canonical=canonical,
                     newline=newline)


def lookup(table: np.ndarray, tokens: jax.Array, default: Any) -> jax.Array:
  """table[tokens] for token ids int32[...], `default` for ids outside the table."""
  inside = (tokens >= 0) & (tokens < table.shape[0])
  values = jnp.asarray(table)[jnp.clip(tokens, 0, table.shape[0] - 1)]
  return jnp.where(inside, values, default)


def sequence_hits(tokens: jax.Array, region: jax.Array,
                  variants: Sequence[Sequence[int]]) -> tuple[jax.Array, jax.Array]:
  """Where one of several token sequences starts wholly inside a region.

  Args:
    tokens: int32[M, L].
    region: bool[M, L] positions a match may cover.
    variants: the token sequences (non-empty tuples of ids).

  Returns:
    (hits bool[M, L], which int32[M, L], length int32[M, L]): where a variant
    starts, the index of the (last listed) variant that starts there, -1 elsewhere,
    and its token count, 0 elsewhere.
  """
  hits = jnp.zeros(tokens.shape, bool)
  which = jnp.full(tokens.shape, -1, jnp.int32)
  lengths = jnp.zeros(tokens.shape, jnp.int32)
  for index, variant in enumerate(variants):
    here = region
    for offset, token in enumerate(variant):
      shifted = jnp.pad(tokens[:, offset:], ((0, 0), (0, offset)), constant_values=-1)
      inside = jnp.pad(region[:, offset:], ((0, 0), (0, offset)), constant_values=False)
      here = here & (shifted == token) & inside
    hits = hits | here
    which = jnp.where(here, index, which)
    lengths = jnp.where(here, len(variant), lengths)
  return hits, which, lengths


def final_answer_region(tokens: jax.Array, region: jax.Array,
                        markers: Sequence[Sequence[int]], tables: TokenTables
                        ) -> jax.Array:
  """bool[M, L]: the positions of `region` after its last marker, up to (not
  including) the first token holding a newline after it; none without a marker.

  Args:
    tokens: int32[M, L]; region: bool[M, L] (e.g. a response before its EOS).
    markers: the marker's token sequences.
    tables: the tokenizer's TokenTables.
  """
  hits, _, lengths = sequence_hits(tokens, region, markers)
  width = tokens.shape[1]
  columns = jnp.arange(width)[None, :]
  found = hits.any(axis=1)
  last = width - 1 - jnp.argmax(hits[:, ::-1], axis=1)
  start = last + jnp.take_along_axis(lengths, last[:, None], axis=1)[:, 0]
  breaks = lookup(tables.newline, tokens, False) & (columns >= start[:, None])
  stop = jnp.where(breaks.any(axis=1), jnp.argmax(breaks, axis=1), width)
  return (region & found[:, None] & (columns >= start[:, None])
          & (columns < stop[:, None]))


# ------------------------------------------------------------ in-graph verifiers


def _answer_region(response: jax.Array, response_mask: jax.Array,
                   eos_id: int) -> tuple[jax.Array, jax.Array]:
  """(finished bool[M], before_eos bool[M, R]): whether an EOS lies inside the
  mask, and the positions before the first such EOS."""
  is_eos = (response == eos_id) & response_mask
  finished = is_eos.any(axis=1)
  eos_pos = jnp.where(finished, jnp.argmax(is_eos, axis=1), response.shape[1])
  before_eos = jnp.arange(response.shape[1])[None, :] < eos_pos[:, None]
  return finished, before_eos & response_mask


def normalized_span(tokens: jax.Array, keep: jax.Array,
                    tables: TokenTables) -> tuple[jax.Array, jax.Array]:
  """Canonical ids of the kept non-blank tokens, moved to the front of each row.

  Args:
    tokens: int32[M, W].
    keep: bool[M, W] which positions belong to the span.
    tables: the tokenizer's TokenTables.

  Returns:
    (ids int32[M, W] with -1 after the span, lengths int32[M]).
  """
  keep = keep & ~lookup(tables.blank, tokens, False)
  ids = lookup(tables.canonical, tokens, tokens)
  order = jnp.argsort(~keep, axis=1, stable=True)
  lengths = keep.sum(axis=1).astype(jnp.int32)
  packed = jnp.take_along_axis(ids, order, axis=1)
  inside = jnp.arange(tokens.shape[1])[None, :] < lengths[:, None]
  return jnp.where(inside, packed, -1), lengths


def _spans(response, response_mask, reference, reference_mask, eos_id, tables, markers):
  response = jnp.asarray(response, jnp.int32)
  reference = jnp.asarray(reference, jnp.int32)
  finished, answer = _answer_region(response, jnp.asarray(response_mask, bool), eos_id)
  if markers:
    answer = final_answer_region(response, answer, markers, tables)
  reference_keep = jnp.asarray(reference_mask, bool) & (reference != eos_id)
  got, got_len = normalized_span(response, answer, tables)
  want, want_len = normalized_span(reference, reference_keep, tables)
  return finished & (want_len > 0), got, got_len, want, want_len


def exact_match(response: jax.Array, response_mask: jax.Array, reference: jax.Array,
                reference_mask: jax.Array, eos_id: int, tables: TokenTables,
                markers: Sequence[Sequence[int]] = ()) -> jax.Array:
  """1.0 where the normalised response span equals the normalised reference span.

  Args:
    response: int32[M, R]; response_mask: bool[M, R].
    reference: int32[M, R'] (its EOS is ignored); reference_mask: bool[M, R'].
    eos_id: the token that ends a response.
    tables: the tokenizer's TokenTables.
    markers: empty to score the whole response, else the token sequences of a final
      answer marker: only the rest of the line after the last one is scored.

  Returns:
    float32[M] in {0, 1}.
  """
  scorable, got, got_len, want, want_len = _spans(
      response, response_mask, reference, reference_mask, eos_id, tables, markers)
  width = max(got.shape[1], want.shape[1])
  got = jnp.pad(got, ((0, 0), (0, width - got.shape[1])), constant_values=-1)
  want = jnp.pad(want, ((0, 0), (0, width - want.shape[1])), constant_values=-1)
  same = (got_len == want_len) & jnp.all(got == want, axis=1)
  return (scorable & same).astype(jnp.float32)


# ----------------------------------------------------------------- host scoring


def _tool_calls(text: str) -> list[str]:
  """The text's `<tool_call>` calls as canonical JSON strings, sorted.

  Raises:
    bfcl.DecodeError: no `<tool_call>` block, or a block that is not a call.
  """
  if "<tool_call>" not in text:
    raise bfcl.DecodeError("no <tool_call> block")
  calls = bfcl.decode_calls(text)
  return sorted(json.dumps([call.name, apibank.canonical(call.args)], sort_keys=True)
                for call in calls)


def tool_call_score(response: str, reference: str) -> float:
  """1.0 when the response's tool calls equal the reference's (see module doc)."""
  try:
    return float(_tool_calls(response) == _tool_calls(reference))
  except bfcl.DecodeError:
    return 0.0


def tool_call_reference_ok(reference: str) -> bool:
  try:
    return bool(_tool_calls(reference))
  except bfcl.DecodeError:
    return False


def last_boxed(text: str) -> str | None:
  """The content of the last `\\boxed{...}` (braces balanced), None when there is none
  or it is not closed."""
  start = text.rfind(_BOXED)
  if start < 0:
    return None
  depth = 1
  for index in range(start + len(_BOXED), len(text)):
    char = text[index]
    if char == "{":
      depth += 1
    elif char == "}":
      depth -= 1
      if depth == 0:
        return text[start + len(_BOXED):index]
  return None


def _normalized_boxed(text: str) -> str:
  return _WHITESPACE.sub("", text).strip("$")


def _boxed_reference(reference: str) -> str | None:
  if _BOXED in reference:
    boxed = last_boxed(reference)
    return None if boxed is None else _normalized_boxed(boxed)
  return _normalized_boxed(reference)


def boxed_score(response: str, reference: str) -> float:
  """1.0 when the response's last boxed content equals the reference's (see module doc)."""
  got = last_boxed(response)
  want = _boxed_reference(reference)
  if got is None or not want:
    return 0.0
  return float(_normalized_boxed(got) == want)


def boxed_reference_ok(reference: str) -> bool:
  return bool(_boxed_reference(reference))


def _type_name(spec: dict[str, Any]) -> str:
  declared = spec["type"]
  if declared in ("array", "tuple"):
    return f"{declared}[{spec['items']['type']}]"
  return declared


def bfcl_reference(functions: Sequence[dict[str, Any]],
                   ground_truth: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """The compact reference of a BFCL entry (format in the module doc).

  Args:
    functions: BFCL's function schemas `[{"name", "parameters": {"properties",
      "required"}}, ...]`.
    ground_truth: BFCL's `[{function_name: {param: [acceptable values]}}, ...]`.

  Raises:
    KeyError or TypeError: a ground-truth call names a function the schemas do not
    define, or a schema lacks a type.
  """
  schemas = {schema["name"]: schema["parameters"] for schema in functions}
  types: dict[str, dict[str, str]] = {}
  required: dict[str, list[str]] = {}
  for call in ground_truth:
    (name, params), = call.items()
    properties = schemas[name]["properties"]
    # A ground-truth parameter the schema lacks (BFCL has some) stays untyped: a
    # call that gives it fails, as under BFCL's checker.
    types.setdefault(name, {}).update(
        {param: _type_name(properties[param]) for param in params if param in properties})
    if schemas[name].get("required"):
      required[name] = list(schemas[name]["required"])
  return {"ground_truth": list(ground_truth), "types": types, "required": required}


def _schema_of(type_name: str) -> dict[str, Any]:
  """The parameter schema a type name of the compact reference stands for."""
  declared, _, item = type_name.partition("[")
  spec: dict[str, Any] = {"type": declared}
  if item:
    spec["items"] = {"type": item.rstrip("]")}
  known = set(bfcl.PYTHON_TYPES)
  if declared not in known or (item and spec["items"]["type"] not in known):
    raise ValueError(f"unknown BFCL type {type_name!r}")
  return spec


def bfcl_entry(reference: str) -> tuple[bfcl.BfclEntry, str]:
  """The BFCL entry and category a compact reference text describes.

  Raises:
    ValueError (json.JSONDecodeError included), KeyError or TypeError: the reference
    is not `{"ground_truth": [...], "types": {...}, "required": {...}}`.
  """
  record = json.loads(reference)
  ground_truth = record["ground_truth"]
  if not isinstance(ground_truth, list) or not ground_truth:
    raise ValueError("ground_truth must be a non-empty list of calls")
  required = record.get("required", {})
  functions = {
      name: {"name": name, "parameters": {
          "properties": {param: _schema_of(t) for param, t in params.items()},
          "required": list(required.get(name, []))}}
      for name, params in record["types"].items()}
  category = "parallel" if len(ground_truth) > 1 else "simple"
  return bfcl.BfclEntry("generated", functions, ground_truth), category


def bfcl_score(response: str, reference: str) -> float:
  """1.0 when the response's calls pass BFCL's AST check against the reference."""
  try:
    entry, category = bfcl_entry(reference)
    return float(bfcl.check_calls(entry, bfcl.decode_calls(response), category) is None)
  except Exception:  # pylint: disable=broad-except
    # Malformed references and unreadable responses score 0.
    return 0.0


def _first_answer(acceptable: Any) -> Any:
  """An answer value from an acceptable value: a dict's (or each dict of a list's)
  keys take their first acceptable value (keys whose first is "" left out)."""
  if isinstance(acceptable, dict):
    return {key: _first_answer(values[0]) for key, values in acceptable.items()
            if isinstance(values, list) and values and values[0] != bfcl.OPTIONAL}
  if isinstance(acceptable, list) and acceptable and all(
      isinstance(item, dict) for item in acceptable):
    return [_first_answer(item) for item in acceptable]
  return acceptable


def bfcl_reference_ok(reference: str) -> bool:
  """The reference is well formed and solvable: the calls made of each parameter's
  first acceptable value (leaving out parameters whose first value is ""; in a dict
  value, each key's first acceptable value) pass."""
  try:
    entry, category = bfcl_entry(reference)
    calls = []
    for answer in entry.ground_truth:
      (name, params), = answer.items()
      args = {param: _first_answer(values[0]) for param, values in params.items()
              if values[0] != bfcl.OPTIONAL}
      calls.append(bfcl.Call(name, args))
    return bfcl.check_calls(entry, calls, category) is None
  except Exception:  # pylint: disable=broad-except
    return False


def api_bank_score(response: str, reference: str) -> float:
  """1.0 when the response holds exactly the reference's API call (module doc)."""
  try:
    gold = apibank.single_call(reference)
  except (bfcl.DecodeError, RecursionError):
    return 0.0
  return float(apibank.score(gold, response).correct)


def api_bank_reference_ok(reference: str) -> bool:
  """The reference holds exactly one readable API call."""
  try:
    apibank.single_call(reference)
    return True
  except (bfcl.DecodeError, RecursionError):
    return False


def f1_score(response: str, reference: str) -> float:
  """SQuAD's word F1 of the response against the reference (`scoring.qa`)."""
  return qa.token_f1(response, [reference])


def squad_exact_score(response: str, reference: str) -> float:
  """1.0 iff the SQuAD-normalised response equals the normalised reference."""
  return qa.exact_match(response, [reference])


def contains_score(response: str, reference: str) -> float:
  """1.0 iff the normalised reference's words are a run of the normalised
  response's words."""
  got = qa.normalize_answer(response).split()
  want = qa.normalize_answer(reference).split()
  return float(bool(want) and any(got[i:i + len(want)] == want
                                  for i in range(len(got) - len(want) + 1)))


def words_reference_ok(reference: str) -> bool:
  """Whether the reference keeps a word after SQuAD normalisation."""
  return bool(qa.normalize_answer(reference))


# A number as chat models write one: a sign, digits with thousands commas
# (groups of three) or none, an optional decimal part. A comma not followed
# by three digits and a non-digit ends the number ("3, 4" is two numbers);
# so does a point not followed by a digit ("is 12."). A sign after a word
# or digit is an operator ("10-3" ends in 3).
_NUMBER = re.compile(r"(?:(?<![\w.])([-+\u2212]))?(?<![\d.])"
                     r"(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?")


def last_number(text: str) -> fractions.Fraction | None:
  """The value of the last number written in `text` (`_NUMBER`: "1,234",
  "-12", "−12", "+5", "3.50", "$1,200", "12kg"; a sentence's closing point is
  no decimal point), exactly; None when the text holds no number."""
  found = list(_NUMBER.finditer(text))
  if not found:
    return None
  sign, digits, decimals = found[-1].groups()
  value = fractions.Fraction(digits.replace(",", "") + (decimals or ""))
  return -value if sign in ("-", "\u2212") else value


def numeric_score(response: str, reference: str) -> float:
  """1.0 iff the response's last number equals the reference's (as numbers:
  "12.0" is 12), else 0.0; a response with no number scores 0."""
  got, want = last_number(response), last_number(reference)
  return float(got is not None and want is not None and got == want)


def numeric_reference_ok(reference: str) -> bool:
  """Whether the reference is exactly one number (surrounding space aside)."""
  match = _NUMBER.fullmatch(reference.strip())
  return match is not None


def final_answer_text(text: str, marker: str) -> str | None:
  """The rest of the line after the text's last `marker`, stripped; None without one."""
  at = text.rfind(marker)
  if at < 0:
    return None
  return text[at + len(marker):].split("\n", 1)[0].strip()


def last_boxed_text(text: str) -> str | None:
  """The text's last closed `\\boxed{...}`, wrapper included; None without one."""
  content = last_boxed(text)
  return None if content is None else _BOXED + content + "}"


def last_tool_call_text(text: str) -> str | None:
  """The text's last run of `<tool_call>` blocks, else its last bracketed call list
  that `scoring.bfcl.decode_calls` reads; None without either."""
  runs = list(_TOOL_CALL_RUN.finditer(text))
  if runs:
    return runs[-1].group(0).strip()
  end = text.rfind("]")
  start = text.rfind("[", 0, end)
  for _ in range(_MAX_LIST_STARTS):
    if start < 0:
      break
    candidate = text[start:end + 1]
    try:
      bfcl.decode_calls(candidate)
      return candidate
    except Exception:  # pylint: disable=broad-except
      # Not a call list (a list inside an argument, prose); try an earlier bracket.
      start = text.rfind("[", 0, start)
  return None


def answer_extractor(answer_from: str, marker: str, verifier: str
                     ) -> Callable[[str], str | None] | None:
  """How a host verifier reads the answer out of a response's text (see the
  module doc); None for `all` (the whole text).

  Raises:
    ValueError: an unknown `answer_from`, one the verifier cannot use (in-graph
      verifiers read `all` and `final_answer` only), or a blank marker.
  """
  if answer_from not in ANSWERS_FROM:
    raise ValueError(f"config.task.answer_from={answer_from!r}; expected one of "
                     f"{ANSWERS_FROM}")
  if verifier in IN_GRAPH_VERIFIERS and answer_from not in IN_GRAPH_ANSWERS:
    raise ValueError(f"config.task.answer_from={answer_from!r} needs a host verifier "
                     f"{HOST_VERIFIERS}; config.task.verifier={verifier!r} reads "
                     f"{IN_GRAPH_ANSWERS}")
  if answer_from == "final_answer" and not marker.strip():
    raise ValueError("config.task.answer_from='final_answer' needs a non-blank "
                     f"config.task.final_answer_marker, got {marker!r}")
  return {"all": None,
          "final_answer": lambda text: final_answer_text(text, marker),
          "last_boxed": last_boxed_text,
          "last_tool_call": last_tool_call_text}[answer_from]


class HostVerifier(NamedTuple):
  """A text scorer run on the host: score(response, reference) in [0, 1] and
  reference_ok(reference)."""

  score: Callable[[str, str], float]
  reference_ok: Callable[[str], bool]


HOST_SCORERS: dict[str, HostVerifier] = {
    "f1": HostVerifier(f1_score, words_reference_ok),
    "squad_exact": HostVerifier(squad_exact_score, words_reference_ok),
    "contains": HostVerifier(contains_score, words_reference_ok),
    "tool_call": HostVerifier(tool_call_score, tool_call_reference_ok),
    "boxed": HostVerifier(boxed_score, boxed_reference_ok),
    "bfcl": HostVerifier(bfcl_score, bfcl_reference_ok),
    "api_bank": HostVerifier(api_bank_score, api_bank_reference_ok),
    "numeric": HostVerifier(numeric_score, numeric_reference_ok),
}


def content_ids(row: np.ndarray, mask: np.ndarray, eos_id: int,
                vocab_size: int) -> list[int] | None:
  """Host-side: the ids of one row before its first EOS inside the mask (ids outside
  the vocabulary dropped); None when the mask holds no EOS."""
  row = np.asarray(row)
  mask = np.asarray(mask, bool)
  ends = np.flatnonzero((row == eos_id) & mask)
  if not ends.size:
    return None
  ids = row[:ends[0]][mask[:ends[0]]]
  return [int(i) for i in ids if 0 <= i < vocab_size]


def _score_rows(verifier: HostVerifier, decode: Callable[[Sequence[int]], str],
                eos_id: int, vocab_size: int, extract, response, response_mask,
                reference, reference_mask) -> np.ndarray:
  scores = np.zeros(response.shape[0], np.float32)
  for i in range(response.shape[0]):
    got = content_ids(response[i], response_mask[i], eos_id, vocab_size)
    want = content_ids(reference[i], reference_mask[i], eos_id, vocab_size)
    if got is None or not want:
      continue
    try:
      answer = decode(got) if extract is None else extract(decode(got))
      if answer is None:
        continue
      scores[i] = min(max(float(verifier.score(answer, decode(want))), 0.0), 1.0)
    except Exception:  # pylint: disable=broad-except
      # A scorer failure on garbage is a 0.
      scores[i] = 0.0
  return scores


def _check_rows(verifier: HostVerifier, decode: Callable[[Sequence[int]], str],
                eos_id: int, vocab_size: int, reference, reference_mask) -> np.ndarray:
  ok = np.zeros(reference.shape[0], bool)
  for i in range(reference.shape[0]):
    want = content_ids(reference[i], reference_mask[i], eos_id, vocab_size)
    if not want:
      continue
    try:
      ok[i] = bool(verifier.reference_ok(decode(want)))
    except Exception:  # pylint: disable=broad-except
      ok[i] = False
  return ok


def host_scores(verifier: HostVerifier, decode: Callable[[Sequence[int]], str],
                eos_id: int, vocab_size: int, response: jax.Array,
                response_mask: jax.Array, reference: jax.Array,
                reference_mask: jax.Array,
                extract: Callable[[str], str | None] | None = None) -> jax.Array:
  """Scores responses with a host verifier, callable inside jit.

  Args:
    verifier: the HostVerifier.
    decode: token ids -> text (the tokenizer's decode).
    eos_id, vocab_size: the end token; ids at or above vocab_size are dropped.
    response: int32[M, R]; response_mask: bool[M, R].
    reference: int32[M, R']; reference_mask: bool[M, R'].
    extract: response text -> the answer text scored (None: a 0), from
      `answer_extractor`; None scores the whole response.

  Returns:
    float32[M] in [0, 1].
  """
  def score(*arrays):
    return _score_rows(verifier, decode, eos_id, vocab_size, extract,
                       *(np.asarray(a) for a in arrays))

  def on_rows(*arrays):
    return jax.pure_callback(
        score, jax.ShapeDtypeStruct((arrays[0].shape[0],), jnp.float32),
        *arrays, vmap_method="sequential")

  return sharding.rows_per_device(
      on_rows, jnp.asarray(response, jnp.int32),
      jnp.asarray(response_mask, bool), jnp.asarray(reference, jnp.int32),
      jnp.asarray(reference_mask, bool))


def host_reference_ok(verifier: HostVerifier, decode: Callable[[Sequence[int]], str],
                      eos_id: int, vocab_size: int, reference: jax.Array,
                      reference_mask: jax.Array) -> jax.Array:
  """bool[M]: which references the host verifier can check, callable inside jit."""
  def check(*arrays):
    return _check_rows(verifier, decode, eos_id, vocab_size,
                       *(np.asarray(a) for a in arrays))

  def on_rows(*arrays):
    return jax.pure_callback(
        check, jax.ShapeDtypeStruct((arrays[0].shape[0],), jnp.bool_),
        *arrays, vmap_method="sequential")

  return sharding.rows_per_device(
      on_rows, jnp.asarray(reference, jnp.int32),
      jnp.asarray(reference_mask, bool))
