"""A sweep's plan without compute: its trials, what the store already holds, tokens, FLOPs, and
what the same sweep costs in GPU-hours at the paper's scale.

Per trial: parameters (the model built on the ``meta`` device), the token budget and optimizer
steps (``cemlab.train.plan.make_plan``: Chinchilla = 20 x the matched Llama baseline's parameters,
so a CEM variant trains on its baseline's tokens), training FLOPs = tokens x
``flops_per_token(cfg, seq_len)["train"]`` (GP study: examples x FLOPs per example), and the status
of the newest run with the trial's config hash in the MLflow store, from any sweep:
``done`` (finished), ``diverged``, ``running``, ``failed`` / ``interrupted`` or ``todo``.

A sweep with ``seeding:`` lists its grid's own seeds as rows; the plan adds its planned looks (the
seeds each reads, the level each judges at) and the trials it runs at most, if every cell stayed
open to the last look (``Plan.seeding``). A sweep with ``tuning:`` adds its bracketing steps, which
run before the seed looks (``Plan.bracketing``): at most, every cell (family) takes every rate it can
reach beyond its worse end at the grid's seeds, then every seed of the last look at all its rates.

``search: optuna`` sweeps: a row is a grid cell whose learning rate Optuna samples ``samples``
times, so its tokens and FLOPs count ``samples`` runs (per row: one run's; the totals and GPU-hours
multiply). That is an upper bound: ASHA stops some samples early. A cell's status comes from the
runs tagged with it (``cemlab.search_cell``, read as ``cemlab report`` reads them): ``done`` when
it has ``samples`` results (finished, diverged or stopped by ASHA), ``partial`` when it has fewer
runs or some are not results (failed, interrupted, running), ``todo`` when it has none; the row
counts its samples per status.

GPU-hour estimates always use the sweep expanded at the ``paper`` scale, in two ways:
  - at an assumed MFU (default 40%) of each GPU's dense bf16 peak (``cemlab.hardware``);
  - at the paper's own throughput, about 30k tokens/s per A100 for the 86M Llama (appendix C.5:
    86M models took 8 x 2 GPU-hours for 1.72B tokens), scaled to other trials by their FLOPs per
    token; on H100 at the same MFU that throughput implies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cemlab.sweeps.data_step import sweep_data_needs
from cemlab.hardware import ESTIMATE_KINDS, PEAK_BF16_FLOPS, REFERENCE_KIND, gpu_hours, gpu_kind, visible_gpus
from cemlab.models.config import ModelConfig
from cemlab.sweeps.look_levels import seeds_given_note
from cemlab.sweeps.sweepfile.expand import sampled_trials
from cemlab.sweeps.sweepfile.schema import Trial
from cemlab.sweeps.sweepfile.confirmation_section import raised_budget
from cemlab.sweeps.sweepfile.load import SweepSpec, grid_seeds, load_sweep
from cemlab.sweeps.sweepfile.tuning_section import (family_extra, family_least, family_of, shared_steps,
                                                    unbracketable)
from cemlab.tasks import task_of
from cemlab.tracking import outcomes, schema
from cemlab.sweeps.gpu_slots import NoMeasurement, measured_slots, slots_plan
from cemlab.tracking.runs import RunStore, pick_run
from cemlab.tracking.store import (best_run, check_reachable, find_runs_by_hash, get_client, run_status, store_exists,
                                   tracking_uri)
from cemlab.train.plan import make_plan

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Tokenisation speed per CPU core assumed for the data-preparation step's cost: ``cemlab bench
#: prepare`` measured 0.46-0.74 M tokens/s for one worker process (cemlab's 4096-token BPE, the
#: embedded corpus and the SlimPajama stand-in, a quiet 2-core machine) and 0.1-0.2 M under load;
#: a pretrained 32k tokenizer (Llama's) on web text runs at its own speed: an order of magnitude.
PREP_TOKENS_PER_CORE_S = 500_000.0
#: Paper appendix C.5: ~30k training tokens/s per A100 for the 86M Llama baseline.
PAPER_TOKENS_PER_S_A100_86M = 30_000.0
PAPER_REFERENCE_PRESET = "86m"
DEFAULT_MFU = 0.4

STATUS_DONE = "done"
STATUS_TODO = "todo"
STATUS_PARTIAL = "partial"   # a search: optuna cell with some samples, not all of them results
#: cemlab run status (``cemlab.status`` tag) -> plan status.
_PLAN_STATUS = {schema.STATUS_FINISHED: STATUS_DONE}


@dataclass
class TrialPlan:
    """One row of the plan."""

    trial: Trial
    params: int | None            # total parameters of the trial's model
    budget_params: int            # parameters the Chinchilla rule counted (0 for a fixed budget)
    tokens: int                   # tokens (GP: examples) the trial trains on
    steps: int                    # optimizer steps
    flops_per_token: float | None  # training FLOPs per token (GP: per example)
    flops: float | None           # training FLOPs in total
    status: str = STATUS_TODO
    run_id: str | None = None
    samples: int = 1              # runs the row stands for: search: optuna samples of its cell, else 1
    llama_params: int = 0         # parameters of the matched Llama (language models): tokens per parameter
    sample_statuses: dict[str, int] = field(default_factory=dict)  # search: optuna: sampled runs per status

    @property
    def searched(self) -> bool:
        return self.trial.search is not None


@dataclass
class Plan:
    """A sweep at one scale, with totals and the paper-scale GPU-hour estimate."""

    sweep: str
    figure: str
    scale: str
    rows: list[TrialPlan]
    store: str | None                    # the MLflow store read for statuses (None: not read)
    mfu: float
    paper_flops: float | None = None     # training FLOPs of the whole sweep at the paper scale
    gpu_hours_mfu: dict[str, float] = field(default_factory=dict)            # kind -> hours at ``mfu``
    gpu_hours_paper_throughput: dict[str, float] = field(default_factory=dict)  # kind -> hours
    paper_throughput_mfu: float | None = None  # MFU implied by the paper's A100 throughput
    paper_samples: int | None = None     # search: optuna: samples per cell at the paper scale
    data_prep: dict[str, Any] = field(default_factory=dict)  # the data step at the paper scale (data_prep_estimate)
    looks: list[list[int]] = field(default_factory=list)  # seeding: the seeds of each planned look (one: none added)
    seeding_note: str = ""  # the command line's seed axis turned the file's seeding off (looks.seeds_given_note)
    gpu_time: dict[str, Any] = field(default_factory=dict)  # this scale's training time on a GPU (gpu_time_estimate)
    gpu_slots: dict[str, Any] = field(default_factory=dict)  # trials per GPU measured in the store (slots_plan)
    alphas: list[float] = field(default_factory=list)     # seeding: the two-sided level of each look
    split_note: str = ""                                  # seeding: why the looks take the even split, if so
    brackets: dict[str, Any] = field(default_factory=dict)  # tuning: the bracketing steps (bracket_plan)
    bracketing_note: str = ""  # tuning: why this grid brackets nothing although the scale would (unbracketable)
    budget: int | None = None  # confirmation: the trial budget of the whole job (None: no confirmation stage)
    confirmation_alpha: float | None = None  # confirmation: the two-sided level of each tuned comparison
    fresh: int | None = None   # confirmation: its fewest trials, the budget raised to the selection's + them
    primary_seeds: int | None = None  # confirmation: the primary condition's fresh seeds, fixed (None: left over)
    primary: str | None = None        # confirmation: the claim whose primary condition they are

    def family_looks(self, most: bool = False) -> list[list[tuple]]:
        """Each look's trials, as the family of each (``tuning_section.family_of``), in the order the
        sweep submits them: the grid; then the bracketing step that is certain (``least``) or, ``most``,
        every step a cell can take (one look each, ``extra`` of them at most); then, ``most``, each
        later seed look's new seeds at every rate a cell may have. The one count of the looks that
        :attr:`min_trials` and :attr:`max_trials` sum and ``ladder_plan.RungPlan`` times (the
        confirmation stage, which fills a budget, is not a look of families)."""
        from cemlab.sweeps.sweepfile.tuning_section import family_of

        fams: dict[tuple, int] = {}   # family -> its grid trials, in the grid's order
        for r in self.rows:
            fams[family_of(r.trial)] = fams.get(family_of(r.trial), 0) + 1
        cells = self.brackets.get("cells") or [{}] * len(fams)   # bracket_plan's, in the same order
        seeds = self.brackets.get("seeds", 0)
        each = list(zip(fams.items(), cells))
        looks = [[family_of(r.trial) for r in self.rows]]
        if not most:
            looks.append([f for (f, _), c in each for _ in range(c.get("least", 0) * seeds)])
        else:
            for k in range(max((c.get("extra", 0) for c in cells), default=0)):
                looks.append([f for (f, _), c in each if c["extra"] > k for _ in range(seeds)])
            plan_looks = [len(seen) for seen in self.looks if seen]
            for before, now in zip(plan_looks, plan_looks[1:]):
                looks.append([f for (f, n), c in each
                              for _ in range((n // plan_looks[0] + c.get("extra", 0)) * (now - before))])
        return [look for look in looks if look]

    @property
    def max_trials(self) -> int:
        """Trials if every cell took every rate it can reach beyond its worse end (``tuning``) and then
        stayed open to the last look (``seeding``) at all its rates (:meth:`family_looks`); the grid's
        without either. With a confirmation stage: its trial budget (it never runs past it), or the
        selection stage's most, plus its ``fresh`` trials where the file gives them (the budget is
        raised to the selection's trials and those)."""
        most = sum(len(look) for look in self.family_looks(most=True))
        return most + self.confirmation_trials(most)

    def confirmation_trials(self, selection: int) -> int:
        """The confirmation stage's trials after a selection stage of ``selection`` trials: what is
        left of its budget as the sweep raises it (``sweepfile.confirmation_section.raised_budget``: to the selection's
        trials + ``fresh``); 0 without the stage. The one count :attr:`max_trials` and
        ``ladder_plan.RungPlan`` (its fewest trials, its looks' times) add."""
        if self.budget is None:
            return 0
        return max(0, raised_budget(self.budget, self.fresh, selection) - selection)

    @property
    def min_trials(self) -> int:
        """Trials if the grid's runs finish and every cell stops as early as it can: the grid's, plus
        the bracketing step that is certain (a family of two rates, ``family_least``) at the grid's seeds
        (:meth:`family_looks`). With a confirmation stage the same: the selection stage, which is all
        ``cemlab sweep --no-seeding`` runs; the stage itself then fills the budget to within one seed of
        its pairs."""
        return sum(len(look) for look in self.family_looks())

    def bracketing(self) -> dict:
        """The bracketing steps of a ``tuning`` sweep ({} without): steps per end, ratio, bounds, the
        rates it can reach, the trials each step adds at most, and the plan's trials at least and at most."""
        if not self.brackets:
            return {}
        return {**self.brackets, "min_trials": self.min_trials, "max_trials": self.max_trials}

    def confirmation(self) -> dict:
        """The confirmation stage ({} without): the selection seeds, the budget, the level."""
        if self.budget is None:
            return {}
        return {"selection_seeds": self.looks[0] if self.looks else [], "budget": self.budget,
                "alpha": self.confirmation_alpha, "primary": self.primary, "primary_seeds": self.primary_seeds,
                "fresh": self.fresh,
                "min_trials": self.min_trials, "max_trials": self.max_trials}

    def seeding(self) -> dict:
        """The planned looks of a ``seeding`` sweep: seeds of each, the two-sided level each judges at
        (``alpha``; its one-sided decisions at half of it), how they share alpha, trials at most."""
        from cemlab.sweeps.look_levels import look_alpha, split_text

        if len(self.looks) < 2:
            return {}
        alphas = self.alphas or [look_alpha(len(self.looks))] * len(self.looks)
        return {"looks": [{"look": j, "seeds": seeds, "alpha": a, "alpha_one_sided": a / 2}
                          for j, (seeds, a) in enumerate(zip(self.looks, alphas))],
                "alpha_split": alphas, "split": split_text(alphas), "split_note": self.split_note,
                "max_trials": self.max_trials}

    @property
    def searched(self) -> bool:
        """A ``search: optuna`` sweep: rows are cells, totals count every sample (an upper bound)."""
        return any(r.searched for r in self.rows)

    @property
    def total_tokens(self) -> int:
        return sum(r.tokens * r.samples for r in self.rows)

    @property
    def total_flops(self) -> float:
        return sum((r.flops or 0.0) * r.samples for r in self.rows)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def grid(self) -> dict:
        """The grid's shape: cells (trials equal but for the seed), seeds per cell (fewest, most)
        and every axis with its values, e.g. to check a sweep has 3 seeds and 2 step sizes."""
        cells: dict[tuple, set] = {}
        axes: dict[str, list] = {}
        for r in self.rows:
            key = tuple(sorted((k, str(v)) for k, v in r.trial.axes.items() if k != "seed"))
            cells.setdefault(key, set()).add(r.trial.axes.get("seed"))
            for k, v in r.trial.axes.items():
                if k not in ("group", "variant") and v not in axes.setdefault(k, []):
                    axes[k].append(v)
        sizes = [len(s) for s in cells.values()] or [0]
        return {"cells": len(cells), "seeds_per_cell": [min(sizes), max(sizes)], "axes": axes,
                "tuning": self.tuning()}

    def tuning(self) -> dict:
        """How each cell's learning rate is chosen: with several rates in the grid, every cell (the
        trials equal but for lr and seed) gets the same rates and seeds, the report picks its rate on
        validation and judges the seeds there (``cemlab.report.claims.verdicts``); listed per cell."""
        per: dict[str, dict] = {}
        for r in self.rows:
            a = r.trial.axes
            name = f"{a.get('size', '')} {a.get('variant', '')}".strip()
            c = per.setdefault(name, {"cell": name, "lr": [], "seeds": []})
            if a.get("lr") not in c["lr"]:
                c["lr"].append(a.get("lr"))
            if a.get("seed") not in c["seeds"]:
                c["seeds"].append(a.get("seed"))
        lrs = {len(c["lr"]) for c in per.values()}
        if self.searched:
            how = "Optuna/ASHA search per cell (search: optuna), the same samples per cell"
        elif max(lrs, default=1) > 1:
            how = ("per cell: the learning rate with the lowest validation mean over seeds, the same rates and seeds "
                   "for every cell; the verdict is judged on test at it, beside one shared rate for all cells")
        else:
            how = "one shared learning rate (no lr axis at this scale): no tuning"
        return {"method": how, "cells": list(per.values())}


