"""The task registry (cemlab.tasks) and the run-outcome vocabulary (cemlab.tracking.outcomes):
every task the config accepts is registered, each owns its facts, and the facts agree with an
independent computation (parameters counted on real tensors, metric keys written by training)."""

import pydantic
import pytest

from cemlab.config import RunConfig
from cemlab.tasks import TASKS, get_task, task_of
from cemlab.tracking import outcomes, schema


def test_the_config_accepts_exactly_the_registered_tasks():
    assert {"lm", "gp"} <= set(TASKS)
    for name, task in TASKS.items():
        assert task.name == name
        assert task.section in RunConfig.model_fields, f"{name}: section {task.section!r} is not a RunConfig field"
        own = {task.section: {}} if RunConfig.model_fields[task.section].default is None else {}
        assert RunConfig.model_validate({"task": name, **own}).task == name
    with pytest.raises(pydantic.ValidationError, match=r"task\n.*task='nope' is unknown; choose one of \['gp', 'lm'\]"):
        RunConfig(task="nope")


def test_a_task_section_goes_with_its_task():
    with pytest.raises(pydantic.ValidationError, match=r"task='gp' needs a gp: section"):
        RunConfig(task="gp")
    with pytest.raises(pydantic.ValidationError, match=r"a gp: section needs task='gp'; task='lm' ignores it"):
        RunConfig(task="lm", gp={})


def test_an_unknown_task_names_the_choices():
    with pytest.raises(ValueError, match=r"task='nope' is unknown; choose one of \['gp', 'lm'\] .*CEMLAB_PLUGINS"):
        get_task("nope")


def test_metric_keys_are_the_ones_training_logs():
    lm, gp = get_task("lm"), get_task("gp")
    assert (lm.val_metric, lm.test_metric, lm.test_metric_at_steps) == (schema.VAL_PPL, schema.TEST_PPL,
                                                                         schema.TEST_PPL_AT_STEPS)
    assert (gp.val_metric, gp.test_metric, gp.test_metric_at_steps) == (schema.VAL_RMSE, schema.TEST_RMSE,
                                                                         schema.TEST_RMSE_AT_STEPS)
    assert (lm.seen_metric, gp.seen_metric) == (schema.TOKENS_SEEN, schema.EXAMPLES_SEEN)


def _real_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_budget_parameters_match_a_count_of_real_tensors():
    """The meta-device count the budget uses equals the parameters of the model built for real:
    the matched Llama baseline's for a language model, the regressor's own for GP."""
    from cemlab.models import build_model
    from cemlab.models.gp import build_gp_model

    cem = RunConfig(model={"preset": "tiny", "attention": "cem", "mlp": "cem", "kq_diagonal": "shared"})
    assert task_of(cem).budget_parameters(cem) == _real_count(build_model(cem.model.matched_baseline()))
    gp = RunConfig(task="gp", gp={"kernel": "rbf", "steps": 2})
    assert task_of(gp).budget_parameters(gp) == _real_count(build_gp_model(gp.gp))
    assert task_of(gp).seq_len(gp) == 1 and task_of(cem).seq_len(cem) == cem.model.context_length


class _Rec:
    def __init__(self, name, status):
        self.name, self.status = name, status


def test_the_run_that_stands_for_a_config():
    """Newest first; the first outcome of the preference wins, then the newest of any."""
    runs = [_Rec("a", outcomes.FAILED), _Rec("b", outcomes.STOPPED), _Rec("c", outcomes.DIVERGED),
            _Rec("d", outcomes.STOPPED)]
    status = lambda r: r.status  # noqa: E731
    assert outcomes.pick(runs, status).name == "c"
    assert outcomes.pick(runs, status, outcomes.RESULTS).name == "c"
    assert outcomes.pick(runs[:2], status, outcomes.RESULTS) is None
    assert outcomes.pick(runs[:2], status, outcomes.SEARCH_RESULTS).name == "b"
    assert outcomes.pick(runs[:1], status, outcomes.RESULTS, fallback=True).name == "a"
    assert set(outcomes.RESULTS) < set(outcomes.SEARCH_RESULTS) < set(outcomes.ALL)


@pytest.mark.parametrize("tag,mlflow_status,expected", [
    (None, "FINISHED", "finished"), (None, "RUNNING", "running"), (None, "KILLED", "failed"),
    ("running", "KILLED", "failed"),       # died without saying so
    ("running", "RUNNING", "running"), ("stopped", "FINISHED", "stopped"), ("diverged", "FINISHED", "diverged"),
])
def test_outcome_from_the_tag_and_mlflow_status(tag, mlflow_status, expected):
    assert outcomes.outcome_from_mlflow(tag, mlflow_status) == expected
    if tag and tag != "running":  # what cemlab ends a run with maps back to the same outcome
        assert outcomes.MLFLOW_STATUS[tag] == mlflow_status
