"""Dual control: the device ↔ records sync, channels of telecom calls, initial state
(initialization actions) and env assertions, on the small in-memory DB."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from telecom_helpers import small_db, telecom_module

from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.env.tasks import EnvAssertion, InitialState
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import ToolCall

domain_mod = telecom_module("domain")
udm = telecom_module("user_data_model")


@pytest.fixture
def env() -> Any:
    real = get_domain("telecom")
    dom = domain_mod.TelecomDomain(
        name="telecom",
        policy="p",
        db=small_db(),
        tasks=[],
        agent_toolkit=real.agent_toolkit,
        user_toolkit=real.user_toolkit,
        user_db=udm.TelecomUserDB(),
        environment_cls=real.environment_cls,
        device_intents=real.device_intents,
    )
    e = dom.make_environment(None)
    e.run_env_function_call(
        _action("user", "set_user_info", name="Ana Costa", phone_number="555-0001")
    )
    return e


def _call(env: Any, requestor: Literal["assistant", "user"], name: str, **arguments: Any) -> Any:
    return env.execute(ToolCall(id="t", name=name, arguments=arguments, requestor=requestor))


def _surroundings(env: Any) -> Any:
    return env.user_tools.db.surroundings


def test_roaming_on_the_line_reaches_the_phone(env: Any) -> None:
    env.user_tools.set_user_location(abroad=True)
    _call(env, "user", "toggle_roaming")
    assert _surroundings(env).roaming_allowed is False
    assert env.user_tools.assert_mobile_data_status(False)
    assert _call(env, "assistant", "enable_roaming", customer_id="C1", line_id="L1").channel is None
    assert _surroundings(env).roaming_allowed is True
    assert env.user_tools.assert_mobile_data_status(True)
    _call(env, "assistant", "disable_roaming", customer_id="C1", line_id="L1")
    assert env.user_tools.assert_mobile_data_status(False)


def test_data_limit_and_refuel_reach_the_phone(env: Any) -> None:
    env.run_env_function_call(
        _action("assistant", "set_data_usage", customer_id="C1", line_id="L1", data_used_gb=5.5)
    )
    assert _surroundings(env).mobile_data_usage_exceeded is True  # 5.5 >= 5 + 0
    assert "Speed test failed" in _call(env, "user", "run_speed_test").message.content
    _call(env, "assistant", "refuel_data", customer_id="C1", line_id="L1", gb_amount=1.0)
    assert _surroundings(env).mobile_data_usage_exceeded is False  # 5.5 < 5 + 1


def test_payment_request_round_trip(env: Any) -> None:
    d = _call(env, "user", "make_payment")
    assert d.channel == Channel.USER_TOOL_ERROR and d.message.error
    assert d.message.content == "Error: You do not have a payment request."
    _call(env, "assistant", "send_payment_request", customer_id="C1", bill_id="B2")
    assert _surroundings(env).payment_request.bill_id == "B2"
    assert "bill B2 of 40.0 USD" in _call(env, "user", "check_payment_request").message.content
    assert _call(env, "user", "make_payment").channel is None
    bill = next(b for b in env.tools.db.bills if b.bill_id == "B2")
    assert bill.status.value == "Paid"
    assert _surroundings(env).payment_request is None


def test_resumed_line_gives_service_after_reboot(env: Any) -> None:
    env.run_env_function_call(_action("user", "set_user_info", name="Ana", phone_number="555-0002"))
    assert _surroundings(env).line_active is False  # L2 is suspended
    _call(env, "user", "reboot_device")
    assert env.user_tools.assert_service_status("no_service")
    _call(env, "assistant", "resume_line", customer_id="C1", line_id="L2")
    assert _surroundings(env).line_active is True
    assert env.user_tools.assert_service_status("no_service")
    _call(env, "user", "reboot_device")
    assert env.user_tools.assert_service_status("connected")


@pytest.mark.parametrize(
    ("requestor", "name", "args", "channel", "text"),
    [
        (
            "assistant",
            "toggle_data",
            {},
            Channel.CROSS_ROLE_TOOL,
            "Error: Tool 'toggle_data' not found.",
        ),
        (
            "user",
            "enable_roaming",
            {"customer_id": "C1", "line_id": "L1"},
            Channel.CROSS_ROLE_TOOL,
            None,
        ),
        ("assistant", "reset_phone", {}, Channel.UNKNOWN_TOOL, None),
        (
            "assistant",
            "get_customer_by_id",
            {"customer_id": "C9"},
            Channel.WRONG_ENTITY,
            "Error: Customer with ID C9 not found",
        ),
        (
            "assistant",
            "resume_line",
            {"customer_id": "C1", "line_id": "L1"},
            Channel.POLICY_VIOLATION,
            "Error: Line must be suspended to resume",
        ),
        (
            "assistant",
            "refuel_data",
            {"customer_id": "C1", "line_id": "L1", "gb_amount": "lots"},
            Channel.BAD_ARGUMENTS,
            None,
        ),
        ("user", "toggle_wifi", {"on": True}, Channel.BAD_ARGUMENTS, None),
        (
            "user",
            "grant_app_permission",
            {"app_name": "camera", "permission": "sms"},
            Channel.USER_TOOL_ERROR,
            "Error: App 'camera' not found. Cannot grant permission.",
        ),
    ],
)
def test_channels_of_failed_calls(
    env: Any, requestor: Any, name: Any, args: Any, channel: Any, text: Any
) -> None:
    d = _call(env, requestor, name, **args)
    assert d.channel == channel and d.message.error
    if text is not None:
        assert d.message.content == text


def test_wrong_entity_names_the_id(env: Any) -> None:
    d = _call(env, "assistant", "suspend_line", customer_id="C1", line_id="L7", reason="x")
    assert d.channel == Channel.WRONG_ENTITY and d.entity == "L7"


def test_successful_results_are_serialized(env: Any) -> None:
    d = _call(env, "assistant", "get_details_by_id", id="L1")
    assert d.channel is None and '"line_id": "L1"' in d.message.content


def _action(env_type: Literal["user", "assistant"], func: str, **arguments: Any) -> EnvAssertion:
    return EnvAssertion(env_type=env_type, func_name=func, arguments=arguments)


def test_initial_state_and_env_assertions(env: Any) -> None:
    env.set_state(
        InitialState.model_validate(
            {
                "initialization_actions": [
                    {"env_type": "user", "func_name": "turn_airplane_mode_on", "arguments": {}},
                    {
                        "env_type": "assistant",
                        "func_name": "suspend_line_for_overdue_bill",
                        "arguments": {
                            "customer_id": "C2",
                            "line_id": "L3",
                            "new_bill_id": "B9",
                            "contract_ended": False,
                        },
                    },
                ]
            }
        )
    )
    assert env.user_tools.device.airplane_mode is True
    assert env.run_env_assertion(
        EnvAssertion(
            env_type="user",
            func_name="assert_service_status",
            arguments={"expected_status": "no_service"},
        )
    )
    assert env.run_env_assertion(
        EnvAssertion(
            env_type="assistant",
            func_name="assert_overdue_bill_exists",
            arguments={"customer_id": "C2", "overdue_bill_id": "B9"},
        )
    )
    assert not env.run_env_assertion(
        EnvAssertion(
            env_type="assistant",
            func_name="assert_no_overdue_bill",
            arguments={"overdue_bill_id": "B9"},
        )
    )
    assert env.run_env_assertion(
        EnvAssertion(
            env_type="user",
            func_name="assert_airplane_mode_status",
            arguments={"expected_status": True},
            assert_value=True,
        )
    )
    with pytest.raises(ValueError, match="not found in the user toolkit"):
        env.run_env_function_call(_action("user", "assert_teleportation"))


def test_db_hashes_are_stable(env: Any) -> None:
    _call(env, "user", "reboot_device")  # settle the default phone on the network first
    h, uh = env.get_db_hash(), env.get_user_db_hash()
    _call(env, "user", "check_status_bar")
    _call(env, "assistant", "get_bills_for_customer", customer_id="C1")
    assert (env.get_db_hash(), env.get_user_db_hash()) == (h, uh)
    _call(env, "user", "toggle_data")
    assert env.get_user_db_hash() != uh
    _call(env, "user", "toggle_data")
    assert env.get_user_db_hash() == uh


def _copy_data(src: Any, dst: Any) -> None:
    import shutil

    for name in ("db.json", "user_db.json", "policy.md", "tasks.json", "split_tasks.json"):
        shutil.copy(src / name, dst / name)


def test_bad_data_files_name_the_file_and_field(tmp_path: Any) -> None:
    import json
    from pathlib import Path

    from pytest_quantagent.errors import DataFileError

    src = Path(str(domain_mod.__file__)).parent
    _copy_data(src, tmp_path)
    db = json.loads((tmp_path / "db.json").read_text())
    db["lines"][0]["colour"] = "red"
    (tmp_path / "db.json").write_text(json.dumps(db))
    with pytest.raises(DataFileError, match=r"db\.json at field 'lines\.0\.colour': Extra inputs"):
        domain_mod.make_domain(tmp_path, None, False)
    _copy_data(src, tmp_path)
    (tmp_path / "user_db.json").write_text("{not json")
    with pytest.raises(DataFileError, match=r"user_db\.json at line 1 column 2: invalid JSON"):
        domain_mod.make_domain(tmp_path, None, False)
    _copy_data(src, tmp_path)
    (tmp_path / "policy.md").unlink()
    with pytest.raises(DataFileError, match=r"policy\.md: telecom policy file not found"):
        domain_mod.make_domain(tmp_path, None, False)
    _copy_data(src, tmp_path)
    with pytest.raises(DataFileError, match=r"nope\.json: file not found"):
        domain_mod.make_domain(tmp_path, "nope.json", False)