def plan_trial(trial: Trial) -> TrialPlan:
    """One row of the plan: the trial's parameters, budget, steps and training FLOPs, as its task
    counts them (``cemlab.tasks``: parameter counts are cached by model config, so a sweep's many
    trials on a few models build each model once, for its shapes only)."""
    cfg = trial.config
    task = task_of(cfg)
    tp = make_plan(cfg, world_size=trial.resources.workers)
    fpt = task.train_flops_per_unit(cfg, tp.seq_len)
    return TrialPlan(trial=trial, params=task.parameters(cfg), budget_params=tp.budget_params, tokens=tp.tokens,
                     steps=tp.total_steps, flops_per_token=fpt, flops=fpt * tp.tokens,
                     samples=trial.search.samples if trial.search is not None else 1,
                     llama_params=task.budget_parameters(cfg) if task.unit == "tokens" else 0)


def trial_statuses(trials: list[Trial], client: "MlflowClient") -> dict[str, tuple[str, str | None]]:
    """config hash -> (plan status, id of the run that decided it) from the MLflow store: the
    best of the config's runs (finished > diverged > running > failed, then any other status)."""
    out: dict[str, tuple[str, str | None]] = {}
    for h, runs in find_runs_by_hash([t.config_hash for t in trials], client).items():
        run = best_run(runs, fallback=True)
        if run is None:
            out[h] = (STATUS_TODO, None)
        else:
            status = run_status(run)
            out[h] = (_PLAN_STATUS.get(status, status), run.info.run_id)
    return out


