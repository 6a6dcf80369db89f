"""The domain × arm grid, the markers and their validation, from the user's side."""

from __future__ import annotations

import pytest

from tests.plugin.fakes import FAKE_CONFTEST

GRID_TEST = """
import pytest

def test_cell(quant_cell):
    assert quant_cell.id == f"{quant_cell.domain}-{quant_cell.arm}"

@pytest.mark.precision("fp8")
def test_fp8_only(quant_cell):
    assert quant_cell.arm == "fp8"

@pytest.mark.domain("retail")
def test_retail_only(quant_cell):
    assert quant_cell.domain == "retail"

def test_not_on_grid():
    pass
"""


def test_grid_ids_and_marker_narrowing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(GRID_TEST)
    result = pytester.runpytest("--quant=int4,fp8", "--domain=telecom,retail", "-v")
    result.assert_outcomes(passed=4 + 2 + 2 + 1)
    result.stdout.fnmatch_lines_random([
        "*test_cell?telecom-int4? PASSED*",
        "*test_cell?telecom-fp8? PASSED*",
        "*test_cell?retail-int4? PASSED*",
        "*test_cell?retail-fp8? PASSED*",
        "*test_fp8_only?telecom-fp8? PASSED*",
        "*test_fp8_only?retail-fp8? PASSED*",
        "*test_retail_only?retail-int4? PASSED*",
        "*test_retail_only?retail-fp8? PASSED*",
    ])
    assert "test_fp8_only[telecom-int4]" not in result.stdout.str()


def test_markers_that_select_no_cell_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(GRID_TEST)
    result = pytester.runpytest("--quant=int4", "--domain=telecom", "-rs")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*markers select no cell of this run (domains: telecom; arms: int4)*"])


def test_each_cell_runs_once_and_is_shared_by_all_tests(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import conftest

        def test_a(quant_cell):
            assert len(quant_cell.episodes) == 60

        def test_b(episodes, reference_episodes):
            assert {e.arm for e in episodes} == {"int4"}
            assert {e.arm for e in reference_episodes} == {"bf16"}

        def test_zz_calls():
            assert conftest.CALLS == ["telecom-int4"]
        """
    )
    result = pytester.runpytest("--quant=int4", "--domain=telecom", "-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.error_budget(K):*",
        "@pytest.mark.domain(name, ...):*",
        "@pytest.mark.precision(arm, ...):*",
    ])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("error_budget(11)",
         "*test_m: @pytest.mark.error_budget(11) is above the run's error budget 10; K must be from 0 to 10 "
         "(raise --error-budget to at least 11, or lower K)*"),
        ("error_budget(-1)", "*@pytest.mark.error_budget K must be from 0 to 10; got -1*"),
        ("error_budget('2')", "*@pytest.mark.error_budget K must be an integer from 0 to 10; got '2'*"),
        ("error_budget(2, 3)", "*@pytest.mark.error_budget takes exactly one K*got 2 arguments*"),
        ("error_budget(k=2)", "*@pytest.mark.error_budget takes one positional K; unknown keyword argument(s): k*"),
        ("domain('airline')", "*@pytest.mark.domain: unknown domain 'airline'; known domains: *telecom*"),
        ("domain(name='telecom')",
         "*@pytest.mark.domain takes domain names as positional arguments only; unknown keyword argument(s): name*"),
        ("domain()", "*@pytest.mark.domain needs at least one domain name*"),
        ("precision('int3')",
         "*@pytest.mark.precision: unknown arm 'int3'; known arms: bf16, bf16+repair, fp8, *int4*"),
        ("precision(arm='int4', strict=True)",
         "*@pytest.mark.precision takes arm names as positional arguments only; unknown keyword argument(s): arm, strict*"),
        ("precision(4)", "*@pytest.mark.precision arguments must be arm names (strings); got 4*"),
    ],
)
def test_bad_markers_fail_loudly(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_m(quant_cell):
            pass
        """
    )
    result = pytester.runpytest("--quant=int4", "--domain=telecom")
    assert result.ret != 0
    result.stdout.fnmatch_lines([message])


