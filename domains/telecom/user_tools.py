"""The telecom user's 30 device tools (τ²-bench's names and effects) on a simulated phone.

Dual control: the agent cannot touch the phone; it asks the user, who performs these
actions. Effects follow τ²-bench's phone simulation (network search after radio/SIM/APN
changes, speed from technology × signal × VPN/data-saver factors, MMS preconditions).

Where τ²-bench answers an impossible device action with a plain text (Wi-Fi while in
airplane mode, an app that is not installed, no payment request, an invalid network mode),
our domain raises :class:`UserToolError` with the same wording, so the failure is counted in
the ``user_tool_error`` channel and the error budget. :class:`Tau2TelecomUserTools` (used
with τ²-bench's own data files) answers with τ²-bench's exact text and no error instead, so
error counts there match τ²-bench's.

Non-tool methods (``set_user_info``, ``turn_*``, ``unseat_sim_card``, ``break_*``,
``assert_*``) are what task initialization actions and env assertions call by name.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError

from pytest_quantagent.env.toolkit import ArgumentError, Toolkit, ToolType, UserToolError, is_tool

from .user_data_model import (
    APNNames,
    APNSettings,
    MockPhoneAttributes,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PaymentRequest,
    PerformanceLevel,
    SignalStrength,
    SimStatus,
    TelecomUserDB,
    UserSurroundings,
    VpnDetails,
)

_SIGNAL_ICON = {
    SignalStrength.NONE: "📵 No Signal",
    SignalStrength.POOR: "📶¹ Poor",
    SignalStrength.FAIR: "📶² Fair",
    SignalStrength.GOOD: "📶³ Good",
    SignalStrength.EXCELLENT: "📶⁴ Excellent",
}

# Mbps range per technology and the share of it each signal level delivers (τ²-bench's
# simulation constants, so assert_internet_speed thresholds in their tasks mean the same).
_TECH_SPEED = {
    NetworkTechnology.TWO_G: (0.1, 0.4),
    NetworkTechnology.THREE_G: (1.0, 5.0),
    NetworkTechnology.FOUR_G: (10.0, 100.0),
    NetworkTechnology.FIVE_G: (50.0, 500.0),
    NetworkTechnology.NONE: (0.0, 0.0),
}
_SIGNAL_FACTOR = {
    SignalStrength.NONE: 0.0,
    SignalStrength.POOR: 0.2,
    SignalStrength.FAIR: 0.5,
    SignalStrength.GOOD: 0.8,
    SignalStrength.EXCELLENT: 1.0,
}
_SPEED_ADVICE = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}
_PREFERRED_TECH = {
    NetworkModePreference.FOUR_G_ONLY: NetworkTechnology.FOUR_G,
    NetworkModePreference.THREE_G_ONLY: NetworkTechnology.THREE_G,
    NetworkModePreference.TWO_G_ONLY: NetworkTechnology.TWO_G,
}
_DEFAULT_VPN = VpnDetails(
    server_address="192.168.1.1", protocol="OpenVPN", server_performance=PerformanceLevel.EXCELLENT
)


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


class TelecomUserTools(Toolkit):
    """User-side (device) tools over a :class:`TelecomUserDB`."""

    db: TelecomUserDB

    DEVICE_ERRORS_AS_TEXT: ClassVar[bool] = False
    """True: impossible device actions return τ²-bench's text instead of raising."""

    def __init__(self, db: TelecomUserDB) -> None:
        super().__init__(db)

    def _refuse(self, message: str, tau2_text: str, entity: str | None = None) -> str:
        """Refuse an impossible device action: raise, or (τ²-bench mode) answer in text."""
        if self.DEVICE_ERRORS_AS_TEXT:
            return tau2_text
        raise UserToolError(message, entity=entity)

    @property
    def device(self) -> MockPhoneAttributes:
        """The phone's current state."""
        return self.db.device

    @property
    def surroundings(self) -> UserSurroundings:
        """The user's surroundings."""
        return self.db.surroundings

    # -- derived state ----------------------------------------------------------------------

    def _status_bar(self) -> str:
        d = self.device
        parts: list[str] = []
        if d.airplane_mode:
            parts.append("✈️ Airplane Mode")
        else:
            parts.append(_SIGNAL_ICON[d.network_signal_strength])
            connected = d.network_technology_connected != NetworkTechnology.NONE
            if connected:
                parts.append(d.network_technology_connected.value)
            if d.data_enabled and connected:
                parts.append("📱 Data Enabled")
                if d.data_saver_mode:
                    parts.append("🔽 Data Saver")
            else:
                parts.append("📵 Data Disabled")
        if d.wifi_enabled and d.wifi_connected:
            parts.append(f"📡 Connected to {d.wifi_ssid}" if d.wifi_ssid else "📡 Enabled")
        if d.vpn_connected:
            parts.append("🔒 VPN Connected")
        parts.append(f"🔋 {d.battery_level}%")
        return " | ".join(parts)

    def _with_status(self, text: str) -> str:
        return f"{text}\nStatus Bar: {self._status_bar()}"

    def _sim_status(self) -> SimStatus:
        return SimStatus.MISSING if self.device.sim_card_missing else self.device.sim_card_status

    def _mobile_data_working(self) -> bool:
        d, s = self.device, self.surroundings
        if d.airplane_mode or d.network_signal_strength == SignalStrength.NONE:
            return False
        if d.network_connection_status == NetworkStatus.NO_SERVICE:
            return False
        if s.is_abroad and not (d.roaming_enabled and s.roaming_allowed):
            return False
        if not d.data_enabled:
            return False
        return not s.mobile_data_usage_exceeded

    def _speed(self) -> tuple[float | None, str]:
        if not self._mobile_data_working():
            return None, "No Connection"
        d = self.device
        factor = 1.0
        if (
            d.vpn_connected
            and d.vpn_details is not None
            and d.vpn_details.server_performance == PerformanceLevel.POOR
        ):
            factor = 0.1
        if d.data_saver_mode:
            factor *= 0.2
        low, high = _TECH_SPEED[d.network_technology_connected]
        speed = round((low + high) / 2.0 * _SIGNAL_FACTOR[d.network_signal_strength] * factor, 2)
        if speed < 1:
            desc = "Very Poor"
        elif speed < 5:
            desc = "Poor"
        elif speed < 25:
            desc = "Fair"
        elif speed < 100:
            desc = "Good"
        else:
            desc = "Excellent"
        return speed, desc

    def _can_send_mms(self) -> bool:
        d = self.device
        if not self._mobile_data_working():
            return False
        if d.network_technology_connected == NetworkTechnology.TWO_G:
            return False
        # The phone offers MMS over Wi-Fi calling but the carrier does not support it.
        if d.wifi_calling_enabled and d.wifi_calling_mms_over_wifi:
            return False
        if d.active_apn_settings.mmsc_url is None:
            return False
        app = d.app_statuses.get("messaging")
        return app is not None and app.permissions.storage and app.permissions.sms

    def simulate_network_search(self) -> None:
        """Re-evaluate the cellular connection from SIM, mode preference, airplane mode, APN
        and whether the line is active (called after every radio-affecting change)."""
        d, s = self.device, self.surroundings
        if self._sim_status() == SimStatus.ACTIVE:
            d.network_connection_status = NetworkStatus.CONNECTED
            tech = _PREFERRED_TECH.get(d.network_mode_preference)
            if tech is None:  # 4G/5G preferred: 5G where there is any 5G signal
                five_g = s.signal_strength.get(NetworkTechnology.FIVE_G, SignalStrength.NONE)
                tech = (
                    NetworkTechnology.FOUR_G
                    if five_g == SignalStrength.NONE
                    else NetworkTechnology.FIVE_G
                )
            d.network_technology_connected = tech
            d.network_signal_strength = s.signal_strength.get(tech, SignalStrength.NONE)
        else:
            self._no_service()
        if (
            d.airplane_mode
            or d.active_apn_settings.apn_name == APNNames.BROKEN
            or not s.line_active
        ):
            self._no_service()

    def _no_service(self) -> None:
        d = self.device
        d.network_connection_status = NetworkStatus.NO_SERVICE
        d.network_technology_connected = NetworkTechnology.NONE
        d.network_signal_strength = SignalStrength.NONE

    def _allowed_permissions(self, app_name: str) -> list[str] | None:
        app = self.device.app_statuses.get(app_name)
        if app is None:
            return None
        perms = app.permissions.model_dump()
        return [name.replace("_", " ").lower() for name, allowed in perms.items() if allowed]

    # -- tools: status ------------------------------------------------------------------------

    @is_tool(ToolType.READ)
    def check_status_bar(self) -> str:
        """Shows what icons are currently visible in your phone's status bar (the area at the
        top of the screen): network signal strength, mobile data status (enabled, disabled,
        data saver), Wi-Fi status, and battery level."""
        return f"Status Bar: {self._status_bar()}"

    @is_tool(ToolType.READ)
    def check_network_status(self) -> str:
        """Checks your phone's connection status to cellular networks and Wi-Fi: airplane mode,
        signal strength, network type, whether mobile data and data roaming are enabled."""
        d = self.device
        lines = [
            f"Airplane Mode: {_on_off(d.airplane_mode)}",
            f"SIM Card Status: {self._sim_status().value}",
            f"Cellular Connection: {d.network_connection_status.value}",
            f"Cellular Signal: {d.network_signal_strength.value}",
            f"Cellular Network Type: {d.network_technology_connected.value}",
            f"Mobile Data Enabled: {'Yes' if d.data_enabled else 'No'}",
            f"Data Roaming Enabled: {'Yes' if d.roaming_enabled else 'No'}",
            f"Wi-Fi Radio: {_on_off(d.wifi_enabled)}",
            f"Wi-Fi Connected: {'Yes' if d.wifi_connected else 'No'}",
        ]
        if d.wifi_connected:
            lines.append(f"Connected Wi-Fi Network: {d.wifi_ssid}")
        return "\n".join(lines)

    @is_tool(ToolType.READ)
    def check_network_mode_preference(self) -> str:
        """Shows the current network mode preference."""
        return f"Network Mode Preference: {self.device.network_mode_preference.value}"

    @is_tool(ToolType.WRITE)
    def set_network_mode_preference(self, mode: str) -> str:
        """Changes the type of cellular network your phone prefers to connect to (e.g., 5G,
        LTE/4G, 3G). Higher-speed networks (LTE/5G) provide faster data but may use more
        battery.

        Args:
            mode: One of 4g_5g_preferred, 4g_only, 3g_only, 2g_only.
        """
        try:
            preference = NetworkModePreference(mode)
        except ValueError:
            options = ", ".join(m.value for m in NetworkModePreference)
            text = (
                f"Failed to set network mode: '{mode}' is not a valid option. "
                f"Please use one of: {options}"
            )
            return self._refuse(text, self._with_status(text), entity=mode)
        self.device.network_mode_preference = preference
        self.simulate_network_search()
        return self._with_status(f"Preferred Network Mode set to: {preference.value}")

    @is_tool(ToolType.READ)
    def run_speed_test(self) -> str:
        """Measures your current internet connection speed (download speed). Provides
        information about connection quality and what activities it can support."""
        speed, desc = self._speed()
        if speed is None:
            return f"Speed test failed: {desc}."
        return f"Speed Test Result: {speed:.2f} Mbps ({desc}). {_SPEED_ADVICE[desc]}"

    # -- tools: radios, SIM, data -----------------------------------------------------------------

    @is_tool(ToolType.WRITE)
    def toggle_airplane_mode(self) -> str:
        """Toggles Airplane Mode ON or OFF. When ON, it disconnects all wireless
        communications including cellular, Wi-Fi, and Bluetooth."""
        state = self._toggle_airplane_mode()
        return self._with_status(f"Airplane Mode is now {_on_off(state)}.")

    def _toggle_airplane_mode(self) -> bool:
        d = self.device
        turning_off = d.airplane_mode
        d.airplane_mode = not d.airplane_mode
        if turning_off:
            d.network_connection_status = NetworkStatus.SEARCHING
        if not turning_off or d.wifi_enabled:
            d.wifi_connected = False
            d.wifi_ssid = None
            d.wifi_signal_strength = SignalStrength.NONE
        if not turning_off and d.vpn_connected:
            self._disconnect_vpn()
        self.simulate_network_search()
        return d.airplane_mode

    @is_tool(ToolType.READ)
    def check_sim_status(self) -> str:
        """Checks if your SIM card is working correctly and displays its current status: active,
        missing, or locked with a PIN or PUK code."""
        return {
            SimStatus.ACTIVE: "Your SIM card is active and working.",
            SimStatus.MISSING: "No SIM card detected in the phone.",
            SimStatus.LOCKED_PIN: "The SIM card is locked with a PIN code.",
            SimStatus.LOCKED_PUK: "The SIM card is locked with a PUK code.",
        }[self._sim_status()]

    @is_tool(ToolType.WRITE)
    def reseat_sim_card(self) -> str:
        """Simulates removing and reinserting your SIM card. This can help resolve recognition
        issues."""
        self.device.sim_card_missing = False
        self.simulate_network_search()
        return self._with_status("SIM card re-seated successfully.")

    @is_tool(ToolType.WRITE)
    def toggle_data(self) -> str:
        """Toggles your phone's mobile data connection ON or OFF. Controls whether your phone
        can use cellular data for internet access when Wi-Fi is unavailable."""
        self.device.data_enabled = not self.device.data_enabled
        self.simulate_network_search()
        return self._with_status(f"Mobile Data is now {_on_off(self.device.data_enabled)}.")

    @is_tool(ToolType.WRITE)
    def toggle_roaming(self) -> str:
        """Toggles Data Roaming ON or OFF. When ON, your phone can use data networks in areas
        outside your carrier's coverage."""
        self.device.roaming_enabled = not self.device.roaming_enabled
        self.simulate_network_search()
        return self._with_status(f"Data Roaming is now {_on_off(self.device.roaming_enabled)}.")

    @is_tool(ToolType.READ)
    def check_data_restriction_status(self) -> str:
        """Checks if your phone has any data-limiting features active. Shows if Data Saver
        mode is on."""
        if self.device.data_saver_mode:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @is_tool(ToolType.WRITE)
    def toggle_data_saver_mode(self) -> str:
        """Toggles Data Saver mode ON or OFF. When ON, it reduces data usage, which may affect
        data speed."""
        self.device.data_saver_mode = not self.device.data_saver_mode
        return self._with_status(f"Data Saver Mode is now {_on_off(self.device.data_saver_mode)}.")

    # -- tools: APN -------------------------------------------------------------------------------

    @is_tool(ToolType.READ)
    def check_apn_settings(self) -> str:
        """Checks the technical APN settings your phone uses to connect to your carrier's mobile
        data network. Shows current APN name and MMSC URL for picture messaging."""
        apn = self.device.active_apn_settings
        return (
            f"Current APN Name: {apn.apn_name.value or 'Not Set'}\n"
            f"MMSC URL (for picture messages): {apn.mmsc_url or 'Not Set'}\n"
            "(These are technical settings, usually best left unchanged.)"
        )

    @is_tool(ToolType.WRITE)
    def set_apn_settings(self, apn_settings: dict[str, Any]) -> str:
        """Sets the APN settings for the phone.

        Args:
            apn_settings: APN fields: apn_name, reset_at_reboot, mms_apn, mmsc_url, mms_proxy,
                mms_port.
        """
        try:
            settings = APNSettings.model_validate(apn_settings)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise ArgumentError(
                f"set_apn_settings() argument 'apn_settings.{where}': {first['msg']}"
            ) from None
        self.device.active_apn_settings = settings
        self.simulate_network_search()
        return self._with_status(f"APN settings set to: {settings.apn_name.value}")

    @is_tool(ToolType.WRITE)
    def reset_apn_settings(self) -> str:
        """Resets your APN settings to the default settings."""
        self.device.active_apn_settings.reset_at_reboot = True
        self.simulate_network_search()
        return self._with_status("APN settings will reset at reboot.")

    # -- tools: Wi-Fi, calling, VPN ------------------------------------------------------------

    @is_tool(ToolType.READ)
    def check_wifi_status(self) -> str:
        """Checks your Wi-Fi connection status. Shows if Wi-Fi is turned on, which network
        you're connected to (if any), and the signal strength."""
        d = self.device
        if not d.wifi_enabled:
            return "Wi-Fi is turned OFF."
        if d.wifi_connected:
            return (
                f"Wi-Fi is ON and connected to '{d.wifi_ssid}'. "
                f"Signal strength: {d.wifi_signal_strength.value}."
            )
        return "Wi-Fi is ON but not connected to any network."

    @is_tool(ToolType.WRITE)
    def toggle_wifi(self) -> str:
        """Toggles your phone's Wi-Fi radio ON or OFF. Controls whether your phone can discover
        and connect to wireless networks for internet access."""
        d = self.device
        if d.airplane_mode:
            text = "Cannot change Wi-Fi settings while Airplane Mode is ON."
            return self._refuse(text, self._with_status(text))
        d.wifi_enabled = not d.wifi_enabled
        if not d.wifi_enabled:
            d.wifi_connected = False
            d.wifi_ssid = None
            d.wifi_signal_strength = SignalStrength.NONE
        return self._with_status(f"Wi-Fi is now {_on_off(d.wifi_enabled)}.")

    @is_tool(ToolType.READ)
    def check_wifi_calling_status(self) -> str:
        """Checks if Wi-Fi Calling is enabled on your device. This feature allows you to make
        and receive calls over a Wi-Fi network instead of using the cellular network."""
        return f"Wi-Fi Calling is currently turned {_on_off(self.device.wifi_calling_enabled)}."

    @is_tool(ToolType.WRITE)
    def toggle_wifi_calling(self) -> str:
        """Toggles Wi-Fi Calling ON or OFF. This feature allows you to make and receive calls
        over Wi-Fi instead of the cellular network, which can help in areas with weak
        cellular signal."""
        self.device.wifi_calling_enabled = not self.device.wifi_calling_enabled
        return self._with_status(
            f"Wi-Fi Calling is now {_on_off(self.device.wifi_calling_enabled)}."
        )

    @is_tool(ToolType.READ)
    def check_vpn_status(self) -> str:
        """Checks if you're using a VPN (Virtual Private Network) connection. Shows if a VPN is
        active, connected, and displays any available connection details."""
        d = self.device
        if d.vpn_connected:
            if d.vpn_details is not None:
                return f"VPN is ON and connected. Details: {d.vpn_details.model_dump(mode='json')}"
            return "VPN is ON and connected (no specific details available)."
        if d.vpn_enabled_setting:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @is_tool(ToolType.WRITE)
    def connect_vpn(self) -> str:
        """Connects to your VPN (Virtual Private Network)."""
        if self.device.vpn_connected:
            return self._refuse("VPN already connected.", "VPN already connected.")
        self.device.vpn_connected = True
        self.device.vpn_details = _DEFAULT_VPN.model_copy()
        return self._with_status("VPN connected successfully.")

    @is_tool(ToolType.WRITE)
    def disconnect_vpn(self) -> str:
        """Disconnects any active VPN (Virtual Private Network) connection. Stops routing your
        internet traffic through a VPN server, which might affect connection speed or access
        to content."""
        if not self._disconnect_vpn():
            text = "No active VPN connection to disconnect."
            return self._refuse(text, self._with_status(text))
        return self._with_status("VPN disconnected successfully.")

    def _disconnect_vpn(self) -> bool:
        if not self.device.vpn_connected:
            return False
        self.device.vpn_connected = False
        self.device.vpn_details = None
        return True

    # -- tools: apps and MMS -----------------------------------------------------------------------

    @is_tool(ToolType.READ)
    def check_installed_apps(self) -> str:
        """Returns the name of all installed apps on the phone."""
        names = ", ".join(self.device.app_statuses)
        return f"The following apps are installed on the phone: {names}"

    @is_tool(ToolType.READ)
    def check_app_status(self, app_name: str) -> str:
        """Checks detailed information about a specific app. Shows its permissions and
        background data usage settings.

        Args:
            app_name: The name of the app (e.g. messaging, browser).
        """
        allowed = self._allowed_permissions(app_name)
        if allowed is None:
            text = f"App '{app_name}' not found on this phone."
            return self._refuse(text, text, entity=app_name)
        lines = [f"Status for App: {app_name}"]
        if allowed:
            lines.append(" - Permissions Granted:")
            lines.extend(f"   - {perm}" for perm in allowed)
        else:
            lines.append(" - Permissions: None granted.")
        return "\n".join(lines)

    @is_tool(ToolType.READ)
    def check_app_permissions(self, app_name: str) -> str:
        """Checks what permissions a specific app currently has. Shows if the app has access to
        features like storage, camera, location, etc.

        Args:
            app_name: The name of the app (e.g. messaging, browser).
        """
        allowed = self._allowed_permissions(app_name)
        if allowed is None:
            text = f"App '{app_name}' not found on this phone."
            return self._refuse(text, text, entity=app_name)
        if not allowed:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(allowed)}."

    @is_tool(ToolType.WRITE)
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Gives a specific permission to an app (like access to storage, camera, or location).
        Required for some app functions to work properly.

        Args:
            app_name: The name of the app to grant the permission to.
            permission: The permission to grant, should be lowercase.
        """
        app = self.device.app_statuses.get(app_name)
        if app is None:
            text = f"App '{app_name}' not found. Cannot grant permission."
            return self._refuse(text, self._with_status(f"Error. {text}"), entity=app_name)
        permission = permission.lower()
        available = list(app.permissions.model_dump())
        if permission not in available:
            text = (
                f"Permission '{permission}' not tracked for app '{app_name}', "
                f"available permissions: {available}"
            )
            return self._refuse(text, self._with_status(f"Error. {text}"), entity=permission)
        setattr(app.permissions, permission, True)
        return self._with_status(f"Success. Permission '{permission}' granted to app '{app_name}'.")

    @is_tool(ToolType.READ)
    def can_send_mms(self) -> str:
        """Checks if the default messaging app can send MMS messages."""
        if self._can_send_mms():
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    # -- tools: device, payment --------------------------------------------------------------------

    @is_tool(ToolType.WRITE)
    def reboot_device(self) -> str:
        """Restarts your phone completely. This can help resolve many temporary software
        glitches by refreshing all running services and connections."""
        lines = []
        if self.device.active_apn_settings.reset_at_reboot:
            lines.append("Resetting APN settings...")
            self.device.active_apn_settings = APNSettings()
        lines.append("Restarting network services...")
        self.device.network_connection_status = NetworkStatus.SEARCHING
        self.simulate_network_search()
        return self._with_status("\n".join(lines))

    @is_tool(ToolType.READ)
    def check_payment_request(self) -> str:
        """Checks if the agent has sent you a payment request."""
        request = self.surroundings.payment_request
        if request is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {request.bill_id} of {request.amount_due} USD."

    @is_tool(ToolType.WRITE)
    def make_payment(self) -> str:
        """Makes a payment for the bill that the agent has sent you."""
        request = self.surroundings.payment_request
        if request is None:
            text = "You do not have a payment request."
            return self._refuse(text, text)
        request.paid = True
        return f"Payment of {request.amount_due} USD has been made for bill {request.bill_id}."

    # -- initialization actions (env_type "user") ------------------------------------------------

    def set_user_info(self, name: str, phone_number: str) -> None:
        """Who the user is (name, the phone number of this device's line)."""
        self.surroundings.name = name
        self.surroundings.phone_number = phone_number

    def set_user_location(self, abroad: bool) -> None:
        """Put the user abroad (or at home)."""
        self.surroundings.is_abroad = abroad

    def turn_airplane_mode_on(self) -> str:
        """Airplane mode ON."""
        if not self.device.airplane_mode:
            self._toggle_airplane_mode()
        return "Airplane Mode is now ON."

    def turn_airplane_mode_off(self) -> str:
        """Airplane mode OFF."""
        if self.device.airplane_mode:
            self._toggle_airplane_mode()
        return "Airplane Mode is now OFF."

    def unseat_sim_card(self) -> str:
        """Take the SIM out (fixed by ``reseat_sim_card``)."""
        self.device.sim_card_missing = True
        self.simulate_network_search()
        return "SIM card un-seated successfully."

    def lock_sim_card(self, mode: str) -> str:
        """Lock the SIM with a PIN or PUK (no tool fixes this)."""
        statuses = {"pin": SimStatus.LOCKED_PIN, "puk": SimStatus.LOCKED_PUK}
        if mode not in statuses:
            raise ValueError(f"lock_sim_card mode {mode!r} is not one of 'pin', 'puk'")
        self.device.sim_card_status = statuses[mode]
        self.simulate_network_search()
        return f"SIM card locked successfully in {mode} mode."

    def turn_data_on(self) -> str:
        """Mobile data ON (no network search, as in τ²-bench)."""
        self.device.data_enabled = True
        return "Data connection restored."

    def turn_data_off(self) -> str:
        """Mobile data OFF."""
        self.device.data_enabled = False
        self.simulate_network_search()
        return "Data connection broken."

    def turn_roaming_on(self) -> str:
        """Data roaming ON."""
        self.device.roaming_enabled = True
        self.simulate_network_search()
        return "Data Roaming is now ON."

    def turn_roaming_off(self) -> str:
        """Data roaming OFF."""
        self.device.roaming_enabled = False
        self.simulate_network_search()
        return "Data Roaming is now OFF."

    def turn_data_saver_mode_on(self) -> str:
        """Data saver ON."""
        self.device.data_saver_mode = True
        return "Data Saver Mode is now ON."

    def turn_data_saver_mode_off(self) -> str:
        """Data saver OFF."""
        self.device.data_saver_mode = False
        return "Data Saver Mode is now OFF."

    def break_apn_settings(self) -> str:
        """Misconfigure the APN (no service; fixed by ``reset_apn_settings`` + reboot)."""
        self.device.active_apn_settings.apn_name = APNNames.BROKEN
        self.simulate_network_search()
        return "APN settings broken. Please call reset_apn_settings() to fix."

    def break_apn_mms_setting(self) -> str:
        """Remove the MMSC URL (no MMS; fixed by ``reset_apn_settings`` + reboot)."""
        self.device.active_apn_settings.mmsc_url = None
        return "APN MMS setting broken. Please call reset_apn_settings() to fix."

    def break_vpn(self) -> str:
        """Connect a VPN to a poor server (slow data; fixed by ``disconnect_vpn``)."""
        if not self.device.vpn_connected:
            self.device.vpn_connected = True
            self.device.vpn_details = _DEFAULT_VPN.model_copy()
        assert self.device.vpn_details is not None
        self.device.vpn_details.server_performance = PerformanceLevel.POOR
        return "VPN connection broken."

    def remove_app_permission(self, app_name: str, permission: str) -> str:
        """Revoke one permission of an app."""
        app = self.device.app_statuses.get(app_name)
        if app is None:
            raise UserToolError(f"App '{app_name}' not found. Cannot remove permission.")
        permission = permission.lower()
        if permission not in app.permissions.model_dump():
            raise UserToolError(f"Permission '{permission}' not tracked for app '{app_name}'.")
        setattr(app.permissions, permission, False)
        return f"Permission '{permission}' removed from app '{app_name}'."

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> str:
        """Set Wi-Fi calling (and optionally MMS over Wi-Fi)."""
        self.device.wifi_calling_enabled = enabled
        msg = f"Wi-Fi Calling is now {_on_off(enabled)}."
        if mms_over_wifi is not None:
            self.device.wifi_calling_mms_over_wifi = mms_over_wifi
            msg += f"\nMMS over Wi-Fi is now {_on_off(mms_over_wifi)}."
        return msg

    def set_payment_request(self, bill_id: str, amount_due: float) -> None:
        """Put a pending payment request on the phone (normally done by the sync)."""
        self.surroundings.payment_request = PaymentRequest(bill_id=bill_id, amount_due=amount_due)

    # -- env assertions (env_type "user") -----------------------------------------------------------

    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        """Airplane mode is as expected."""
        return self.device.airplane_mode == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        """The cellular connection status (``connected``, ``no_service``, ...) is as expected."""
        return self.device.network_connection_status == NetworkStatus(expected_status)

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        """Mobile data works (or not) as expected."""
        return self._mobile_data_working() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        """The phone's data-roaming switch is as expected."""
        return self.device.roaming_enabled == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        """Data saver is as expected."""
        return self.device.data_saver_mode == expected_status

    def assert_internet_speed(
        self, expected_speed: float, expected_desc: str | None = None
    ) -> bool:
        """The speed test gives at least ``expected_speed`` Mbps (and the given description)."""
        speed, desc = self._speed()
        ok = (speed or 0.0) >= expected_speed
        if expected_desc is None:
            return ok
        return ok and desc.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        """The speed test does not say Excellent."""
        return self._speed()[1].lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        """MMS works (or not) as expected."""
        return self._can_send_mms() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        """The line's data allowance is used up (or not) as expected."""
        return self.surroundings.mobile_data_usage_exceeded == expected_status


class Tau2TelecomUserTools(TelecomUserTools):
    """The device tools as τ²-bench runs them: impossible actions answer in text, no error."""

    DEVICE_ERRORS_AS_TEXT = True