def search_statuses(cells: list[Trial], client: "MlflowClient") -> dict[str, tuple[str, dict[str, int]]]:
    """cell trial id -> (plan status, sampled runs per status) of ``search: optuna`` cells, from the
    runs tagged with each cell (see the module docstring; the run standing for each sampled
    learning rate is chosen as ``cemlab report`` chooses it)."""
    store = RunStore(client.tracking_uri, client=client)
    out: dict[str, tuple[str, dict[str, int]]] = {}
    for cell in cells:
        counts: dict[str, int] = {}
        for _, runs in sampled_trials(store, cell):
            run = pick_run(runs)
            if run is not None:
                counts[run.status] = counts.get(run.status, 0) + 1
        results = sum(n for s, n in counts.items() if s in outcomes.SEARCH_RESULTS)
        status = STATUS_TODO if not counts else STATUS_DONE if results >= cell.search.samples else STATUS_PARTIAL
        out[cell.trial_id] = (status, dict(sorted(counts.items())))
    return out


def paper_estimate(spec: SweepSpec, mfu: float) -> dict[str, Any]:
    """GPU-hours of ``spec`` at the paper scale (see the module docstring)."""
    from cemlab.models import flops_per_token

    rows = [plan_trial(t) for t in spec.expand("paper")]
    flops = sum((r.flops or 0.0) * r.samples for r in rows)  # search: optuna: every sample, an upper bound
    ref = ModelConfig.preset(PAPER_REFERENCE_PRESET)
    ref_fpt = flops_per_token(ref, ref.context_length)["train"]
    implied_mfu = PAPER_TOKENS_PER_S_A100_86M * ref_fpt / PEAK_BF16_FLOPS["A100"]
    hours_mfu = {k: gpu_hours(flops, k, mfu) for k in ESTIMATE_KINDS}
    hours_paper = {k: gpu_hours(flops, k, implied_mfu) for k in ESTIMATE_KINDS}
    samples = max((r.samples for r in rows if r.searched), default=None)
    return {"flops": flops, "mfu": hours_mfu, "paper": hours_paper, "implied_mfu": implied_mfu, "samples": samples}


