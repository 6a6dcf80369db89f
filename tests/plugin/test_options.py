"""The option group, ini twins, option parsing and contradictions, from the user's side."""

from __future__ import annotations

import pytest

from pytest_quantagent.options import OPTIONS, parse_tasks

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")


def test_help_shows_the_quantagent_group_and_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["quantagent (what quantization does to tool-calling agents):", "*--quant=ARM?,ARM? *candidate arms*"])
    out = result.stdout.str()
    for o in OPTIONS:
        shown = f"  {o.flag}\n" if o.switch else o.flag + "="  # a switch takes no value
        assert shown in out, f"{o.flag} missing from --help"
        assert f"  {o.ini} (string)" in out, f"ini key {o.ini} missing from --help"


def test_ini_names_follow_one_rule() -> None:
    names = {o.flag: o.ini for o in OPTIONS}
    assert names["--quant"] == "quant"
    assert names["--domain"] == "quant_domain"
    assert names["--error-budget"] == "quant_error_budget"
    assert names["--quant-tau2-data"] == "quant_tau2_data"
    assert names["--quant-margin"] == "quant_margin"
    assert names["--quant-require"] == "quant_require"
    assert names["--quant-until-decided"] == "quant_until_decided"
    assert names["--quant-accept-difference"] == "quant_accept_difference"
    assert names["--quant-rare-tolerance"] == "quant_rare_tolerance"
    assert len(set(names.values())) == len(OPTIONS) == 32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quant-trials=0"], "*--quant-trials: invalid value '0'; allowed: an integer from 1 to 10000*"),
        (["--quant-trials=three"], "*--quant-trials: invalid value 'three'; allowed: an integer from 1 to 10000*"),
        (["--quant-seed=-1"], "*--quant-seed: invalid value '-1'; allowed: an integer >= 0*"),
        (["--error-budget=0"], "*--error-budget: invalid value '0'; allowed: an integer >= 1*"),
        (["--quant-concurrency=x"], "*--quant-concurrency: invalid value 'x'; allowed: an integer >= 1*"),
        (["--quant-backend=tensorrt"],
         "*--quant-backend: invalid value 'tensorrt'; allowed: mock, openai, replay, transformers, vllm*"),
        (["--quant-user=robot"], "*--quant-user: invalid value 'robot'; allowed: llm, scripted*"),
        (["--quant-repair=maybe"], "*--quant-repair: invalid value 'maybe'; allowed: none, reflexive*"),
        (["--quant=int4,,fp8"], "*--quant: invalid value 'int4,,fp8'; allowed: a comma-separated list*"),
        (["--quant=int4;rm"], "*--quant: invalid value 'int4;rm'; allowed: names made of letters*"),
        (["--domain=tele com"], "*--domain: invalid value 'tele com'; allowed: names made of*"),
        (["--quant-reference=a,b"], "*--quant-reference: invalid value 'a,b'; allowed: one name*"),
        (["--quant-model="], "*--quant-model: invalid value ''; allowed: a non-empty model name*"),
        (["--quant-tasks=some"],
         "*--quant-tasks: invalid value 'some'; allowed: all, N (first N), A:B (slice), split:NAME, ids:ID1,ID2,...*"),
        (["--quant-tasks=9:3"], "*--quant-tasks: invalid value '9:3'*in A:B, B must be above A*"),
        (["--quant-report=out.txt"], "*--quant-report: invalid value 'out.txt'; allowed: a file path ending in .json*"),
        (["--quant-html=out.json"], "*--quant-html: invalid value 'out.json'; allowed: a file path ending in .html*"),
        (["--quant-config=missing.toml"],
         "*--quant-config: invalid value 'missing.toml'; allowed: an existing TOML file (no such file)*"),
        (["--quant-tau2-data=nowhere"],
         "*--quant-tau2-data: invalid value 'nowhere'; allowed: an existing τ²-bench data directory*"),
        (["--quant-margin=0.9x"], "*--quant-margin: invalid value '0.9x'; allowed: a finite number > 0 and < 1*"),
        (["--quant-margin=1.5"], "*--quant-margin: invalid value '1.5'; allowed: a finite number > 0 and < 1*"),
        (["--quant-max-ratio=0.8"], "*--quant-max-ratio: invalid value '0.8'; allowed: a finite number >= 1*"),
        (["--quant-rare-tolerance=-0.1"],
         "*--quant-rare-tolerance: invalid value '-0.1'; allowed: a finite number > 0 and < 1*"),
        (["--quant-tight-budgets=2,0"],
         "*--quant-tight-budgets: invalid value '2,0'; allowed: comma-separated integers >= 1*"),
        (["--quant-holm-scope=run"], "*--quant-holm-scope: invalid value 'run'; allowed: cell, report*"),
        (["--quant-trials=100000000000000000000"],
         "*--quant-trials: invalid value '100000000000000000000'; allowed: an integer from 1 to 10000*"),
        (["--quant-max-ratio=inf"], "*--quant-max-ratio: invalid value 'inf'; allowed: a finite number >= 1*"),
        (["--quant-cache-dir=/dev/null/x"],
         "*--quant-cache-dir: invalid value '/dev/null/x'; allowed: a directory path ('/dev/null' is not a directory)*"),
    ],
)
def test_bad_option_values_fail_before_collection(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile("def test_never_collected(): raise AssertionError")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nquant_trials = 0\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini key quant_trials (twin of --quant-trials)*--quant-trials: invalid value '0'; allowed: an integer from 1 to 10000*"]
    )


