"""The 30 telecom device (user) tools on the simulated phone, and the device assertions.

Expected speeds follow τ²-bench's simulation: (low + high) / 2 × signal factor × VPN/data
saver factors, with 5G = 50-500 Mbps, 4G = 10-100, 3G = 1-5, 2G = 0.1-0.4 and signal factors
excellent 1.0, good 0.8, fair 0.5, poor 0.2 (tau2-bench src/tau2/domains/telecom/
user_tools.py, ``_run_speed_test``).
"""

from __future__ import annotations

from typing import Any

import pytest
from telecom_helpers import telecom_module

from pytest_quantagent.env.toolkit import ArgumentError, UserToolError
from pytest_quantagent.vocab.channels import Channel

ut = telecom_module("user_tools")
udm = telecom_module("user_data_model")

TAU2_USER_TOOLS = {
    "check_status_bar",
    "check_network_status",
    "check_network_mode_preference",
    "set_network_mode_preference",
    "run_speed_test",
    "toggle_airplane_mode",
    "check_sim_status",
    "reseat_sim_card",
    "toggle_data",
    "toggle_roaming",
    "check_data_restriction_status",
    "toggle_data_saver_mode",
    "check_apn_settings",
    "set_apn_settings",
    "reset_apn_settings",
    "check_wifi_status",
    "toggle_wifi",
    "check_wifi_calling_status",
    "toggle_wifi_calling",
    "check_vpn_status",
    "connect_vpn",
    "disconnect_vpn",
    "check_installed_apps",
    "check_app_status",
    "check_app_permissions",
    "grant_app_permission",
    "can_send_mms",
    "reboot_device",
    "check_payment_request",
    "make_payment",
}


@pytest.fixture
def phone() -> Any:
    return ut.TelecomUserTools(udm.TelecomUserDB())


def _speed(phone: Any) -> str:
    return str(phone.run_speed_test())


def test_the_thirty_device_tools() -> None:
    assert set(ut.TelecomUserTools.specs()) == TAU2_USER_TOOLS


def test_default_phone_is_fast_on_5g(phone: Any) -> None:
    phone.simulate_network_search()
    assert phone.device.network_technology_connected.value == "5G"
    assert _speed(phone).startswith("Speed Test Result: 275.00 Mbps (Excellent)")
    assert phone.check_status_bar() == "Status Bar: 📶⁴ Excellent | 5G | 📱 Data Enabled | 🔋 80%"


def test_airplane_mode(phone: Any) -> None:
    out = phone.toggle_airplane_mode()
    assert out.startswith("Airplane Mode is now ON.") and "✈️ Airplane Mode" in out
    assert phone.device.network_connection_status.value == "no_service"
    assert _speed(phone) == "Speed test failed: No Connection."
    assert "Airplane Mode: ON" in phone.check_network_status()
    with pytest.raises(
        UserToolError, match="Cannot change Wi-Fi settings while Airplane Mode is ON"
    ):
        phone.toggle_wifi()
    phone.toggle_airplane_mode()
    assert phone.device.network_connection_status.value == "connected"
    assert phone.assert_airplane_mode_status(False)


def test_airplane_mode_drops_vpn_and_wifi(phone: Any) -> None:
    phone.connect_vpn()
    phone.toggle_wifi()
    phone.turn_airplane_mode_on()
    assert not phone.device.vpn_connected and not phone.device.wifi_connected


def test_network_mode_preference(phone: Any) -> None:
    out = phone.set_network_mode_preference("3g_only")
    assert out.startswith("Preferred Network Mode set to: 3g_only")
    assert phone.check_network_mode_preference() == "Network Mode Preference: 3g_only"
    assert _speed(phone).startswith("Speed Test Result: 1.50 Mbps (Poor)")  # 3 × fair 0.5
    phone.set_network_mode_preference("4g_only")
    assert _speed(phone).startswith("Speed Test Result: 44.00 Mbps (Good)")  # 55 × good 0.8
    with pytest.raises(UserToolError, match="'5g' is not a valid option") as e:
        phone.set_network_mode_preference("5g")
    assert e.value.channel == Channel.USER_TOOL_ERROR


def test_sim_card(phone: Any) -> None:
    assert phone.check_sim_status() == "Your SIM card is active and working."
    phone.unseat_sim_card()
    assert phone.check_sim_status() == "No SIM card detected in the phone."
    assert phone.assert_service_status("no_service")
    assert phone.reseat_sim_card().startswith("SIM card re-seated successfully.")
    assert phone.assert_service_status("connected")
    phone.lock_sim_card("puk")
    assert phone.check_sim_status() == "The SIM card is locked with a PUK code."
    phone.reseat_sim_card()
    phone.reboot_device()
    assert phone.assert_service_status("no_service")  # nothing the user can do fixes a lock
    with pytest.raises(ValueError, match="'pin', 'puk'"):
        phone.lock_sim_card("code")


def test_mobile_data_toggle(phone: Any) -> None:
    phone.turn_data_off()
    assert phone.assert_mobile_data_status(False)
    assert "📵 Data Disabled" in phone.check_status_bar()
    assert phone.toggle_data().startswith("Mobile Data is now ON.")
    assert phone.assert_mobile_data_status(True)