def test_bad_marker_off_the_grid_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.error_budget(99)
        def test_plain():
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*error_budget(99) is above the run's error budget 10*"])


def test_error_budget_marker_sets_the_cell_budget(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.error_budget(2)
        def test_k2(quant_cell):
            assert (quant_cell.budget, quant_cell.run_budget) == (2, 12)

        def test_default(quant_cell):
            assert quant_cell.budget == 12
            assert quant_cell.at_budget(5).budget == 5
            with pytest.raises(ValueError, match="k must be an integer from 0 to the run's error budget 12"):
                quant_cell.at_budget(13)
        """
    )
    result = pytester.runpytest("--quant=int4", "--domain=telecom", "--error-budget=12")
    result.assert_outcomes(passed=2)


def test_plugin_is_inert_without_quant_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            heavy = {"torch", "transformers", "numpy", "scipy", "statsmodels", "rich"}
            assert not heavy & set(sys.modules), heavy & set(sys.modules)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "=== quantagent ===" not in result.stdout.str()


def test_public_api_names_resolve() -> None:
    import pytest_quantagent as qa

    for name in qa.__all__:
        assert getattr(qa, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        qa.nope  # noqa: B018


def test_cells_no_test_loaded_are_not_run_for_the_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        def test_ids_only(quant_cell):
            assert quant_cell.id.startswith("telecom-")

        @pytest.mark.precision("fp8")
        def test_loads(quant_cell):
            assert quant_cell.episodes

        def test_zz_calls():
            import conftest
            assert conftest.CALLS == ["telecom-fp8"]
        """
    )
    result = pytester.runpytest("--quant=int4,fp8", "--domain=telecom", "-p", "no:randomly",
                                "--quant-report=r.json")
    result.assert_outcomes(passed=4)
    import json

    cells = json.loads((pytester.path / "r.json").read_text())["cells"]
    assert [c["arm"] for c in cells] == ["fp8"]


def test_every_bad_marker_of_a_run_is_reported_together(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        test_a="""
        import pytest

        @pytest.mark.precision('int3')
        def test_one(quant_cell):
            pass

        @pytest.mark.error_budget(99)
        def test_two(quant_cell):
            pass
        """,
        test_b="""
        import pytest

        @pytest.mark.domain('airline')
        def test_three(quant_cell):
            pass

        @pytest.mark.error_budget('2')
        def test_four(quant_cell):
            pass
        """,
    )
    result = pytester.runpytest("--quant=int4", "--domain=telecom")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "4 bad markers" in text  # one run names all four (issue 36 item 10), once each
    for what in ("test_one: @pytest.mark.precision: unknown arm 'int3'",
                 "test_two: @pytest.mark.error_budget(99)", "test_three: @pytest.mark.domain",
                 "test_four: @pytest.mark.error_budget K must be an integer"):
        assert text.count(what) == 1, (what, text)
    assert "passed" not in text


def test_a_precision_markers_known_arms_are_the_arms_quant_accepts(pytester: pytest.Pytester) -> None:
    """Issue 36 item 10: precision('int5')'s error listed fp16, fp32 and int8, which --quant
    then refused for the run's model spec; the marker's list is --quant's."""
    from pytest_quantagent.quant.arms import DEFAULT_MODEL_SPEC, model_spec_arms

    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.precision('int5')
        def test_one(quant_cell):
            pass
        """)
    result = pytester.runpytest("--quant=int4", "--domain=telecom")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    listed = text.split("unknown arm 'int5'; known arms: ", 1)[1].splitlines()[0]
    arms = [a.strip(" !") for a in listed.split(", ")]
    accepted = set(model_spec_arms(DEFAULT_MODEL_SPEC))  # what --quant checks against
    assert set(arms) == accepted | {f"{a}+repair" for a in accepted}
    assert not {"fp16", "fp32", "int8"} & set(arms)
    # and --quant itself names the same list for a bad arm
    result = pytester.runpytest("--quant=int5", "--domain=telecom")
    quant = (result.stdout.str() + result.stderr.str()).split("arms of model spec 'tiny-agent': ", 1)[1]
    assert {a.strip(" !") for a in quant.splitlines()[0].split(", ")} == accepted
