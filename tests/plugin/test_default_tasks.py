"""The bundled model's default task set is its test split (it was trained on the others);
any other model runs every task; explicit ids and splits are left alone."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_quantagent.options import parse_tasks
from pytest_quantagent.quant.arms import ArmSpec, resolve_arm
from pytest_quantagent.runner.selection import TaskSelection
from pytest_quantagent.runner.selection import default_pool as _default_task_ids

DOMAIN = SimpleNamespace(tasks=[SimpleNamespace(id=i) for i in ("a", "b", "c", "d")],
                         splits={"train": ["a", "b"], "test": ["c", "d"]})


def test_bundled_arms_default_to_the_test_split() -> None:
    specs = (resolve_arm("bf16", "tiny-agent"), resolve_arm("int2-rtn", "tiny-agent"))
    assert _default_task_ids(DOMAIN, specs) == ["c", "d"]


def test_other_models_and_domains_without_a_test_split_run_every_task() -> None:
    served = ArmSpec(label="int4", backend="openai", model="tiny-agent", base_url="http://x/v1")
    assert _default_task_ids(DOMAIN, (resolve_arm("bf16", "tiny-agent"), served)) == list("abcd")
    hf = (resolve_arm("bf16", "Qwen/Qwen3-8B"), resolve_arm("int4", "Qwen/Qwen3-8B"))
    assert _default_task_ids(DOMAIN, hf) == list("abcd")
    no_test = SimpleNamespace(tasks=DOMAIN.tasks, splits={"train": ["a"]})
    assert _default_task_ids(no_test, (resolve_arm("bf16", "tiny-agent"),)) == list("abcd")


def test_cli_flags_and_quant_tasks_spell_the_same_selection() -> None:
    # One TaskSelection: `--num-tasks/--tasks/--split` and `--quant-tasks` resolve alike, and
    # the pool depends on every arm of the run, not on the cell (or screen) that asks.
    dom = SimpleNamespace(name="d", **vars(DOMAIN))
    bundled = (resolve_arm("bf16", "tiny-agent"), resolve_arm("int4", "tiny-agent"))
    served = ArmSpec(label="int4", backend="openai", model="tiny-agent", base_url="http://x/v1")
    for flags, spec, arms, expected in [
        ((1, None, None), "1", bundled, ["c"]),
        ((1, None, None), "1", (bundled[0], served), ["a"]),
        ((None, "b,a,b", None), "ids:b,a,b", bundled, ["b", "a"]),
        ((None, None, "train"), "split:train", bundled, ["a", "b"]),
        ((None, None, None), "all", bundled, ["c", "d"]),
    ]:
        cli, pytest_spelling = TaskSelection.from_flags(*flags), parse_tasks(spec)
        assert cli.task_ids(dom, arms) == pytest_spelling.task_ids(dom, arms) == expected
    assert TaskSelection.from_flags(1, None, "train").task_ids(dom, bundled) == ["a"]