def gpu_time_estimate(rows: list[TrialPlan], mfu: float) -> dict[str, Any]:
    """Training time of the trials that hold GPUs at this scale, on the GPUs this machine has (the
    first one's kind in ``cemlab.hardware``'s table) or, without one it knows, on the reference kind:
    training FLOPs at ``mfu`` of its dense bf16 peak, spread over the GPUs found (one without).
    FLOPs only: compile, evaluation and per-step overhead come on top (most of a small model's trial)."""
    timed = [r for r in rows if r.trial.resources.gpus > 0 and r.flops]
    if not timed:
        return {}
    device, count = visible_gpus()
    kind = gpu_kind(device) if device else None
    peak = PEAK_BF16_FLOPS[kind or REFERENCE_KIND]
    seconds = [r.flops * r.samples / (peak * mfu) for r in timed]
    return {"device": device, "gpus": count, "kind": kind or REFERENCE_KIND, "found": kind is not None,
            "peak_flops": peak, "mfu": mfu, "trials": len(timed), "gpu_seconds": sum(seconds),
            "trial_seconds": [min(seconds), max(seconds)], "wall_seconds": sum(seconds) / max(count, 1),
            "trials_per_gpu": 1 / min(r.trial.resources.gpus for r in timed)}


def data_prep_estimate(spec: SweepSpec, tokens_per_core_s: float = PREP_TOKENS_PER_CORE_S) -> dict[str, Any]:
    """The data step of ``spec`` at the paper scale: tokens tokenised once by ``cemlab data prepare``
    (the largest token budget per streamed data set), against once per budget inside the trials
    (as before the token store: each budget was its own cache entry, tokenised by one process of
    a trial holding all its GPUs), in CPU core-hours and in the GPU-hours those GPUs sat idle."""
    trials = [t for t in spec.expand("paper") if task_of(t.config).prepared_data]
    if not trials:
        return {}
    once = sum(n.target or 0 for n in sweep_data_needs(trials))
    budgets: dict[tuple[str, int], float] = {}  # (data set, budget) -> GPUs of the trial that tokenised it
    for t in trials:
        if t.config.data.source != "hf":
            continue
        tokens = make_plan(t.config, max(1, int(t.resources.workers))).tokens
        key = (t.config.data.model_dump_json(), tokens)
        budgets[key] = max(budgets.get(key, 0.0), t.resources.workers * t.resources.gpus_per_worker)
    per_budget = sum(tokens for _, tokens in budgets)
    idle = sum(tokens / tokens_per_core_s / 3600.0 * gpus for (_, tokens), gpus in budgets.items())
    return {"tokens_once": once, "tokens_per_budget": per_budget, "cpu_core_hours": once / tokens_per_core_s / 3600.0,
            "gpu_hours_idle_before": idle, "tokens_per_core_s": tokens_per_core_s}