def test_ini_twins_are_read_and_the_command_line_wins(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nquant = int4,fp8\nquant_trials = 3\nquant_error_budget = 7\n"
        "quant_tasks = split:base\nquant_cache_dir = store\n"
    )
    pytester.makepyfile(
        """
        from pathlib import Path
        from pytest_quantagent.fixtures import SESSION_KEY

        def test_config(request):
            qc = request.config.stash[SESSION_KEY].qc
            assert qc.arms == ("int4", "fp8")
            assert qc.trials == 5          # command line beats ini
            assert qc.error_budget == 7
            assert str(qc.tasks) == "split:base"
            assert qc.cache_dir == Path(str(request.config.inipath)).parent / "store"
            assert qc.active
        """
    )
    result = pytester.runpytest("--quant-trials=5", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_defaults_when_nothing_is_given(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_quantagent.fixtures import SESSION_KEY

        def test_config(request):
            qc = request.config.stash[SESSION_KEY].qc
            assert not qc.active
            assert qc.arms == ("int4",) and qc.reference == "bf16"
            assert qc.error_budget == 10 and qc.trials == 1 and qc.seed == 0
            assert qc.user == "scripted" and qc.repair == "none"
            assert qc.domains is None and str(qc.tasks) == "all"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quant=bf16"], "*--quant lists the reference arm 'bf16'*pick a candidate arm such as --quant=int4*"),
        (["--quant=int4,fp8", "--quant-reference=fp8"],
         "*--quant lists the reference arm 'fp8'*use --quant=int4, or choose another reference*"),
        (["--quant-user-model=gpt-x"], "*--quant-user-model=gpt-x needs the LLM user simulator*add --quant-user=llm*"),
        (["--quant-user=llm"], "*--quant-user=llm needs a model for the simulated user; add --quant-user-model*"),
        (["--quant-backend=replay"], "*--quant-backend=replay reads τ²-bench results files named per arm*--quant-config=arms.toml*"),
        (["--quant-report=same.json", "--quant-html=same.json.html"], None),
    ],
)
def test_contradictions_say_what_to_do(
    pytester: pytest.Pytester, args: list[str], message: str | None
) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    if message is None:  # not a contradiction: two different files
        result.assert_outcomes(passed=1)
        return
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_model_and_config_contradict(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", arms='[arms.bf16]\nbackend = "mock"\n[arms.int4]\nbackend = "mock"\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--quant-config=arms.toml", "--quant-model=tiny-agent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--quant-model=tiny-agent and --quant-config=arms.toml both say which model*"])


def test_unknown_domain_lists_the_known_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--domain=telecom,airline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--domain: unknown domain 'airline'; known domains: *telecom*"])


def test_unknown_arm_lists_the_arms_of_the_config(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", arms='[arms.bf16]\nbackend = "mock"\n[arms.int4]\nbackend = "mock"\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--quant-config=arms.toml", "--quant=int3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--quant: unknown arm 'int3'; arms of the arms config arms.toml: bf16, int4*"])


@pytest.mark.parametrize(
    ("spec", "ids", "expected"),
    [
        ("all", ["a", "b", "c"], ["a", "b", "c"]),
        ("2", ["a", "b", "c"], ["a", "b"]),
        ("1:3", ["a", "b", "c", "d"], ["b", "c"]),
        (":2", ["a", "b", "c"], ["a", "b"]),
        ("ids:c,a", ["a", "b", "c"], ["c", "a"]),
        ("split:base", ["a", "b", "c"], ["b"]),
    ],
)
def test_task_selection(spec: str, ids: list[str], expected: list[str]) -> None:
    assert parse_tasks(spec).select(ids, {"base": ["b"]}) == expected
    assert str(parse_tasks(spec)) == spec if spec != ":2" else str(parse_tasks(spec)) == ":2"


def test_task_selection_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown retail task split 'test'; known splits: base, train$"):
        parse_tasks("split:test").select(["a"], {"base": ["a"], "train": []}, domain="retail")
    # An unknown id names the few closest, never all of them (issue 26).
    ids = [str(i) for i in range(160)]
    with pytest.raises(ValueError) as ei:
        parse_tasks("ids:3,1600").select(ids, domain="retail")
    msg = str(ei.value)
    # Reference for "closest": difflib's ratio ranking (stdlib), the five best.
    import difflib

    expected = ", ".join(difflib.get_close_matches("1600", ids, n=5, cutoff=0.5))
    assert msg == f"unknown retail task id '1600' (closest: {expected}; 160 task ids in domain 'retail')"
    assert msg.count(",") < 10


def test_an_arm_timeout_outside_a_millisecond_to_a_day_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", arms='[arms.bf16]\nbackend = "openai"\nmodel = "m"\n'
                      'base_url = "http://127.0.0.1:9/v1"\ntimeout_s = 1e-300\n')
    pytester.makepyfile("def test_never_collected(): raise AssertionError")
    result = pytester.runpytest("--quant-config=arms.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "timeout_s" in text and "from 0.001 to 86400" in text, text
    assert "test_never_collected" not in text and "Traceback" not in text
