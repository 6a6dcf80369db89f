"""The telecom user-side database: the simulated phone and the user's surroundings.

Schema, enum values and defaults follow τ²-bench's telecom user data model, so their
``user_db.toml`` loads unchanged; the classes are our own.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Self

from pytest_quantagent.env.db import DB


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SimStatus(str, Enum):
    """What the phone reports about its SIM card."""

    ACTIVE = "active"
    MISSING = "missing"
    LOCKED_PIN = "locked_pin"
    LOCKED_PUK = "locked_puk"


class NetworkTechnology(str, Enum):
    """Cellular technology generations."""

    NONE = "none"
    TWO_G = "2G"
    THREE_G = "3G"
    FOUR_G = "4G"
    FIVE_G = "5G"


class NetworkModePreference(str, Enum):
    """The phone's preferred network mode setting."""

    FOUR_G_5G_PREFERRED = "4g_5g_preferred"
    FOUR_G_ONLY = "4g_only"
    THREE_G_ONLY = "3g_only"
    TWO_G_ONLY = "2g_only"


class SignalStrength(str, Enum):
    """Signal bars."""

    NONE = "none"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


class PerformanceLevel(str, Enum):
    """Quality of a VPN server."""

    UNKNOWN = "unknown"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


class NetworkStatus(str, Enum):
    """Cellular connection status."""

    CONNECTED = "connected"
    SEARCHING = "searching"
    NO_SERVICE = "no_service"
    EMERGENCY_ONLY = "emergency_only"


class APNNames(str, Enum):
    """APN names the simulation knows (``broken`` means misconfigured)."""

    INTERNET = "internet"
    BROKEN = "broken"


class APNSettings(_Model):
    """The active access point configuration."""

    apn_name: APNNames = APNNames.INTERNET
    reset_at_reboot: bool = False
    mms_apn: str | None = "mms"
    mmsc_url: str | None = "http://mms.carrier.com/mms/wapenc"
    mms_proxy: str | None = None
    mms_port: int | None = None


class VpnDetails(_Model):
    """The connected VPN server."""

    server_address: str | None = None
    protocol: str | None = None
    server_performance: PerformanceLevel = PerformanceLevel.UNKNOWN


class AppPermissions(_Model):
    """Permissions tracked per app."""

    sms: bool = False
    storage: bool = False
    phone: bool = False
    network: bool = False


class AppStatus(_Model):
    """An installed app and its permissions."""

    app_name: str
    permissions: AppPermissions = Field(default_factory=AppPermissions)


def _default_apps() -> dict[str, AppStatus]:
    return {
        "messaging": AppStatus(
            app_name="messaging",
            permissions=AppPermissions(sms=True, storage=True, phone=True),
        ),
        "browser": AppStatus(
            app_name="browser", permissions=AppPermissions(network=True, storage=True)
        ),
    }


class MockPhoneAttributes(_Model):
    """Everything the simulated phone knows about itself."""

    sim_card_status: SimStatus = SimStatus.ACTIVE
    sim_card_missing: bool = False
    airplane_mode: bool = False
    network_signal_strength: SignalStrength = SignalStrength.GOOD
    network_technology_connected: NetworkTechnology = NetworkTechnology.FIVE_G
    network_connection_status: NetworkStatus = NetworkStatus.CONNECTED
    battery_level: int = 80
    data_enabled: bool = True
    roaming_enabled: bool = False
    network_mode_preference: NetworkModePreference = NetworkModePreference.FOUR_G_5G_PREFERRED
    active_apn_settings: APNSettings = Field(default_factory=APNSettings)
    wifi_enabled: bool = False
    wifi_connected: bool = False
    wifi_ssid: str | None = None
    wifi_signal_strength: SignalStrength = SignalStrength.NONE
    wifi_calling_enabled: bool = False
    wifi_calling_mms_over_wifi: bool = False
    data_saver_mode: bool = False
    vpn_enabled_setting: bool = False
    vpn_connected: bool = False
    vpn_details: VpnDetails | None = None
    app_statuses: dict[str, AppStatus] = Field(default_factory=_default_apps)


class PaymentRequest(_Model):
    """A bill payment request the agent sent to the user's phone."""

    bill_id: str
    amount_due: float
    paid: bool = False


def _default_signal() -> dict[NetworkTechnology, SignalStrength]:
    return {
        NetworkTechnology.TWO_G: SignalStrength.POOR,
        NetworkTechnology.THREE_G: SignalStrength.FAIR,
        NetworkTechnology.FOUR_G: SignalStrength.GOOD,
        NetworkTechnology.FIVE_G: SignalStrength.EXCELLENT,
    }


class UserSurroundings(_Model):
    """The world around the user: who and where they are, what the network offers, and the
    state mirrored from the carrier's records (line active, roaming allowed, data used up,
    pending payment request)."""

    name: str | None = None
    phone_number: str | None = None
    is_abroad: bool = False
    roaming_allowed: bool = False
    signal_strength: dict[NetworkTechnology, SignalStrength] = Field(
        default_factory=_default_signal
    )
    mobile_data_usage_exceeded: bool = False
    line_active: bool = True
    payment_request: PaymentRequest | None = None


class TelecomUserDB(DB):
    """The user's phone and surroundings (hashed separately from the agent DB)."""

    device: MockPhoneAttributes = Field(default_factory=MockPhoneAttributes)
    surroundings: UserSurroundings = Field(default_factory=UserSurroundings)

    def copy_fresh(self) -> Self:
        """An independent copy; dump + validate runs in pydantic's core, about 5× faster
        than the generic deep copy for this DB."""
        return self.model_validate(self.model_dump())

    def update_device(self, update: dict[str, Any]) -> None:
        """Deep-merge ``update`` into the device state (validated)."""
        merged = _deep_merge(self.device.model_dump(mode="json"), update)
        self.device = MockPhoneAttributes.model_validate(merged)


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