def test_roaming_needs_the_phone_switch_and_the_line(phone: Any) -> None:
    phone.set_user_location(abroad=True)
    assert phone.assert_mobile_data_status(False)
    assert phone.toggle_roaming().startswith("Data Roaming is now ON.")
    assert phone.assert_mobile_roaming_status(True)
    assert phone.assert_mobile_data_status(False)  # the line does not allow roaming yet
    phone.surroundings.roaming_allowed = True
    assert phone.assert_mobile_data_status(True)
    phone.turn_roaming_off()
    assert phone.assert_mobile_data_status(False)


def test_data_saver(phone: Any) -> None:
    assert phone.check_data_restriction_status() == "Data Saver mode is OFF."
    assert phone.toggle_data_saver_mode().startswith("Data Saver Mode is now ON.")
    assert phone.check_data_restriction_status() == "Data Saver mode is ON (limits data usage)."
    # The default phone is on 5G with a good signal (user_db default): 275 × 0.8 × 0.2.
    assert _speed(phone).startswith("Speed Test Result: 44.00 Mbps (Good)")
    assert phone.assert_internet_not_excellent()
    assert phone.assert_mobile_data_saver_mode_status(True)


def test_apn_reset_takes_effect_at_reboot(phone: Any) -> None:
    phone.break_apn_settings()
    assert phone.assert_service_status("no_service")
    assert phone.check_apn_settings().startswith("Current APN Name: broken")
    assert phone.reset_apn_settings().startswith("APN settings will reset at reboot.")
    assert phone.assert_service_status("no_service")
    assert "Resetting APN settings..." in phone.reboot_device()
    assert phone.assert_service_status("connected")


def test_set_apn_settings(phone: Any) -> None:
    out = phone.set_apn_settings({"apn_name": "internet", "mmsc_url": None})
    assert out.startswith("APN settings set to: internet")
    assert "MMSC URL (for picture messages): Not Set" in phone.check_apn_settings()
    with pytest.raises(ArgumentError, match=r"apn_settings\.apn_name"):
        phone.set_apn_settings({"apn_name": "nonsense"})
    with pytest.raises(ArgumentError, match=r"apn_settings\.colour"):
        phone.set_apn_settings({"colour": "red"})


def test_wifi(phone: Any) -> None:
    assert phone.check_wifi_status() == "Wi-Fi is turned OFF."
    assert phone.toggle_wifi().startswith("Wi-Fi is now ON.")
    assert phone.check_wifi_status() == "Wi-Fi is ON but not connected to any network."
    phone.device.wifi_connected, phone.device.wifi_ssid = True, "Home"
    phone.device.wifi_signal_strength = udm.SignalStrength.GOOD
    assert (
        phone.check_wifi_status() == "Wi-Fi is ON and connected to 'Home'. Signal strength: good."
    )
    assert "📡 Connected to Home" in phone.check_status_bar()
    phone.toggle_wifi()
    assert not phone.device.wifi_connected and phone.device.wifi_ssid is None


def test_wifi_calling_blocks_mms_over_wifi(phone: Any) -> None:
    assert phone.check_wifi_calling_status() == "Wi-Fi Calling is currently turned OFF."
    phone.set_wifi_calling(True, mms_over_wifi=True)
    assert phone.can_send_mms() == "Your messaging app cannot send MMS messages."
    assert phone.toggle_wifi_calling().startswith("Wi-Fi Calling is now OFF.")
    assert phone.assert_can_send_mms(True)


def test_vpn(phone: Any) -> None:
    assert phone.check_vpn_status() == "VPN is turned OFF."
    with pytest.raises(UserToolError, match="No active VPN connection to disconnect"):
        phone.disconnect_vpn()
    assert phone.connect_vpn().startswith("VPN connected successfully.")
    assert "VPN is ON and connected. Details:" in phone.check_vpn_status()
    with pytest.raises(UserToolError, match="VPN already connected"):
        phone.connect_vpn()
    phone.break_vpn()
    assert _speed(phone).startswith("Speed Test Result: 22.00 Mbps (Fair)")  # 275 × 0.8 × 0.1
    assert phone.disconnect_vpn().startswith("VPN disconnected successfully.")
    phone.device.vpn_enabled_setting = True
    assert phone.check_vpn_status() == "VPN is turned ON in settings, but currently not connected."


