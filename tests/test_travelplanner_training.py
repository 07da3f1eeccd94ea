"""The TravelPlanner domain: specs and their validity by the annotated plan,
the held-out split, the episode's score against the benchmark's scorer, and
the smoke config's co-evolution steps compiled once, on the fixture
`scoring.travelplanner.write_fixture` writes (train and validation)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from configs import travelplanner as travelplanner_config
from genenv_jax.domains import get_domain
from genenv_jax.domains.travelplanner import data
from genenv_jax.domains.travelplanner import domain as tpd
from genenv_jax.scoring import travelplanner as tp
from tests import step_runs


@pytest.fixture(scope="module")
def config(qwen_tokenizer_dir, tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("travelplanner"))
  for split in ("train", "validation"):
    tp.write_fixture(data_dir, split)
  config = travelplanner_config.get_config("smoke")
  config.task.update(tokenizer_dir=qwen_tokenizer_dir, data_dir=data_dir)
  return config


@pytest.fixture(scope="module")
def domain(config):
  return get_domain(config.task)


def _spec(split="train", id_=1, people=2, budget=2000, house_rule="-", cuisine="-",
          room_type="-", transportation="-"):
  return (f"query: {split} {id_}\npeople: {people}\nbudget: {budget}\n"
          f"house rule: {house_rule}\ncuisine: {cuisine}\nroom type: {room_type}\n"
          f"transportation: {transportation}")


def _parse(domain, written):
  """(valid, difficulty, the agent's prompt text) of `written` as the
  simulator's generation, through `parse_row`."""
  ids = domain.tokenizer(written, add_special_tokens=False)["input_ids"]
  row = np.full(domain.simulator_len, domain.pad_id, np.int32)
  row[:len(ids) + 1] = ids + [domain.eos_id]
  packed = domain.parse_row(row, row != domain.pad_id)
  prompt = packed[:domain.agent_prompt_len]
  return bool(packed[-2]), int(packed[-1]), domain.tokenizer.decode(
      prompt[prompt != domain.pad_id])


def test_specs_read_back_and_name_the_bad_field():
  spec = tpd.read_spec("Let me vary it.\n" + _spec(cuisine="mexican, Italian",
                                                    budget="$2,400"))
  assert spec == tpd.Spec("train", 1, 2, 2400, None, ("Mexican", "Italian"), None, None)
  assert tpd.read_spec(spec.text()) == spec
  assert tpd.read_spec(spec.text().title()) == spec  # "Query: Train 1", "People: 2"
  for written, message in (
      ("people: 2", "no line starts 'query:'"),
      (_spec().replace("budget: 2000\n", ""), "no 'budget' line"),
      (_spec() + "\npeople: 3", "'people' is written twice"),
      (_spec(people=0), r"people: 0 is not in 1..8"),
      (_spec(budget="lots"), "budget: 'lots' is not a whole number"),
      (_spec(house_rule="cats"), "house rule: 'cats' is not one of"),
      (_spec(split="test"), "is not '<split> <row>'"),
      (_spec(cuisine="Chinese; Thai"), "not a cuisine's name")):
    with pytest.raises(tpd.SpecError, match=message):
      tpd.read_spec(written)


def test_a_variation_is_valid_iff_its_annotated_plan_passes_it(domain):
  # Train query 1 (Sarasota -> Chattanooga, 3 days); its plan stays at the
  # Cozy Riverfront Loft (entire home, "No smoking"), flies both ways and
  # eats at Little Olive Trattoria (Italian): for 2 people it costs
  # 2 x (210 + 190) + 2 x (20 + 35 + 15 + 30 + 45) + 2 nights x 180 = 1,450.
  cases = [
      (_spec(budget=1450), True, 1),
      (_spec(budget=1449), False, 0),
      (_spec(people=1, budget=905), True, 1),
      (_spec(house_rule="parties", room_type="entire room"), True, 3),
      (_spec(house_rule="smoking"), False, 0),
      (_spec(room_type="shared room"), False, 0),
      (_spec(transportation="no flight"), False, 0),
      (_spec(transportation="no self-driving", cuisine="Italian"), True, 3),
      (_spec(cuisine="Thai"), False, 0),
      (_spec(id_=4), False, 0),
      (_spec(split="validation", id_=2, people=2, budget=1200, house_rule="pets",
             room_type="entire room"), True, 3),
      (_spec(split="validation", id_=2, people=2, budget=1300, house_rule="pets",
             room_type="entire room"), False, 0),
      ("query: train 1\npeople: two", False, 0),
      ("", False, 0),
  ]
  for written, valid, level in cases:
    assert _parse(domain, written)[:2] == (valid, level), written
  _, _, prompt = _parse(domain, _spec(people=3, budget=2500, cuisine="Italian"))
  assert ("Query: Please plan a 3-day trip for 3 people from Sarasota to "
          "Chattanooga, March 10th, 2022 to March 12th, 2022, with a budget of "
          "$2,500. We would like to try Italian cuisine.") in prompt
  assert "Little Olive Trattoria" in prompt  # the query's reference information
  with pytest.raises(tpd.SpecError, match=r"budget \(costs 1450, over the budget 1449\)"):
    domain.read_task(_spec(budget=1449))


def test_seeds_are_the_train_queries_and_the_held_out_set_the_validation_ones(
    config, domain):
  splits = data.travelplanner_splits(domain)
  assert splits["train"].ids == (1, 2, 3) and splits["test"].ids == (1, 2, 3)
  # Levels: 1 + constraints + (days - 3) / 2. Train: parties; pets + entire
  # room; cuisine + no flight over 5 days. Validation: none; the same two; the
  # same two over 5 days.
  assert splits["train"].difficulty.tolist() == [2, 3, 4]
  assert splits["test"].difficulty.tolist() == [1, 3, 4]
  for name, split in (("train", "train"), ("test", "validation")):
    for row, query in zip(splits[name].rows, domain.queries[split]):
      trip, spec = domain.text_of(row).split("\n", 1)
      assert spec == tpd.spec_of(query, split).text()
      assert trip == tpd.trip_line(query, tpd.spec_of(query, split))
  # The simulator reads what the query is and what its plan costs (train
  # query 1 for 2 people, as above); a held-out query shows no plan.
  assert domain.text_of(splits["train"].rows[0]).split("\n")[0] == (
      "trip: 3 days from Sarasota to Chattanooga, March 10th, 2022 to March "
      "12th, 2022; its annotated plan costs $1,450 for 2 people")
  assert "plan" not in domain.text_of(splits["test"].rows[0]).split("\n")[0]
  train, test = data.seed_splits(domain, config, "")
  np.testing.assert_array_equal(train["task"], splits["train"].rows)
  np.testing.assert_array_equal(test["difficulty"], [1, 3, 4])
  # A train query that is a validation query is never a seed.
  queries = domain.queries["train"]
  domain.queries["train"] = [queries[0]._replace(
      query=domain.queries["validation"][1].query)] + queries[1:]
  try:
    assert data.travelplanner_splits(domain)["train"].ids == (2, 3)
  finally:
    domain.queries["train"] = queries


def _plan_text(plan):
  names = {"current_city": "Current City", "transportation": "Transportation",
           "breakfast": "Breakfast", "attraction": "Attraction", "lunch": "Lunch",
           "dinner": "Dinner", "accommodation": "Accommodation"}
  return "\n\n".join(f"Day {i}:\n" + "\n".join(f"{names[f]}: {day[f]}" for f in tp.FIELDS)
                     for i, day in enumerate(plan, start=1))


def _play(domain, written, reply, stop=True):
  row = domain.encode_tasks([written])[0]
  ids = domain.tokenizer(reply, add_special_tokens=False)["input_ids"]
  action = np.asarray(ids + ([domain.eos_id] if stop else []), np.int32)
  return domain.environment.host.transition(row, [action])


def test_an_episode_scores_the_plan_as_the_benchmark_does(domain):
  validation = domain.queries["validation"]
  own = tpd.spec_of(validation[1], "validation").text()  # pets, entire room
  plan = tp._fixture_plans()[1]  # pylint: disable=protected-access
  step = _play(domain, own, _plan_text(plan))
  assert step.done and step.success and step.reward == 1.0
  assert not step.invalid_action and len(step.observation) == 0
  # The same plan at the Garden Cottage ("No pets"): the room rule fails, the
  # other 8 commonsense constraints, the budget and the room type pass.
  cottage = [dict(d, accommodation=d["accommodation"].replace("Riverview Bungalow",
                                                               "Garden Cottage"))
             for d in plan]
  evaluation, verdict = tp.score(validation[1], _plan_text(cottage))
  assert verdict.status == tp.INCORRECT and "room_rule" in verdict.reason
  step = _play(domain, own, _plan_text(cottage))
  assert not step.success and step.reward == pytest.approx(10 / 11)
  assert step.reward == tpd.constraint_share(validation[1], evaluation)
  # No plan: no reward; a reply without its stop token is an invalid action.
  step = _play(domain, own, "I cannot plan this trip.", stop=False)
  assert step.done and not step.success and step.reward == 0.0 and step.invalid_action


def test_the_smoke_config_runs_two_coevolution_steps_with_one_compile(config, domain):
  train, _ = data.seed_splits(domain, config, "")
  players, state, shardings, mesh = step_runs.start(config, domain, train["task"],
                                                    train["difficulty"])
  _, history, traces = step_runs.run_steps(config, domain, players, state,
                                           shardings, mesh, 2)
  assert traces == 1 and len(history) == 2
  generated = config.coevolve.num_seeds * config.coevolve.variations
  for metrics in history:
    for name, value in metrics.items():
      assert np.isfinite(value), name
    assert metrics["episode/errors"] == 0.0
    assert metrics["episode/turns"] == 1.0
    # The random simulator writes no spec; its generations were read on the host.
    assert metrics["env/invalid_count"] == generated
  assert domain.environment.host_errors == 0


def test_the_configs_validate_and_name_a_missing_data_dir(config):
  from train import config_validation  # pylint: disable=import-outside-toplevel
  config_validation.validate(config, 8)
  for variant in (None, "smoke,frozen_env"):
    other = travelplanner_config.get_config(variant)
    other.task.data_dir = config.task.data_dir
    config_validation.validate(other, 8)
  with pytest.raises(ValueError, match="task.data_dir"):
    config_validation.validate(travelplanner_config.get_config("smoke"), 8)


def test_the_download_command_names_the_data_dir(tmp_path, monkeypatch, capsys):
  # Offline: the files are placed in the cache by hand; the command checks
  # them in (their SHA-256 recorded) and prints the directory the config needs.
  from train.tools import bench_download  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("GENENV_CACHE", str(tmp_path))
  root = tmp_path / "benchmarks" / "travelplanner"
  for split in ("train", "validation"):
    tp.write_fixture(str(root), split)
  bench_download.main(["travelplanner"])
  assert capsys.readouterr().out.strip() == str(root)
  assert sorted(json.loads((root / "checksums.json").read_text())) == [
      "train.csv", "train_ref_info.jsonl", "validation.csv",
      "validation_ref_info.jsonl"]
  with pytest.raises(SystemExit):
    bench_download.main(["travelplanner", "--splits=dev"])