def plan_sweep(sweep: str | SweepSpec, scale: str, client: "MlflowClient | None" = None, mfu: float = DEFAULT_MFU,
              read_store: bool = True, overrides: list[str] | None = None) -> Plan:
    """The plan of ``sweep`` at ``scale``. Statuses come from ``client`` (default: the project's
    store, or ``$MLFLOW_TRACKING_URI``); a default sqlite store that does not exist yet is not
    created, and every trial is then ``todo``. ``overrides``: command-line ``key=value``, see
    ``SweepSpec.expand``."""
    return plan_scales(sweep, [scale], client=client, mfu=mfu, read_store=read_store, overrides=overrides)[0]


def plan_scales(sweep: str | SweepSpec, scales: list[str], client: "MlflowClient | None" = None,
                mfu: float = DEFAULT_MFU, read_store: bool = True, overrides: list[str] | None = None) -> list[Plan]:
    """``plan_sweep`` of ``sweep`` at each of ``scales`` (a ladder's rungs), the store opened and
    the paper-scale estimates made once for all of them."""
    spec = sweep if isinstance(sweep, SweepSpec) else load_sweep(sweep)
    grids = [(scale, spec.expand(scale, overrides=overrides)) for scale in scales]
    rows = [[plan_trial(t) for t in trials] for _, trials in grids]
    store = None
    if read_store:
        if client is None and store_exists():
            check_reachable()
            client = get_client()
        store = client.tracking_uri if client is not None else tracking_uri()
    else:
        client = None
    est = paper_estimate(spec, mfu)
    prep = data_prep_estimate(spec)
    plans = []
    for (scale, trials), scale_rows in zip(grids, rows):
        if client is not None:
            statuses = trial_statuses([t for t in trials if t.search is None], client)
            searched = search_statuses([t for t in trials if t.search is not None], client)
            for r in scale_rows:
                if r.searched:
                    r.status, r.sample_statuses = searched[r.trial.trial_id]
                else:
                    r.status, r.run_id = statuses[r.trial.config_hash]
        plans.append(Plan(sweep=spec.name, figure=spec.figure, scale=scale, rows=scale_rows, store=store, mfu=mfu,
                          paper_flops=est["flops"], gpu_hours_mfu=est["mfu"], gpu_hours_paper_throughput=est["paper"],
                          paper_throughput_mfu=est["implied_mfu"], paper_samples=est["samples"],
                          data_prep=prep, looks=spec.looks(scale, trials),
                          seeding_note=seeds_given_note(spec, scale, trials),
                          gpu_time=gpu_time_estimate(scale_rows, mfu), alphas=spec.look_alphas(scale, trials),
                          split_note=spec.split_note(scale, trials), brackets=bracket_plan(spec, scale, trials),
                          budget=spec.confirmation_budget(scale, trials),
                          confirmation_alpha=spec.confirmation.alpha if spec.confirmation is not None else None,
                          primary=spec.confirmation.primary if spec.confirmation is not None else None,
                          primary_seeds=spec.primary_seeds(scale)
                          if spec.confirmation is not None else None, fresh=spec.fresh_trials(scale),
                          bracketing_note=unbracketable(spec, trials) if spec.bracket_steps(scale) else "",
                          gpu_slots=slots_plan(scale_rows, client) if client is not None else {}))
    return plans