def test_apps_and_permissions(phone: Any) -> None:
    assert (
        phone.check_installed_apps()
        == "The following apps are installed on the phone: messaging, browser"
    )
    assert (
        phone.check_app_permissions("messaging")
        == "App 'messaging' has permission for: sms, storage, phone."
    )
    assert "   - network" in phone.check_app_status("browser")
    phone.remove_app_permission("messaging", "storage")
    assert phone.assert_can_send_mms(False)
    out = phone.grant_app_permission("messaging", "STORAGE")
    assert out.startswith("Success. Permission 'storage' granted to app 'messaging'.")
    assert phone.assert_can_send_mms(True)
    for name, args in (
        ("check_app_status", ("camera",)),
        ("check_app_permissions", ("camera",)),
        ("grant_app_permission", ("camera", "sms")),
    ):
        with pytest.raises(UserToolError, match="App 'camera' not found"):
            getattr(phone, name)(*args)
    with pytest.raises(UserToolError, match="Permission 'camera' not tracked"):
        phone.grant_app_permission("messaging", "camera")
    phone.remove_app_permission("browser", "network")
    phone.remove_app_permission("browser", "storage")
    assert (
        phone.check_app_permissions("browser")
        == "App 'browser' currently has no permissions granted."
    )
    assert " - Permissions: None granted." in phone.check_app_status("browser")


@pytest.mark.parametrize(
    "breakage",
    [
        lambda p: p.set_network_mode_preference("2g_only"),
        lambda p: p.break_apn_mms_setting(),
        lambda p: p.remove_app_permission("messaging", "sms"),
        lambda p: p.turn_data_off(),
        lambda p: p.turn_airplane_mode_on(),
    ],
)
def test_each_mms_precondition(phone: Any, breakage: Any) -> None:
    assert phone.assert_can_send_mms(True)
    breakage(phone)
    assert phone.assert_can_send_mms(False)


def test_payment_request(phone: Any) -> None:
    assert phone.check_payment_request() == "No payment request has been made."
    with pytest.raises(UserToolError, match="You do not have a payment request") as e:
        phone.make_payment()
    assert e.value.channel == Channel.USER_TOOL_ERROR
    phone.set_payment_request("B2", 40.0)
    assert phone.check_payment_request() == "You have a payment request for bill B2 of 40.0 USD."
    assert phone.make_payment() == "Payment of 40.0 USD has been made for bill B2."
    assert phone.surroundings.payment_request.paid is True


def test_usage_exceeded_cuts_data(phone: Any) -> None:
    phone.surroundings.mobile_data_usage_exceeded = True
    assert phone.assert_mobile_data_usage_exceeded(True)
    assert phone.assert_mobile_data_status(False)
    assert phone.assert_internet_speed(1.0) is False
    phone.surroundings.mobile_data_usage_exceeded = False
    assert phone.assert_internet_speed(200.0, "excellent") is True
    assert phone.assert_internet_speed(200.0, "good") is False


def test_inactive_line_means_no_service_after_a_network_search(phone: Any) -> None:
    phone.surroundings.line_active = False
    phone.reboot_device()
    assert phone.assert_service_status("no_service")
    phone.surroundings.line_active = True
    assert phone.assert_service_status("no_service")  # until the next search
    phone.reboot_device()
    assert phone.assert_service_status("connected")


def test_tau2_mode_answers_impossible_actions_in_text() -> None:
    # The texts are τ²-bench's (tau2-bench src/tau2/domains/telecom/user_tools.py).
    phone = ut.Tau2TelecomUserTools(udm.TelecomUserDB())
    assert phone.make_payment() == "You do not have a payment request."
    assert phone.connect_vpn().startswith("VPN connected successfully.")
    assert phone.connect_vpn() == "VPN already connected."
    phone.disconnect_vpn()
    assert phone.disconnect_vpn().startswith("No active VPN connection to disconnect.\nStatus Bar:")
    assert phone.check_app_status("camera") == "App 'camera' not found on this phone."
    assert phone.check_app_permissions("camera") == "App 'camera' not found on this phone."
    assert phone.grant_app_permission("camera", "sms").startswith(
        "Error. App 'camera' not found. Cannot grant permission.\nStatus Bar:"
    )
    assert phone.grant_app_permission("messaging", "camera").startswith(
        "Error. Permission 'camera' not tracked for app 'messaging', available permissions: "
        "['sms', 'storage', 'phone', 'network']"
    )
    assert phone.set_network_mode_preference("6g").startswith(
        "Failed to set network mode: '6g' is not a valid option. Please use one of: "
        "4g_5g_preferred, 4g_only, 3g_only, 2g_only\nStatus Bar:"
    )
    phone.turn_airplane_mode_on()
    assert phone.toggle_wifi().startswith("Cannot change Wi-Fi settings while Airplane Mode is ON.")
    with pytest.raises(ArgumentError):  # τ²-bench raises here too (a validation error)
        phone.set_apn_settings({"apn_name": "nope"})


def test_official_domain_uses_tau2_device_semantics(tau2_data: Any) -> None:
    from pytest_quantagent.env.registry import get_domain
    from pytest_quantagent.vocab.messages import ToolCall

    dom = get_domain("telecom", tau2_data=tau2_data, tasks_file="tasks_small.json")
    env = dom.make_environment(dom.tasks[0])
    d = env.execute(ToolCall(id="x", name="make_payment", arguments={}, requestor="user"))
    assert d.channel is None and d.message.content == "You do not have a payment request."
    ours = get_domain("telecom").make_environment(None)
    d = ours.execute(ToolCall(id="x", name="make_payment", arguments={}, requestor="user"))
    assert d.channel == Channel.USER_TOOL_ERROR
