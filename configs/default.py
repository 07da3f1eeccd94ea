"""The CPU demo: GenEnv co-evolution on multi-digit addition, end to end.

Run (installs into .venv on first use):
  ./launch/local.sh
  ./launch/local.sh --workdir=runs/alpha03 --config.curriculum.alpha=0.3
or directly:
  python -m train.main --config=configs/default.py --workdir=runs/default
A baseline arm (ARMS below), optionally with the smoke sizes:
  python -m train.main --config=configs/default.py:frozen_env --workdir=runs/frozen
  python -m train.main --config=configs/default.py:smoke,frozen_env --workdir=/tmp/f
The smoke sizes with both players learning in stage 2 (the tests' end-to-end runs):
  python -m train.main --config=configs/default.py:live --workdir=/tmp/live

Stage 1 warm-starts both players by supervised learning on seed tasks from the
`arithmetic_tasks` tensorflow-datasets builder: the agent on easy tasks only,
the simulator on tasks of every difficulty. Stage 2 runs co-evolution: the
simulator writes tasks, the agent attempts them, the α-curriculum reward
trains the simulator (RWR) and GRPO trains the agent.

Every field the paper leaves open is a field here, with the default chosen.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """arg: comma-separated variants: at most one size, "smoke" (a seconds-long
  run with tiny models) or "live" (the smoke sizes, warm-started long enough
  that both players learn in stage 2), and at most one arm of the baseline
  comparison (a name in ARMS), e.g. "frozen_env" or "live,frozen_env". None
  or "": the demo."""
  size, arm = _parse_variants(arg)
  c = ml_collections.ConfigDict()
  c.arm = ""  # the ARMS entry applied ("" = none: the fields as set here)
  c.seed = 0
  # Mesh axes (data, fsdp, tensor); -1 takes the remaining devices. On CPU
  # (one device per core), players whose weights outgrow a core's cache step
  # faster with the weights split, e.g. data=-1, tensor=2
  # (docs/performance.md, "Devices and layouts").
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  # XLA:CPU devices the run shows (0: one per core, up to 8; set before JAX
  # starts, an XLA_FLAGS device count wins; other backends ignore it).
  c.cpu_devices = 0

  c.task = ml_collections.ConfigDict(dict(
      name="arithmetic",
      max_digits=5,          # difficulty levels 1..5 (digits of the longer operand)
      reverse_answer=True,   # the agent writes the sum least-significant digit first
      reward="exact",        # agent reward: "exact" or "digits" (partial credit);
                             # success (for p̂) is always the exact answer
      # True: the agent reads both operands zero-padded to max_digits digits.
      # Its warm-start then learns the harder levels far better and the
      # difficulty climbs faster, but the success rate holds the α band less
      # often and the agent's held-out gains stay as small; so off by default
      # (measurements: docs/configuration.md, "Zero-padded operands").
      pad_operands=False,
  ))
  c.data = ml_collections.ConfigDict(dict(
      tfds_dir="",           # "" = <workdir>/tfds
      num_train=20000,       # seed tasks, uniform over difficulty
      num_test_per_level=200,
  ))
  # The seed data follows the run's seed (a derived reference: --config.seed=N
  # moves it too; --config.data.seed=K alone fixes the data while the
  # initialisation, warm-start and sampling follow the seed).
  c.data.seed = c.get_ref("seed") + 0

  def player(learning_rate):
    return ml_collections.ConfigDict(dict(
        model="demo",        # a models.config preset; vocab comes from the task
        hf_dir="",           # or an HF checkpoint directory (its config and weights)
        model_overrides=ml_collections.ConfigDict(),
        learning_rate=learning_rate,
        weight_decay=0.0,
        b1=0.9,
        b2=0.99,
        grad_clip=1.0,
        # Low-rank adapters (models/lora.py): rank 0 trains every weight; a
        # rank r > 0 trains rank-r adapters on `targets` (comma-separated
        # projections) alone, scaled by alpha / r, the base frozen and the
        # reference policy the base with the adapters off.
        lora=ml_collections.ConfigDict(dict(
            rank=0, alpha=16.0,
            targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")),
    ))

  # Agent lr 1e-4 with GRPO KL 0.05 (grpo.kl_coef): the pre-registered
  # experiment's pilot (docs/experiment.md) found these learn the frontier
  # levels within the demo's steps while the KL term holds the levels the
  # warm-start knew; lr 3e-4 loses held-out accuracy on every level, and 3e-5
  # with KL 0.001 barely moves the agent (docs/demo.md).
  c.agent = player(1e-4)
  # Simulator lr: a faster simulator makes the success rate oscillate around
  # α; 1e-4 settles (docs/configuration.md, "Learning rates").
  c.simulator = player(1e-4)

  c.warmstart = ml_collections.ConfigDict(dict(
      # Addition is learned in a sudden transition; 2000 steps at lr 1e-3 let
      # co-evolution start, at every seed tried, from an agent that knows the
      # base data's levels and has a frontier above them (at 1200 seeds 1
      # and 2 had not passed the transition: docs/configuration.md,
      # "Warm-start length").
      agent_steps=2000,
      simulator_steps=200,
      batch_size=128,
      # A run directory whose step-0 checkpoint (warm-started players, pools)
      # this run starts stage 2 from instead of warm-starting; its config must
      # agree on every field that shapes step 0. "" = warm-start here.
      init_from="",
      learning_rate=1e-3,
      # Share of each level (1..max_digits) in the agent's lessons: mostly easy
      # tasks, a few harder ones, none of the hardest.
      agent_level_weights=(8, 4, 2, 1, 0),
      simulator_difficulty_step=1,   # simulator lessons: seed of level d -> task of level d±1
      # Each lesson's target: "drawn" (a seed-data task of that level) or
      # "edited" (the seed itself, edited to that level: mazes only).
      simulator_lessons="drawn",
      checkpoint_every=200,  # warm-start steps between its checkpoints (0: none)
      # Where the simulator starts co-evolution: "matched" (its lessons above),
      # or "hard" / "easy": after them, simulator_start_steps more lessons
      # whose target level is the seed's + simulator_start_offsets[name]
      # (± simulator_difficulty_step), so it writes tasks the agent solves
      # rarely / almost always (docs/experiment.md gives the measured rates).
      simulator_start="matched",
      simulator_start_steps=200,
      simulator_start_offsets=ml_collections.ConfigDict(dict(hard=2, easy=-1)),
  ))

  c.coevolve = ml_collections.ConfigDict(dict(
      # 960 steps: the agent's held-out gains on its frontier levels take
      # several hundred steps to show task by task, and the demo stays under
      # 10 minutes on a 2-core CPU (docs/demo.md).
      num_steps=960,
      num_seeds=8,           # S seed tasks per step
      variations=4,          # m tasks written per seed
      attempts=10,           # G agent attempts per task (p̂ ∈ {0, .1, ..., 1})
      agent_temperature=1.0,
      simulator_temperature=1.0,
      agent_epochs=1,
      agent_minibatches=2,
      # "online": the simulator writes each step's tasks from seeds of D_train;
      # "static": the frozen warm-started simulator writes them from base-data
      # seeds, so they form one fixed dataset independent of the agent;
      # scripted, no simulator (genenv_jax/scripted.py): "uniform" draws each
      # task's level uniformly, "oracle_learnability" ∝ p_l(1 - p_l) of the
      # agent's recent success p_l at level l; either takes tasks of that
      # level from a bank of seed-dataset tasks.
      generation="online",
      scripted_bank_per_level=1024,  # seed tasks per level in that bank
      # oracle_learnability: share of its level draw that stays uniform, so
      # levels it neglects keep being measured.
      oracle_explore=0.1,
      # η of the per-level success estimate (every arm keeps it; logged as
      # agent/level_success_d<l>): p_l <- (1 - η) p_l + η s_l, s_l the
      # step's success at level l. 0.2: about the last 5 steps.
      level_success_ema=0.2,
      # Weights for decoding, laid out once per step: "gathered" (whole over
      # the fsdp mesh axis: no weight gathers inside the decode loop) or
      # "training" (decode reads the fsdp-sharded training layout).
      sampling_layout="gathered",
      # Decode loop parts (genenv_jax/sampling.py, SamplingConfig): part k
      # of K attends to the prompt and the first (k + 1)/K of the generation
      # slots, so early tokens read less of the KV cache; each part is
      # compiled on its own. 1: one loop over every slot.
      decode_windows=1,
      # Each prompt's keys and values held once and read by its samples (the
      # simulator's m variations, the agent's G attempts) rather than copied
      # into each sample's cache: the same tokens, a cache of P + N slots a
      # prompt plus N a sample instead of P + N a sample
      # (genenv_jax/sampling.py). Episodes keep a cache a row.
      share_prompt_cache=True,
      # How seeds are drawn from D_train: "uniform"; "learnability": ∝
      # p(1 - p) of the agent's recorded success p on each row (+
      # pool.learnability_floor), so the simulator writes variations of the
      # tasks the agent is learning rather than of ones it always or never
      # solves (the curate-then-edit of ACCEL; genenv_jax/pool.py); or
      # "level_learnability": ∝ p_l(1 - p_l) of its recent success p_l at
      # the row's level (agent/level_success_d<l>), which follows the agent
      # where a row's success is measured once; or "level_alpha": ∝ the
      # α-curriculum reward exp(-β (p_l - α)²) of that level estimate, seeds
      # curated by the simulator's own reward (sharper than p(1 - p)).
      seed_selection="learnability",
      # The per-level success the level selections of seeds read (see
      # genenv_jax/coevolve.py:seed_level_estimate): "attempted" (the
      # agent's success on tasks of that level) or "offspring" (on the tasks
      # written from seeds of that level; agent/offspring_success_d<l>).
      seed_level_estimate="attempted",
      seed_trim=0.0,         # > 0 (uniform seeds only): seeds skip this
                             # fraction of the lowest- and of the
                             # highest-scoring rows (by agent success)
      # Stage 2's own random stream: runs that start from one warm-start
      # (warmstart.init_from, whose step 0 holds the rng) and differ in
      # rl_seed are replicates paired by that warm-start. 0: the step-0
      # rng as it is.
      rl_seed=0,
  ))

  # The α-curriculum (paper: α = 0.5, k_min = 0.1, λ = 1; β not given).
  c.curriculum = ml_collections.ConfigDict(dict(
      # Target success rate of generated tasks; at 0.5 the expected squared
      # policy-gradient norm of a binary reward, ∝ p(1-p), peaks.
      alpha=0.5,
      # β in R_env = exp(-β (p̂ - α)²). The public config's 2.0 (read by
      # nothing) makes R_env span only [0.61, 1] over p̂ ∈ [0, 1] and
      # [0.98, 1] in the band, so RWR weights exp(λ R_env) barely differ. At
      # 20: R(α) = 1, R(α ± 0.1) = 0.82 (band edge), R(α ± 0.19) ≈ 0.5,
      # R(0) = R(1) = e^-5 when α = 0.5.
      beta=20.0,
      band=0.1,              # k_min: the band |p̂ - α| <= band
      # Which valid tasks enter the simulator update, each weighted by its
      # reward: "band" (the paper's filter, under every reward, so the
      # reward arms differ from genenv only in their RWR weights among the
      # same kept tasks), "informative" (0 < p̂ < 1: the tasks whose
      # attempts disagree, i.e. that carry a GRPO signal) or "valid" (all).
      keep="band",
      rwr_temperature=1.0,   # λ in the RWR weights exp(λ R_env)
      # A name of genenv_jax/curriculum.py's REWARDS: "alpha" (GenEnv) |
      # "uncertainty" 1 - 2|p̂ - ½| (R-Zero) | "learnability" 1 - p̂ if
      # 0 < p̂ < 1 else 0 (Absolute Zero) | "variance" p̂(1 - p̂) (No Regrets).
      reward="alpha",
      # R-Zero's repetition penalty, under any reward: a task's R_env less
      # λ |C| / B (floored at 0), |C| the valid tasks of the batch whose
      # token-bigram overlap with it is >= repetition_similarity (itself
      # included), B the valid tasks (curriculum.repetition_penalty). 0: off.
      repetition_penalty=0.0,
      repetition_similarity=0.5,
      per_seed=True,         # p̂ pooled over a seed's m variations (m·G attempts, the
                             # paper's per-batch count) rather than per task (G)
      success_threshold=1.0,  # an attempt succeeds when its reward >= this
  ))

  # Agent GRPO (paper gives none of these; public config values).
  c.grpo = ml_collections.ConfigDict(dict(
      clip_low=0.2,
      clip_high=0.2,
      kl_coef=0.05,          # to the warm-started agent (see c.agent above)
      kl_estimator="k3",
      entropy_coef=0.0,
      aggregation="token",
      # The policy-gradient term's normaliser: "all" response tokens, or
      # "informative": only those of rows with a nonzero advantage (groups
      # whose attempts disagree), so the KL term keeps its weight against
      # the signal however few groups carry one.
      pg_normalizer="informative",
      # False: advantages r - mean_group (no division by the group's std),
      # so one odd attempt in a near-solved group gets -0.9, not -3.
      normalize_std=False,
      # DAPO's dynamic sampling at fixed shapes: K > 0 trains on K of the
      # step's task groups, those whose attempts disagree first (the others
      # masked), so more tasks can be sampled than updated on; 0: all.
      dynamic_sampling_groups=0,
  ))

  # Simulator update (paper: RWR, KL to the initial simulator, KL cap; the
  # coefficient, cap and estimator are not given).
  c.simulator_update = ml_collections.ConfigDict(dict(
      method="rwr",          # "rwr" | "pg" | "none" (frozen simulator)
      kl_coef=1.0,
      kl_estimator="k3",
      kl_cap=0.02,           # largest KL(before || after) of one update; <= 0: no cap
      # PG's baseline: "batch" (the mean R_env over the step's valid
      # generations) or "seed" (the mean over each seed's variations, GRPO
      # style). With curriculum.per_seed every variation of a seed shares its
      # R_env, so only "batch" leaves a nonzero advantage; "seed" needs
      # per_seed=False (R_env from each task's own p̂), and the pair
      # (seed, per_seed=True) is refused.
      pg_baseline="batch",
      # PG's advantages divided by their group's std, and its
      # policy-gradient term over "all" generated tokens or the
      # "informative" rows' (as grpo.normalize_std, grpo.pg_normalizer).
      pg_normalize_std=True,
      pg_normalizer="all",
      # Share in [0, 1) of the RWR batch drawn from D_env (kept generations
      # of earlier steps, weighted by their stored R_env) beside the step's
      # own M generations: round(M·share / (1 - share)) rows. 0: the step's
      # generations only.
      replay_share=0.0,
  ))

  c.pool = ml_collections.ConfigDict(dict(
      capacity=8192,         # D_train rows (base data + generated tasks)
      num_base=2048,         # base rows taken from the seed dataset ...
      base_max_difficulty=2,  # ... among its tasks up to this level (the agent's base data)
      replay_tasks=8,        # pool tasks the agent also attempts each step
      # How they are drawn: "uniform", "learnability", "level_learnability"
      # or "level_alpha" (as coevolve.seed_selection); either way each
      # replayed row's recorded success is updated.
      replay_selection="learnability",
      # Under learnability selection every filled row weighs p(1 - p) + this
      # (> 0): rows never attempted (the base data at first) weigh it alone.
      learnability_floor=0.01,
      generation_capacity=2048,     # D_env rows (kept generations)
      keep_generated="all",  # "all" valid generated tasks | "latest" step's only
      # Which fresh tasks enter D_train: "valid" (all) | "informative" (those
      # whose attempts disagree, 0 < p̂ < 1: the seeds of later steps).
      admit="valid",
  ))

  c.eval = ml_collections.ConfigDict(dict(
      every_steps=40,     # held-out accuracy per difficulty (greedy)
      # > 0: also the sampled success rate of this many answers per held-out
      # task (eval/sampled_success_d<l>), which moves before greedy accuracy;
      # each evaluation pairs it per task with the step-0 agent's
      # (train/heldout.py: eval/sampled_gain_*, eval/frontier_sampled_gain*).
      samples=8,
  ))
  c.log_every = 5           # each logged step metric is its mean over these steps
  c.checkpoint_every = 40
  c.max_checkpoints = 2
  # Updates skipped for a non-finite loss or gradient norm that a run
  # tolerates per player (counted from its start or resume); one more stops it
  # before its next checkpoint.
  c.max_skipped_updates = 10
  c.profile_first_step = 0  # > 0: a jax.profiler trace of 3 steps from this step
  if size:
    _SIZES[size](c)
  return with_arm(c, arm)


def with_arm(c: ml_collections.ConfigDict, arm: str) -> ml_collections.ConfigDict:
  """`c` with the baseline arm `arm` (a name in ARMS; "" none) applied and
  named in c.arm."""
  if arm:
    ARMS[arm](c)
    c.arm = arm
  return c


def smoke_and_arm(arg: str | None, config_file: str, full_run: str
                  ) -> tuple[bool, str]:
  """For a config whose sizes are the `full_run` (no size named) and "smoke":
  (whether `arg`, its get_config arg read as here, names "smoke", the arm it
  names or ""); a ValueError naming `config_file` for any other size."""
  size, arm = _parse_variants(arg)
  if size not in ("", "smoke"):
    raise ValueError(f"{config_file}: variant {size!r}; its sizes are the "
                     f"{full_run} (none) and 'smoke'.")
  return size == "smoke", arm


def _parse_variants(arg: str | None) -> tuple[str, str]:
  """(size name or "", arm name or "") of a get_config arg such as
  "smoke,frozen_env"."""
  names = [n.strip() for n in (arg or "").split(",") if n.strip()]
  unknown = [n for n in names if n not in _SIZES and n not in ARMS]
  if unknown:
    raise ValueError(
        f"configs/default.py: unknown variant(s) {unknown} in arg {arg!r}; "
        f"expected a size of {sorted(_SIZES)} and/or one arm of {sorted(ARMS)}.")
  arms = [n for n in names if n in ARMS]
  sizes = [n for n in names if n in _SIZES]
  if len(arms) > 1 or len(sizes) > 1:
    raise ValueError(
        f"configs/default.py: arg {arg!r} names {names}; expected at most "
        f"one size of {sorted(_SIZES)} and one arm.")
  return (sizes[0] if sizes else ""), (arms[0] if arms else "")


def _shrink_to_smoke(c: ml_collections.ConfigDict) -> None:
  """Tiny players and batches: exercises every stage in seconds (tests, CI)."""
  c.task.max_digits = 2
  c.warmstart.agent_level_weights = (2, 1)
  c.data.num_train = 400
  c.data.num_test_per_level = 20
  for player in (c.agent, c.simulator):
    player.model_overrides = ml_collections.ConfigDict(dict(
        num_layers=1, hidden_size=32, intermediate_size=64, num_heads=2,
        num_kv_heads=1))
  c.warmstart.update(agent_steps=4, simulator_steps=4, simulator_start_steps=4,
                     batch_size=16, checkpoint_every=2)
  c.coevolve.update(num_steps=4, num_seeds=4, variations=2, attempts=4,
                    agent_minibatches=2)
  c.pool.update(capacity=256, num_base=64, replay_tasks=4, generation_capacity=32)
  c.eval.update(every_steps=2, samples=0)
  c.log_every = 1
  c.checkpoint_every = 2


def _shrink_to_live(c: ml_collections.ConfigDict) -> None:
  """The smoke sizes, with a stage 1 long enough that stage 2 trains both
  players at every step: the simulator writes well-formed tasks, the agent
  solves a few (nonzero GRPO advantages), and the band sits where its success
  rate is, so kept tasks update the simulator. Tests compare runs on it
  (resume, fallback, kills, processes, meshes)."""
  _shrink_to_smoke(c)
  for player in (c.agent, c.simulator):
    player.model_overrides.num_kv_heads = 2  # split by a tensor=2 mesh
  c.warmstart.update(agent_steps=200, simulator_steps=200, learning_rate=3e-3,
                     checkpoint_every=100)
  # The tiny agent solves about 5% of the tasks it is given: α = 0.1 keeps
  # seeds whose p̂ is 0 or 1/8 (of m·G = 8 attempts).
  c.curriculum.alpha = 0.1
  # Fast enough that a few steps change some held-out answers.
  c.agent.learning_rate = 1e-3
  c.eval.samples = 4  # the paired sampled-success statistics, exercised


_SIZES = {"smoke": _shrink_to_smoke, "live": _shrink_to_live}


# Arms of the baseline comparison, all with the same agent, warm-start and
# agent rollouts: each entry sets the fields that make its arm.


def _frozen_simulator(c: ml_collections.ConfigDict) -> None:
  """No simulator update (and so no D_env replay in one)."""
  c.simulator_update.method = "none"
  c.simulator_update.replay_share = 0.0


def _arm_genenv(c: ml_collections.ConfigDict) -> None:
  """The full method: RWR simulator on the α reward, band filter, KL to the
  initial simulator."""
  c.simulator_update.method = "rwr"
  c.curriculum.reward = "alpha"


def _arm_genenv_pg(c: ml_collections.ConfigDict) -> None:
  """The simulator trained by policy gradient on R_env instead of RWR (its
  baseline: simulator_update.pg_baseline)."""
  c.simulator_update.method = "pg"
  c.simulator_update.replay_share = 0.0  # D_env replay is RWR's
  c.curriculum.reward = "alpha"


def _arm_genenv_replay(c: ml_collections.ConfigDict) -> None:
  """genenv whose RWR batch is half D_env: the step's generations plus as
  many replayed from earlier steps, weighted by their stored R_env."""
  c.simulator_update.method = "rwr"
  c.curriculum.reward = "alpha"
  c.simulator_update.replay_share = 0.5


def _arm_frozen_env(c: ml_collections.ConfigDict) -> None:
  """The warm-started simulator writes tasks online but is never updated."""
  _frozen_simulator(c)


def _arm_static(c: ml_collections.ConfigDict) -> None:
  """The agent trains on a fixed dataset written once by the frozen
  warm-started simulator, as many tasks as the online arms see."""
  _frozen_simulator(c)
  c.coevolve.generation = "static"


def _arm_uniform(c: ml_collections.ConfigDict) -> None:
  """Scripted control, no simulator: each task's level drawn uniformly,
  tasks of that level from the seed dataset (domain randomisation)."""
  _frozen_simulator(c)
  c.coevolve.generation = "uniform"


def _arm_oracle_learnability(c: ml_collections.ConfigDict) -> None:
  """Scripted control, no simulator: each task's level drawn ∝ p_l(1 - p_l)
  of the agent's recent success per level (the curriculum the simulator
  tries to learn, given for free), tasks of that level from the seed
  dataset."""
  _frozen_simulator(c)
  c.coevolve.generation = "oracle_learnability"


def _arm_reference_code(c: ml_collections.ConfigDict) -> None:
  """What the public reference code does: a frozen simulator, seeds that skip
  the 10% lowest- and highest-scoring rows, and an agent pool of the base data
  plus the latest generation only."""
  _frozen_simulator(c)
  c.coevolve.seed_selection = "uniform"
  c.coevolve.seed_trim = 0.1
  c.pool.replay_selection = "uniform"
  c.pool.keep_generated = "latest"


def _arm_uncertainty(c: ml_collections.ConfigDict) -> None:
  """RWR simulator rewarded by uncertainty 1 - 2|p̂ - ½| instead of α,
  among the same band-filtered tasks (curriculum.keep)."""
  c.simulator_update.method = "rwr"
  c.curriculum.reward = "uncertainty"


def _arm_learnability(c: ml_collections.ConfigDict) -> None:
  """RWR simulator rewarded by learnability (1 - p̂ when 0 < p̂ < 1), among
  the same band-filtered tasks (curriculum.keep)."""
  c.simulator_update.method = "rwr"
  c.curriculum.reward = "learnability"


def _arm_variance(c: ml_collections.ConfigDict) -> None:
  """RWR simulator rewarded by the variance p̂(1 - p̂) of the agent's success
  (learnability sampling, "No Regrets"), among the same band-filtered tasks
  (curriculum.keep)."""
  c.simulator_update.method = "rwr"
  c.curriculum.reward = "variance"


def _arm_rzero(c: ml_collections.ConfigDict) -> None:
  """R-Zero's challenger reward: uncertainty less its repetition penalty
  |C| / B (λ = 1) over near-duplicate tasks of the batch, by RWR among the
  same band-filtered tasks (curriculum.keep)."""
  _arm_uncertainty(c)
  c.curriculum.repetition_penalty = 1.0


ARMS = {
    "genenv": _arm_genenv,
    "genenv_pg": _arm_genenv_pg,
    "genenv_replay": _arm_genenv_replay,
    "frozen_env": _arm_frozen_env,
    "static": _arm_static,
    "uniform": _arm_uniform,
    "oracle_learnability": _arm_oracle_learnability,
    "reference_code": _arm_reference_code,
    "uncertainty": _arm_uncertainty,
    "learnability": _arm_learnability,
    "variance": _arm_variance,
    "rzero": _arm_rzero,
}