def bracket_plan(spec: SweepSpec, scale: str, trials: list[Trial]) -> dict[str, Any]:
    """The bracketing of ``trials`` at ``scale`` (``tuning``; {} where the scale brackets nothing):
    steps per end, the grid's ratio, the bounds, every rate it can reach, the grid's seeds, each
    step's cells and trials at most (a family whose reachable rates beyond its worse end are fewer
    than the steps stops earlier), and per cell its grid rates, the rates it may add and those it
    must (``least``: the first step of a family of two rates)."""
    steps = spec.bracket_steps(scale, trials)
    if not steps or not trials:
        return {}
    extra, least = family_extra(spec, scale, trials), family_least(spec, scale, trials)
    seeds = len(grid_seeds(trials))
    cells: dict[tuple, dict] = {}
    for t in trials:
        a, f = t.axes, family_of(t)
        c = cells.setdefault(f, {"cell": f"{a.get('size', '')} {a.get('variant', '')}".strip(), "lr": [],
                                 "extra": extra[f], "least": least[f]})
        if a["lr"] not in c["lr"]:
            c["lr"].append(a["lr"])
    wide = 2 if shared_steps(spec, scale, trials) else 1   # shared: a step may add a rate beyond each end
    per_step = [sum(min(wide, max(0, e - wide * k)) for e in extra.values()) for k in range(steps)]
    return {"policy": spec.tuning.policy, "max_steps": steps, "ratio": spec.rate_ratio(scale, trials),
            "shared": wide == 2,
            "bounds": list(spec.tuning.bounds),
            "rates": spec.tuning_rates(scale, trials), "seeds": seeds,
            "steps": [{"step": k, "cells": n, "max_trials": n * seeds} for k, n in enumerate(per_step) if n],
            "cells": list(cells.values())}


def measured_share(spec: "SweepSpec", scale: str, overrides: list[str] | None = None,
                   client: "MlflowClient | None" = None, cpus: int | None = None) -> tuple[float, str]:
    """``cemlab sweep --gpu-slots measured``: the GPUs per worker (1 / n, n from :func:`measured_slots` of the
    sweep's finished runs at ``scale`` in the store) and the line saying so; raises :class:`NoMeasurement`,
    naming ``--gpu-slots`` and the fix, where no finished run measured its GPU."""
    from cemlab.tracking.store import get_client

    plan = plan_sweep(spec, scale, client=client, overrides=overrides)
    m = measured_slots(plan.rows, client or get_client(plan.store), cpus) if plan.store else None
    if m is None or not m.count:
        why = m.reason if m is not None else "no store"
        raise NoMeasurement(f"--gpu-slots measured: no finished run of {plan.sweep} at scale {scale} in the store "
                            f"{plan.store or '(none)'} measured its GPU ({why}); run the sweep once on a GPU "
                            "with the scale's setting (--gpu-slots scale, the default), then again with "
                            "--gpu-slots measured")
    return 1.0 / m.count, f"GPU slots: {m.count} trials per GPU, measured ({m.reason})"
