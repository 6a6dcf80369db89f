"""The telecom extension of the scripted user: device actions asked for in ordinary words.

:data:`DEVICE_INTENTS` tells the scripted user which phrasings mean "use this tool on your
phone" (keyword groups, see :func:`pytest_quantagent.env.user.matches`) and how the oracle
asks for each tool. :class:`TelecomUser` reads each agent message with the shared
dialogue-act layer (:mod:`pytest_quantagent.env.dialogue`) and matches the intents only in
the segments that ask for something, so a message that *reports* something ("I've enabled
roaming on your line."), recaps, empathises or sets a condition triggers nothing, and only
the request ("Please turn on data roaming on your phone.") acts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_quantagent.env import dialogue
from pytest_quantagent.env.dialogue import Act, Segment
from pytest_quantagent.env.toolkit import ToolError, Toolkit
from pytest_quantagent.env.user import (
    DeviceIntent,
    ScriptedUser,
    UserScript,
    join_answers,
    matches,
)
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

_MODES = {
    "4g_5g_preferred": (("4g_5g",), ("5g", "preferred"), ("4g", "5g"), ("5g",), ("lte", "5g")),
    "4g_only": (("4g_only",), ("4g", "only"), ("lte", "only")),
    "3g_only": (("3g_only",), ("3g",)),
    "2g_only": (("2g_only",), ("2g",)),
}
_PERMISSIONS = ("storage", "sms", "phone", "network")
_APPS = ("messaging", "browser")


def _extract_mode(text: str) -> dict[str, Any]:
    for mode, groups in _MODES.items():
        if matches(text, groups):
            return {"mode": mode}
    return {}


def _extract_app(text: str) -> dict[str, Any]:
    low = text.lower()
    for app in _APPS:
        if app in low:
            return {"app_name": app}
    if re.search(r"\b(?:message|messages|text|texting|mms)\b", low):
        return {"app_name": "messaging"}
    return {}


def _extract_permission(text: str) -> dict[str, Any]:
    args = _extract_app(text)
    low = text.lower()
    for perm in _PERMISSIONS:
        if re.search(rf"\b{perm}\b", low):
            args["permission"] = perm
            break
    return args


def _intent(tool: str, phrase: str, *groups: tuple[str, ...], **kw: Any) -> DeviceIntent:
    return DeviceIntent(tool=tool, keywords=tuple(groups), phrase=phrase, **kw)


#: Every device tool, with the phrasings that ask for it and the oracle's phrase.
DEVICE_INTENTS: tuple[DeviceIntent, ...] = (
    _intent(
        "check_status_bar",
        "Could you look at the status bar of your phone and tell me what it shows?",
        ("status", "bar"),
        ("top", "screen"),
        ("icons",),
        ("signal", "bar"),
        ("see", "icon"),
        ("any", "icon"),
        ("what", "icon"),
    ),
    _intent(
        "check_network_status",
        "Could you check your phone's network status?",
        ("network", "status"),
        ("connection", "status"),
        ("cellular", "connection"),
        ("check", "signal"),
        ("check", "network", "connection"),
    ),
    _intent(
        "check_network_mode_preference",
        "Which network mode does your phone currently prefer?",
        ("check", "network", "mode"),
        ("which", "network", "mode"),
        ("what", "network", "mode"),
        ("current", "network", "mode"),
        ("check", "preferred", "network"),
        ("network", "mode", "preference"),
        ("which", "network", "type"),
        ("what", "network", "type"),
        ("check", "network", "type"),
        ("set", "to", "2g"),
        ("set", "to", "3g"),
        ("set", "to", "4g"),
    ),
    _intent(
        "set_network_mode_preference",
        "Please change the preferred network mode of your phone to {mode}.",
        ("change", "network", "mode"),
        ("set", "network", "mode"),
        ("switch", "network", "mode"),
        ("change", "preferred", "network"),
        ("set", "preferred", "network"),
        ("network", "mode", "to"),
        ("preferred", "network", "to"),
        ("network", "preference", "to"),
        ("switch", "to", "4g"),
        ("switch", "to", "5g"),
        ("switch", "to", "lte"),
        extract=_extract_mode,
    ),
    _intent(
        "run_speed_test",
        "Could you run a speed test on your phone?",
        ("speed", "test"),
        ("speedtest",),
        ("test", "speed"),
        ("internet", "speed"),
        ("check", "speed"),
    ),
    _intent(
        "toggle_airplane_mode",
        "Please switch airplane mode on your phone off.",
        ("airplane", "mode", "off"),
        ("airplane", "mode", "on"),
        ("toggle", "airplane"),
        ("turn", "airplane"),
        ("switch", "airplane"),
        ("disable", "airplane"),
        ("enable", "airplane"),
        ("flight", "mode", "off"),
        ("turn", "flight"),
    ),
    _intent(
        "check_sim_status",
        "Could you check the status of your SIM card?",
        ("sim", "status"),
        ("check", "sim"),
        ("sim", "card", "working"),
        ("sim", "locked"),
        ("sim", "inserted"),
        ("sim", "detected"),
        ("sim", "missing"),
        ("detect", "sim"),
        ("recogni", "sim"),
        ("sees", "sim"),
        ("there", "sim"),
        ("sim", "card", "in", "your"),
    ),
    _intent(
        "reseat_sim_card",
        "Please take the SIM card out of your phone and put it back in.",
        ("reseat",),
        ("re-seat",),
        ("remove", "sim"),
        ("reinsert",),
        ("re-insert",),
        ("take", "sim", "out"),
        ("sim", "back", "in"),
        ("sim", "out", "and"),
    ),
    _intent(
        "toggle_data",
        "Please switch the mobile data of your phone on.",
        ("mobile", "data", "on"),
        ("mobile", "data", "off"),
        ("cellular", "data", "on"),
        ("toggle", "mobile", "data"),
        ("toggle", "data"),
        ("enable", "mobile", "data"),
        ("enable", "cellular", "data"),
        ("switch", "mobile", "data"),
        ("turn", "mobile", "data"),
        ("turn", "cellular", "data"),
    ),
    _intent(
        "toggle_roaming",
        "Please switch data roaming on in your phone's settings.",
        ("data", "roaming", "on"),
        ("toggle", "roaming"),
        ("turn", "roaming"),
        ("turn", "on", "roaming"),
        ("turn", "on", "data", "roaming"),
        ("switch", "roaming"),
        ("switch", "on", "roaming"),
        ("enable", "data", "roaming"),
        ("roaming", "on", "your", "phone"),
        ("disable", "data", "roaming"),
        ("data", "roaming", "off"),
    ),
    _intent(
        "check_data_restriction_status",
        "Could you check whether any data restriction is active on your phone?",
        ("data", "restriction"),
        ("restrict",),
        ("check", "data", "saver"),
        ("data", "saver", "enabled"),
        ("data", "saver", "is", "on"),
        ("whether", "data", "saver"),
    ),
    _intent(
        "toggle_data_saver_mode",
        "Please switch the data saver mode of your phone off.",
        ("data", "saver", "off"),
        ("toggle", "data", "saver"),
        ("turn", "data", "saver"),
        ("turn", "off", "data", "saver"),
        ("disable", "data", "saver"),
        ("switch", "data", "saver"),
        ("turn", "off", "saver"),
    ),
    _intent(
        "check_apn_settings",
        "Could you check the APN settings of your phone?",
        ("check", "apn"),
        ("apn", "settings", "show"),
        ("what", "apn"),
        ("look", "apn"),
        ("view", "apn"),
        ("open", "apn"),
    ),
    _intent(
        "reset_apn_settings",
        "Please reset the APN settings of your phone to the default.",
        ("reset", "apn"),
        ("apn", "reset"),
        ("restore", "apn"),
        ("apn", "default"),
        ("access", "point", "reset"),
        ("reset", "access", "point"),
        ("access", "point", "default"),
    ),
    _intent(
        "check_wifi_status",
        "Could you check your Wi-Fi status?",
        ("wi-fi", "status"),
        ("wifi", "status"),
        ("connected", "to", "wi-fi"),
        ("connected", "to", "wifi"),
    ),
    _intent(
        "toggle_wifi",
        "Please switch the Wi-Fi of your phone on or off.",
        ("toggle", "wi-fi"),
        ("toggle", "wifi"),
        ("turn", "wi-fi"),
        ("turn", "wifi"),
        ("wi-fi", "on", "or", "off"),
        ("switch", "wifi"),
        ("enable", "wifi"),
        ("switch", "wi-fi"),
        ("enable", "wi-fi"),
        ("disable", "wi-fi"),
    ),
    _intent(
        "check_wifi_calling_status",
        "Could you check whether Wi-Fi calling is enabled on your phone?",
        ("check", "wi-fi", "calling"),
        ("check", "wifi", "calling"),
        ("wi-fi", "calling", "status"),
        ("wifi", "calling", "status"),
        ("whether", "wi-fi", "calling"),
        ("whether", "wifi", "calling"),
        ("is", "wi-fi", "calling"),
        ("is", "wifi", "calling"),
    ),
    _intent(
        "toggle_wifi_calling",
        "Please switch Wi-Fi calling on your phone off.",
        ("wi-fi", "calling", "off"),
        ("wifi", "calling", "off"),
        ("toggle", "wi-fi", "calling"),
        ("toggle", "wifi", "calling"),
        ("turn", "wi-fi", "calling"),
        ("turn", "wifi", "calling"),
        ("disable", "wi-fi", "calling"),
        ("disable", "wifi", "calling"),
        ("switch", "wi-fi", "calling"),
        ("switch", "wifi", "calling"),
        ("turn", "off", "wi-fi", "calling"),
        ("turn", "off", "wifi", "calling"),
    ),
    _intent(
        "check_vpn_status",
        "Could you check whether a VPN is active on your phone?",
        ("vpn", "status"),
        ("check", "vpn"),
        ("using", "vpn"),
        ("vpn", "active"),
        ("vpn", "connected"),
    ),
    _intent(
        "connect_vpn",
        "Please connect your VPN.",
        ("connect", "to", "vpn"),
        ("connect", "your", "vpn"),
        ("connect", "the", "vpn"),
        ("turn", "on", "vpn"),
        ("turn", "vpn", "on"),
        ("enable", "vpn"),
    ),
    _intent(
        "disconnect_vpn",
        "Please disconnect the VPN on your phone.",
        ("disconnect", "vpn"),
        ("vpn", "off"),
        ("turn", "off", "vpn"),
        ("disable", "vpn"),
    ),
    _intent(
        "check_installed_apps",
        "Which apps are installed on your phone?",
        ("installed", "apps"),
        ("apps", "installed"),
        ("list", "apps"),
        ("which", "apps"),
    ),
    _intent(
        "check_app_status",
        "Could you check the status of your {app_name} app?",
        ("app", "status"),
        ("status", "app"),
        ("status", "of", "messaging"),
        ("status", "of", "browser"),
        extract=_extract_app,
        defaults={"app_name": "messaging"},
    ),
    _intent(
        "check_app_permissions",
        "Could you check which permissions your {app_name} app has?",
        ("check", "permission"),
        ("which", "permission"),
        ("what", "permission"),
        ("app", "permissions"),
        ("permissions", "app", "has"),
        ("have", "permission"),
        ("has", "permission"),
        extract=_extract_app,
        defaults={"app_name": "messaging"},
    ),
    _intent(
        "grant_app_permission",
        "Please give your {app_name} app the {permission} permission.",
        ("grant",),
        ("give", "permission"),
        ("allow", "permission"),
        ("enable", "permission"),
        ("give", "access"),
        ("allow", "access"),
        ("allow", "storage"),
        ("allow", "sms"),
        extract=_extract_permission,
        defaults={"app_name": "messaging", "permission": "storage"},
    ),
    _intent(
        "can_send_mms",
        "Could you check whether you can send a picture message (MMS) now?",
        ("mms",),
        ("picture", "message"),
        ("multimedia", "message"),
        ("send", "picture"),
        ("send", "photo"),
    ),
    _intent(
        "reboot_device",
        "Please restart your phone.",
        ("restart",),
        ("reboot",),
        ("power", "cycle"),
        ("turn", "phone", "off", "and", "on"),
    ),
    _intent(
        "check_payment_request",
        "Could you check the payment request on your phone?",
        ("payment", "request"),
        ("check", "payment"),
    ),
    # Keyword matching is by word start ("pay" would match "payment"), hence no bare "pay".
    _intent(
        "make_payment",
        "Please make the payment for the request I sent you.",
        ("make", "payment"),
        ("make", "the", "payment"),
        ("complete", "payment"),
        ("accept", "payment"),
        ("pay", "it"),
        ("pay", "payment", "request"),
        ("pay", "the", "bill"),
        ("pay", "now"),
    ),
)
# ``connect_vpn``'s ("vpn", "on") must not fire on "disconnect the VPN on your phone".
_EXCLUSIVE = {
    "check_sim_status": "reseat_sim_card",
    "check_apn_settings": "reset_apn_settings",
    "connect_vpn": "disconnect_vpn",
    "check_wifi_status": "toggle_wifi",
    "check_network_mode_preference": "set_network_mode_preference",
    "check_data_restriction_status": "toggle_data_saver_mode",
    "check_wifi_calling_status": "toggle_wifi_calling",
    "check_vpn_status": "disconnect_vpn",
    "check_app_permissions": "grant_app_permission",
    "check_app_status": "grant_app_permission",
    "toggle_wifi": "toggle_wifi_calling",
}

# Where the agent says the customer is ("you're in Spain") and where the scenario says it is.
_YOU_IN = re.compile(r"\byou(?:'re|’re| are)(?: currently| now| still| right now)? (?:travell?ing |staying |abroad )?in "
                     r"(?:the )?([A-Z][a-z]+(?: [A-Z][a-z]+)?)")
_PLACE = re.compile(r"\bin (?:the )?([A-Z][a-z]+(?: [A-Z][a-z]+)?)")
_OFFER = re.compile(r"^\s*(?:would|do) you (?:like|want|wish) to\b")
_NETWORK_STATUS_WORDS = (("network", "status"), ("connection", "status"), ("cellular", "connection"))
# "Can you confirm?" after a sentence about the phone: confirm what it said, from the phone.
_BARE_CONFIRM = re.compile(
    r"^(?:can|could|would) you (?:please )?(?:confirm|verify|double-check)(?: (?:that|this|it))?"
    r"(?: for me)?(?: please)?\?$|^(?:please )?confirm\?$|^(?:is that|is it) (?:right|correct|so)\?$",
    re.IGNORECASE,
)
# "Have you restarted your phone since ...?", "Did you already toggle airplane mode?": asks
# what the user has done, which it knows.
_HAVE_YOU = re.compile(r"^(?:and |so |also )?(?:have|did) you (?:already |ever |recently |yet |)"
                       r"(?:tried (?:to )?)?\w+", re.IGNORECASE)


# "open Settings → Apps → Messaging → Permissions": the menus on the way name no thing asked
# for; the path's last step is where the user goes.
_MENU_PATH = re.compile(r"(?:[\w&'’-]+(?: [\w&'’-]+){0,3}\s*(?:→|->|›|»|>)\s*)+(?=\w)")


_WIFI_CALLING_WORDS = re.compile(r" wi-?fi calling ")
_OTHER_MODE = re.compile(r" (airplane|flight|saver|power saving|low power|battery saver|dark|silent) mode ")


def _normalize(text: str) -> str:
    """The text as :func:`pytest_quantagent.env.user.matches` sees it (lower case, words
    separated by single spaces, padded), computed once per sentence instead of per intent."""
    return " " + re.sub(r"[^a-z0-9#@._\-]+", " ", text.lower()) + " "


_DOB = (("date", "birth"), ("dob",), ("birthday",), ("birth", "date"))

#: Toggle tools → (device attribute, name the user says).
_SWITCHES = {
    "toggle_airplane_mode": ("airplane_mode", "Airplane mode"),
    "toggle_data": ("data_enabled", "Mobile data"),
    "toggle_roaming": ("roaming_enabled", "Data roaming"),
    "toggle_data_saver_mode": ("data_saver_mode", "Data saver"),
    "toggle_wifi": ("wifi_enabled", "Wi-Fi"),
    "toggle_wifi_calling": ("wifi_calling_enabled", "Wi-Fi calling"),
}
_WANT_ON = re.compile(r"\b(?:on|enable|enabled|activate|reactivate)\b")
_WANT_OFF = re.compile(r"\b(?:off|disable|disabled|deactivate)\b")
_OFF_AND_ON = re.compile(r"\b(?:off|on) and (?:back |then )?(?:on|off)(?: again)?\b|\boff (?:then|again,? then) on\b")
_NOT_A_DIRECTION = re.compile(
    r"\bon (?:your|the|my) (?:phone|device|screen|settings|handset)\b|\bon and off\b|"
    r"\boff and on\b|\bon or off\b|\boff or on\b|\boff and (?:back|then) on\b|"
    r"\bon and (?:back|then) off\b|\boff (?:then|again,? then) on\b"
)


# Words naming each switch, to find the clause that talks about it.
_SWITCH_WORDS = {
    "toggle_airplane_mode": re.compile(r"airplane|flight"),
    "toggle_data": re.compile(r"\b(?:mobile|cellular) data\b|\bdata\b(?! (?:saver|roaming))"),
    "toggle_roaming": re.compile(r"roaming"),
    "toggle_data_saver_mode": re.compile(r"saver"),
    "toggle_wifi": re.compile(r"wi-?fi\b(?! calling)"),
    "toggle_wifi_calling": re.compile(r"wi-?fi calling"),
}
_CLAUSE = re.compile(r"\band\b|[,;]")


def _clause_about(tool: str, sentence: str) -> str:
    """The clause of ``sentence`` that names ``tool``'s switch ("turn on mobile data and
    turn off data saver": one direction each), or the whole sentence."""
    words = _SWITCH_WORDS.get(tool)
    if words is not None:
        for clause in _CLAUSE.split(sentence.lower()):
            if words.search(clause):
                return clause
    return sentence


def wanted_state(sentence: str) -> bool | None:
    """True/False when the sentence asks for a switch to end ON/OFF; None when it does not say
    ("toggle it", "switch it off and on again", "on your phone" is not a direction)."""
    low = _NOT_A_DIRECTION.sub(" ", sentence.lower())
    on, off = bool(_WANT_ON.search(low)), bool(_WANT_OFF.search(low))
    if on == off:
        return None
    return on


_CONNECTED = re.compile(r"\b(?:connected|using|active|in use)\b")
_NOT = re.compile(r"\b(?:not|isn't|aren't|n't|no longer)\b|n't\b")


def _condition_state(cond: str) -> bool | None:
    """The state a condition names ("if Data Saver is on": True; "if it isn't enabled":
    False; "if you're connected to one": True), None when it names none."""
    low = cond.lower()
    want = wanted_state(low)
    if want is None and _CONNECTED.search(low):
        want = True
    if want is None and re.search(r"\b(?:icon|symbol)\b", low):
        want = True  # "if you see an airplane icon": the state it shows is on
    if want is not None and _NOT.search(low):
        want = not want
    return want


_READ_TOOLS = frozenset(
    i.tool for i in DEVICE_INTENTS
    if i.tool.startswith("check_") or i.tool in ("can_send_mms", "run_speed_test")
)
# Switch-like states a yes/no question can ask about: words naming it, the device attribute
# (a bool, or a str compared with "connected"), the name the user says, and the check tool
# that reads it (None: the user answers from what the phone shows).
_STATES: tuple[tuple[re.Pattern[str], str, str, str | None], ...] = (
    (re.compile(r"airplane|flight mode"), "airplane_mode", "Airplane mode", None),
    (re.compile(r"\b(?:mobile|cellular) data\b|^(?:is |are )?(?:your )?data (?:on|off|enabled|disabled|turned)\b"),
     "data_enabled", "Mobile data", None),
    (re.compile(r"roaming"), "roaming_enabled", "Data roaming", None),
    (re.compile(r"data saver|saver mode"), "data_saver_mode", "Data saver", "check_data_restriction_status"),
    (re.compile(r"wi-?fi calling"), "wifi_calling_enabled", "Wi-Fi calling", "check_wifi_calling_status"),
    (re.compile(r"wi-?fi\b(?! calling)"), "wifi_enabled", "Wi-Fi", "check_wifi_status"),
    (re.compile(r"\bvpn\b"), "vpn_connected", "VPN", "check_vpn_status"),
)
# Nouns a pronoun in the next request refers to ("Data saver is on. Please turn it off.").
_NOUNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"payment request", re.I), "the payment request"),
    (re.compile(r"airplane mode|flight mode|airplane", re.I), "airplane mode"),
    (re.compile(r"wi-?fi calling", re.I), "Wi-Fi calling"),
    (re.compile(r"data saver", re.I), "data saver"),
    (re.compile(r"data roaming|roaming", re.I), "data roaming"),
    (re.compile(r"(?:mobile|cellular) data", re.I), "mobile data"),
    (re.compile(r"\bvpn\b", re.I), "the VPN"),
    (re.compile(r"\bapn\b", re.I), "the APN settings"),
    (re.compile(r"\bnetwork mode\b|\bpreferred network\b", re.I), "the network mode"),
    (re.compile(r"\bsim\b", re.I), "the SIM card"),
    (re.compile(r"wi-?fi", re.I), "Wi-Fi"),
)
_PHONE = re.compile(r"\b(?:phone|device|handset)\b", re.I)
_MMS_WORDS = re.compile(r"\bmms\b|picture|multimedia|photo", re.I)
# "I think you should switch data on. Would you mind doing that now?"
_DO_THAT = re.compile(r"\b(?:do|doing|try|trying) (?:that|it|this)\b", re.I)
_TERSE_QUESTION = re.compile(
    r"^\W*(?:your |the )?(?!(?:do|does|did|is|are|was|can|could|will|would|have|has|any|so|and|ok|okay|"
    r"what|which|how|why|when|where|who|ready|done|yes|no|right|correct)\b)[a-z-]+(?: [a-z-]+){0,2}\s*\?\W*$", re.I)
_PRONOUN = re.compile(r"\b(?:it|that|this one|them)\b", re.I)
_SELECT = re.compile(r"^\W*(?:(?:then|now|next),?\s+)?(?:please\s+)?(?:select|choose|pick|tap(?: on)?)\b")
_PAY_LIMIT = re.compile(
    r"\bif (?:the )?(?:amount|total|bill|sum)\b[^.;,]{0,40}?(?:\$([\d,]+(?:\.\d+)?) or (?:more|higher|above|over)|"
    r"(?:more than|over|above|higher than|at least|greater than) \$([\d,]+(?:\.\d+)?))[^.;]*?"
    r"\b(?:don't|do not|hold off|wait|not)\b", re.I)
_OTHERWISE_PAY = re.compile(r"^(?:otherwise|if not|else)\b,?[^.]*\bpay\b", re.I)
_AMOUNT_COND = re.compile(r"\b(?:if|unless|as long as|provided) (?:the )?(?:amount|total|bill amount|sum)\b", re.I)
_REPORT_BACK = re.compile(
    r",?\s+(?:and |then )?(?:please )?(?:let me know|tell me|report back|text me)\b"
    r"(?:\s+(?:once|when|after|as soon as)\b)[^.!?]*", re.I)
_SENT_REQUEST = re.compile(r"\b(?:i(?:'ve| have)? (?:just )?sent|request (?:that )?i (?:just )?sent|sent (?:you|to your))",
                           re.I)
_NO_REQUEST = "No payment request"
# An offer to change the line's plan ("would you like me to upgrade you to Unlimited?").
_PLAN_CHANGE = re.compile(
    r"\b(?:upgrad|chang|switch|mov|migrat)\w*\b(?:\s+\S+){0,6}?\s+(?:plans?|unlimited|premium)\b|"
    r"\bnew plans?\b|\bplan (?:change|upgrade)\b|\b(?:bigger|larger|higher|better|different|another|premium|pricier) plans?\b", re.I
)


_UNWANTED_LINE_CHANGES = (
    (re.compile(r"\bsuspend(?:ing)?\s+(?:your|the|this|that)\b|\b(?:put|place)\b[^.?!]{0,30}\bsuspension\b|"
                r"\btemporary suspension\b", re.I), r"\bsuspend"),
    (re.compile(r"\bcancel(?:l?ing|l?ed)? (?:your|the|this) (?:line|account|service|contract)\b", re.I),
     r"\bcancel"),
    (re.compile(r"\bextend(?:ing)?\b[^.?!]{0,30}\bsuspension\b", re.I), r"\bextend"),
    # "I can also enable Data Saver to help you conserve data": it limits data, no fix.
    (re.compile(r"\b(?:enabl|turn(?:ing)? on|switch(?:ing)? on|activat)\w*\b[^.?!]{0,12}\bdata saver\b", re.I),
     r"\bdata saver\b"),
    (re.compile(r"\bautomatic (?:payments?|billing)\b|\bauto[- ]?payments?\b", re.I),
     r"\bautomatic|\bauto[- ]?pay"),
    (re.compile(r"\b(?:autopay|auto-pay|paperless billing|insurance|device protection|protection plan|"
                r"add-on)\b", re.I), r"\b(?:autopay|auto-pay|paperless|insurance|protection|add-on)\b"),
    (re.compile(r"\bport(?:ing)? (?:your|the) number\b|\bnew (?:line|sim)\b", re.I), r"\bnew (?:line|sim)\b"),
    # An add-on the customer never asked about: a data or travel pass, a usage alert.
    (re.compile(r"\b(?:travel|roaming|data|day|week|international|monthly)(?: data)? pass(?:es)?\b|"
                r"\busage (?:alert|notification|warning)s?\b|\b(?:data|usage|spending) (?:alert|cap)s?\b", re.I),
     r"\bpass\b|\balert"),
    # A visit or a new device: the customer came to fix its phone on the call.
    (re.compile(r"\btechnician\b|\bengineer\b|\b(?:home|store|site) visit\b|\b(?:new|replacement) "
                r"(?:phone|device|handset)\b", re.I), r"\btechnician|\bnew (?:phone|device)\b"),
)
_RESUME = re.compile(r"\b(?:resum|reactivat|re-activat|unsuspend|un-suspend|lift(?:ing)? the suspension|"
                     r"restor(?:e|ing) (?:my|the|your) (?:line|service))", re.I)
# "6 months", "2 weeks": how long the customer wants something.
_DURATION = re.compile(r"\b(\d+)\s*(months?|weeks?|days?|years?)\b", re.I)
# "While you wait for the transfer, would you like me to ...": the offer is not the transfer.
_WAITING = re.compile(r"\b(?:while|until|before) (?:you(?:'re| are)? wait(?:ing)? for|we wait for|i|we) (?:the |your )?"
                      r"(?:transfer|connect)\w*(?: you)?\b", re.I)
_ROAMING_ON = re.compile(
    r"\b(?:enabl(?:e|ing)|turn(?:ing)? on|activat(?:e|ing)|add(?:ing)?|switch(?:ing)? on|set(?:ting)? up)\b"
    r"[^.?!]{0,30}\broaming\b|\b(?:turn|switch|set|put)(?:ing)? (?:the |your )?(?:(?:international|intl|data)\s+)*roaming (?:back )?on\b",
    re.I,
)
# "Would you like to keep it enabled?" said of roaming: roaming left on.
_KEEP_ON = re.compile(r"\bkeep(?:ing)? (?:it|roaming|data roaming|international roaming)\b[^.?!]{0,10}"
                      r"\b(?:on|enabled|active)\b", re.I)
# An amount of data the agent would add ("I'll add 5 GB", "refuel 1 GB").
_DATA_OFFERED = re.compile(
    r"\b(?:add|adding|refuel|refuelling|refueling|top(?:ping)? up(?: with)?|give you|purchase|buy)\s+"
    r"(?:you\s+)?(?:an?\s+)?(?:extra\s+|additional\s+|another\s+)?(\d+(?:\.\d+)?)\s*GB\b", re.I)
_GB = re.compile(r"(\d+(?:\.\d+)?)\s*GB\b", re.I)
_LINE_NUMBER = re.compile(r"\b\d{3}-\d{4}\b")
_WANTS_HUMAN = re.compile(r"\b(?:human|real person|representative|live agent|talk to a person)\b", re.I)
# An offer that names nothing itself ("Shall I go ahead?", "Would you like that?", "Okay?").
_BARE_OFFER = re.compile(r"\b(?:that|this|it)\b|\b(?:go ahead|proceed|continue|okay|ok|alright|sound good|"
                         r"submit|confirm)\b|^\W*(?:correct|right|accurate)\W*$|^\W*(?:do you want|would you like|shall|should) (?:me|us|i|we) to \w+\W*$",
                         re.I)
# "if you see it", "if it's there": the payment request the phone shows.
_SEE_IT = re.compile(r"^(?:you (?:can )?(?:see|got|received|have|find) (?:it|one|the (?:payment )?request)|"
                     r"it(?:'s| is) there|it (?:shows|appears|arrived|came through))\b", re.I)
# A condition on an app permission ("if Storage isn't allowed") or the APN name.
_PERMISSION_COND = re.compile(r"\b(storage|sms|phone|network)\b(?: permission)?[^,]*?\b(?:allowed|granted|"
                              r"enabled|permitted|given|on|off|missing|denied)\b|\b(?:no|without|lacks?|lacking|missing|doesn't have|"
                              r"does not have)\b (?:the |its |an? )?(storage|sms|phone|network) permission\b")
_WHICH_OF_THESE = re.compile(r"\bwhich (?:of these|of those|one|of them)\b", re.I)
_SIM_COND = re.compile(r"\b(?:missing|not detected|isn't detected|not inserted|not seated|no sim)\b")
_MMSC_COND = re.compile(r"\bmmsc(?: url)?\b[^,]*?\b(?:is |isn't |is not )?(not set|missing|empty|blank|isn't set|"
                        r"not configured|set|configured|there)\b")
_APN_COND = re.compile(r"\bapn(?: name)?\b[^,]*?\b(?:is|isn't|is not|shows|says|other than|not)\s+"
                       r"[\"'*]*(internet|broken|mms)\b")
# A condition on where the customer is ("if you're outside the US", "if you're abroad").
_LOCATION_COND = re.compile(
    r"^(?:and |but |so |also |then )?(?:if|since)\s+(?:you(?:'re| are)\s+)?(?:currently\s+|now\s+|still\s+)?"
    r"(outside (?:of )?(?:the (?:us|u\.s\.?|united states)|the country|your home country)|abroad|overseas|"
    r"travell?ing(?: abroad| internationally)?|out of the country|in another country|"
    r"in the (?:us|u\.s\.?|united states)|at home|inside the (?:us|u\.s\.?|united states))\b[^,]*,\s*(.+)$",
    re.I | re.S)
_TRANSFER_WORDS = re.compile(r"\btransfer|\bconnect you\b|\bput you through\b|\bescalat|"
                             r"\b(?:pass|hand)(?:ing)? you (?:over|on|off)?\s*to\b", re.I)
_ROAMING_OFF = re.compile(
    r"\b(?:disabl(?:e|ing)|turn(?:ing)? off|deactivat(?:e|ing)|remov(?:e|ing)|switch(?:ing)? off)\b"
    r"[^.?!]{0,30}\broaming\b|\b(?:turn|switch|set|put)(?:ing)? (?:the |your )?(?:(?:international|intl|data)\s+)*roaming (?:back )?off\b",
    re.I,
)
_ABROAD = re.compile(r"\btravel|\babroad\b|\boverseas\b|\bin (?!the united states\b)[A-Z][a-z]+", re.I)
_AT_HOME = re.compile(r"\bat home\b|\bnot travel|\bback (?:home|from)\b", re.I)
# "Can you confirm (that) you're back in the US?", "Are you still abroad?": where the customer is.
_ASKS_PLACE = re.compile(r"^\W*(?:[^,:?]{0,40}[,:]\s*)?(?:(?:can|could) you (?:please )?confirm (?:that |for me that )?you(?:'re| are)|"
                         r"(?:are|were) you)\b[^?]*\?", re.I)
_HOME_PLACE = re.compile(r"\b(?:back )?(?:at )?home\b|\bin the (?:us|u\.s\.?|usa|united states)\b|\bback in\b", re.I)
_FUTURE_TRIP = re.compile(
    r"\b(?:going|flying|heading) (?:to|abroad)\b|\bwill (?:be )?travel|\b(?:upcoming|next) trip\b", re.I
)


_SPEED_RESULT = re.compile(r"^Speed Test Result: [\d.]+ Mbps \(([A-Za-z ]+)\)|^Speed test failed")
_SPEED_WORDS = re.compile(r"\b(excellent|good|fair|poor)\b", re.I)
_SPEED_WHAT = re.compile(
    r"\bwhat (?:kind of |sort of |level of )?(?:internet |data )?speed\b|\bspeed (?:are|were|do|would) you "
    r"(?:be )?(?:hoping|expecting|looking|need|want|like|happy)|\bhow fast (?:do|would) you\b", re.I)
_SPEED_OK = re.compile(
    r"\b(?:acceptable|good enough|enough for you|okay with|ok with|"
    r"fine with|satisfied|happy with|settle|work for you|does that work)\b", re.I)
_RESOLVED = re.compile(
    r"\b(?:is|has) (?:the|your) (?:issue|problem|data|connection|internet)(?: issue| problem)? "
    r"(?:been )?(?:resolved|fixed|solved|sorted)\b|\bare you (?:satisfied|happy) with\b", re.I)
_NOT_ABOUT_STATE = re.compile(r"^(?:and |so )?(?:how long|since when|when did)\b", re.I)
_APN_SETTINGS = re.compile(r"\bapn settings?\b", re.I)
_APN_CHANGE = re.compile(r"\b(?:reset|restor|default|chang|updat|take effect|after)", re.I)
_LOOKS_RIGHT = re.compile(
    r"^(?:the amount|everything|it|that|this|all|the request|the payment request|the bill|the "
    r"details)(?:'s| is| looks| seems| appears| sounds)? ?(?:all )?(?:right|correct|fine|good|ok|"
    r"okay|as expected|in order|accurate)\b|^(?:the amount|it) (?:matches|checks out)\b|^you agree\b|"
    # "If it's there, please pay it": the check shows whether it is.
    r"^(?:it's|it is) there\b|^you (?:see|got|received) (?:it|one)\b|^it (?:arrived|came through|shows up)\b|"
    # "Once you've confirmed the amount, please make the payment."
    r"^you(?:'ve| have)? (?:confirmed|checked|verified|reviewed|seen|received|got|looked at)\b",
    re.I,
)
# "if it shows $110", "if the amount is 110 USD": the amount the payment is conditioned on.
_AMOUNT_SAID = re.compile(
    r"^(?:it|the request|the amount|the payment request|the bill|that)(?: shows| says| is| reads| lists| "
    r"matches| is for| comes to)(?: for| an amount of)? \$?(\d[\d,]*(?:\.\d+)?)(?: ?(?:usd|dollars))?\b", re.I)
_REQUEST_AMOUNT = re.compile(r"payment request for bill \S+ of ([\d.]+)")
_PAYMENT_WORDS = re.compile(r"\bpay\b|\bpayment\b", re.I)


def _noun_of(text: str) -> str | None:
    """The device thing ``text`` names first (the longest name at that place)."""
    hits = [(m.start(), -len(m.group(0)), noun) for pat, noun in _NOUNS if (m := pat.search(text))]
    return min(hits)[2] if hits else None


class TelecomUser(ScriptedUser):
    """Scripted user that performs the device actions an agent message asks for.

    The message is read segment by segment (:mod:`pytest_quantagent.env.dialogue`): only
    requests act (never a negated, conditional or past-tense one: "airplane mode doesn't
    seem to be on", "when you're back home, turn roaming off", a recap or closing
    summary); "check / tell me whether X" reads state and never changes it; a yes/no
    question about a switch ("is Wi-Fi calling on?") is answered from the phone; each
    distinct device action runs at most once per message, in the order asked; offers are
    answered yes/no as the scenario says; the message's other questions are answered in
    the same reply.

    With ``phone`` (a private copy of the episode's device after the initial state), a
    request for a switch to end in the state it is already in ("please turn mobile data on"
    when it is on) is answered in words instead of toggling the switch the wrong way; every
    call the user makes is mirrored on that copy. Switch states depend on the user's own
    actions only, so the copy stays exact for them. A payment is made only for a request
    the phone shows: unless the agent says it sent one, the user checks first.
    """

    def __init__(
        self,
        script: UserScript,
        *,
        seed: int = 0,
        intents: Sequence[DeviceIntent] = (),
        user_tool_names: Iterable[str] = (),
        phone: Toolkit | None = None,
    ) -> None:
        super().__init__(script, seed=seed, intents=intents, user_tool_names=user_tool_names)
        self.phone = phone
        self._already: list[str] = []
        self._tail: list[str] = []
        self._literal_re: re.Pattern[str] | None = None
        self._made: set[str] = set()
        self._speed_seen: str | None = None
        self._pay_if_amount: float | None = None
        self._pay_limit: tuple[float, bool] | None = None
        self._message = ""

    def respond(self, view: list[Message]) -> UserMessage:
        """Device calls first (one at a time), then one reply: the results, what is
        already as asked, state answers and the answers to the message's questions."""
        last = view[-1] if view else None
        if isinstance(last, ToolMessage):
            if m := _SPEED_RESULT.search(last.content):
                self._speed_seen = (m.group(1) or "no connection").lower()
            if last.content.startswith(_NO_REQUEST):
                self._pending = [c for c in self._pending if c.name != "make_payment"]
            m = _REQUEST_AMOUNT.search(last.content)
            if m and self._pay_if_amount is not None:
                shown, named = float(m.group(1)), self._pay_if_amount
                self._pay_if_amount = None
                if abs(shown - named) > 0.005:
                    self._withhold_payment(f"The request on my phone is for {shown:.2f} USD, not "
                                           f"{named:.2f}, so I haven't paid it.")
            if m and self._pay_limit is not None:
                shown = float(m.group(1))
                limit, inclusive = self._pay_limit
                self._pay_limit = None
                if shown >= limit if inclusive else shown > limit:
                    self._withhold_payment(f"The request on my phone is for {shown:.2f} USD, so I haven't paid it.")
            if self._pending:
                self._results.append(self._describe_result(last))
                return self._call(self._pending.pop(0))
            self._results.append(self._describe_result(last))
            said = " ".join(dict.fromkeys(self._results + self._tail))
            self._results, self._tail = [], []
            return UserMessage(content=said)
        if not (isinstance(last, AssistantMessage) and last.content and not last.tool_calls):
            return super().respond(view)
        text = dialogue.retype(last.content)  # "pls turn on data roamng on ur phone"
        self._message = text
        parts = dialogue.read(text)
        if any(p.act == Act.TRANSFER for p in parts):
            return UserMessage(content=self.respond_text(text))
        calls, words, used = self.plan(parts, text)
        answers = self.answers([p for i, p in enumerate(parts) if i not in used]) if self._opened else []
        if calls:
            self.note_unrequested(calls, text)
            self._results = list(words)
            self._tail = answers
            self._pending = calls[1:]
            return self._call(calls[0])
        if words or answers:
            self._fallbacks = 0
            return UserMessage(content=join_answers(words + answers))
        return UserMessage(content=self.respond_text(text))

    def speed_answer(self, text: str) -> str | None:
        """With a speed goal in the scenario (τ²-bench: "you absolutely want excellent internet
        speed"): what speed the customer wants, and whether a speed result (named in the
        agent's message, else the user's last speed test) or "is it resolved?" satisfies it.
        None when the question is not about that or no speed is known yet."""
        goal = self.script.facts.get("speed_goal")
        if not goal:
            return None
        if _SPEED_WHAT.search(text):
            return f"I need {goal} internet speed on my phone; nothing less is enough for me."
        about_speed = bool(re.search(r"\bspeed\b", text, re.I) or _SPEED_WORDS.search(text)) or bool(
            re.search(r"\bspeed\b", self._message, re.I)
        )
        if not ((_SPEED_OK.search(text) and about_speed) or _RESOLVED.search(text)):
            return None
        named = _SPEED_WORDS.findall(self._message) if _SPEED_WORDS.search(self._message) else []
        speed = named[-1].lower() if named else self._speed_seen
        if speed is None:
            return None
        if speed == goal:
            return f"Yes, {goal} speed is what I wanted."
        return f"No, {speed} speed is not enough for me. I need {goal} internet speed."

    def answer_question(self, text: str, seg: Segment) -> list[str]:
        """A question about the speed the customer wants (:meth:`speed_answer`), else as the
        base user's."""
        said = self.speed_answer(seg.text)
        if said is None:
            said = self.place_answer(seg)
        return [said] if said is not None else super().answer_question(text, seg)

    def place_answer(self, seg: Segment) -> str | None:
        """A yes/no question whether the customer is at home or abroad ("Can you confirm that
        you're back in the United States?", "Are you still travelling?"): yes or no from
        where the scenario puts it, then where that is. None for any other question."""
        where = self.script.facts.get("location", "")
        if not where or seg.either_or or not _ASKS_PLACE.search(seg.text):
            return None
        home = bool(_HOME_PLACE.search(seg.text))
        away = bool(_ABROAD.search(_HOME_PLACE.sub(" ", seg.text)))
        if home == away:
            return None
        yes = home != self._abroad()
        told = where if re.match(r"I\b", where) else where[0].lower() + where[1:]
        return f"{'Yes' if yes else 'No'}, {told}"

    def answer_offer(self, seg: Segment) -> str:
        """As :meth:`ScriptedUser.answer_offer`, except that what the customer did not come
        for is declined: a plan change (τ²-bench telecom users refuel data rather than
        change plans), suspending or cancelling the line, roaming the customer's location
        does not call for (turned on at home, off abroad)."""
        said = self.speed_answer(seg.text)
        if said is not None:
            return said  # "Would you be okay with a fair speed for now?"
        whole = dialogue.strip_markdown(self._message)
        bare = bool(_BARE_OFFER.search(seg.text))
        if (self.script.end == "transfer" and _WANTS_HUMAN.search(" ".join(self.script.requests))
                and not _TRANSFER_WORDS.search(_WAITING.sub(" ", whole if bare else seg.text))):
            # The customer asked for a human: it wants that, not the agent's own help ("I'll
            # pass you over to a human agent. Is that okay?" offers the transfer itself).
            return "No, thank you. I'd like to talk to a human agent, please."
        requests = " ".join(self.script.requests)
        # ("I'll turn roaming on for your line. Sound good?": a bare confirmation confirms
        # what the message says it will do.)
        proposal = whole if bare else seg.text
        for said_dir, wanted_dir, word in ((_ROAMING_ON, _ROAMING_OFF, "off"), (_ROAMING_OFF, _ROAMING_ON, "on")):
            if said_dir.search(proposal) and not wanted_dir.search(proposal) and wanted_dir.search(requests):
                # "you'd like me to turn roaming on for 555-0119?" to a customer who asked for it
                # off: the detail corrected, not just a no.
                return f"No, that's not right. I want data roaming turned {word}."
        if not self.offer_wanted(seg.text) or (bare and not self.offer_wanted(whole)):
            # ("... switching to our Premium plan. Shall I make that change?": what the
            # message proposes.)
            return self.script.refusal
        fix = self.correction(seg.text) or (self.correction(whole) if bare else None)
        if fix is None and bare:
            # "I have you down as Liam Evans, born 1973-08-05. Could you confirm?": a date of
            # birth, number or zip code told that is not the customer's own is corrected.
            fix = self.identity_mismatch(whole)
        if fix is not None:
            return fix
        return super().answer_offer(seg)

    def correction(self, text: str) -> str | None:
        """What is wrong in an offer or confirmation, as the customer says it: a line number
        that is not its own, an amount of data that is not the one it wants (None when
        nothing is)."""
        scen = " ".join([*self.script.requests, *self.script.facts.values()])
        spans = {(float(n), u.rstrip("s").lower()) for n, u in _DURATION.findall(scen)}
        told = {(float(n), u.rstrip("s").lower()) for n, u in _DURATION.findall(dialogue.strip_markdown(text))}
        if spans and told and not told & spans and {u for _, u in told} & {u for _, u in spans}:
            # "I'll suspend the line for 6 months" to a customer away for 3 months.
            how_long = next((f for f in [*self.script.facts.values(), *self.script.requests]
                             if _DURATION.search(f)), scen)
            return f"No, that's not right. {how_long}"
        location = self.script.facts.get("location", "")
        places = set(_PLACE.findall(location))
        told_places = set(_YOU_IN.findall(dialogue.strip_markdown(text)))
        if places and told_places and not told_places & places:
            # "To recap: you're in Spain, ..." to a customer travelling in Italy.
            return f"No, that's not right. {location}"
        mine = set(_LINE_NUMBER.findall(" ".join([*self.script.requests, *self.script.identity.values(),
                                                  *self.script.facts.values()])))
        said = set(_LINE_NUMBER.findall(text))
        if mine and said and not said & mine:
            return f"No, that's not my line. My number is {sorted(mine)[0]}."
        offered = {float(n) for n in _DATA_OFFERED.findall(text)}
        if offered:
            for reply in self.script.answers:
                want = {float(n) for n in _GB.findall(reply.say)}
                if want and not offered & want:
                    return f"No, {reply.say[0].lower()}{reply.say[1:]}"
        return None

    def offer_wanted(self, text: str) -> bool:
        """False for an offer of a change the scenario does not ask for (see
        :meth:`answer_offer`); True otherwise (troubleshooting steps are agreed to)."""
        requests = " ".join(self.script.requests)
        if _PLAN_CHANGE.search(text) and not re.search(r"\bplan\b", requests, re.I):
            return False
        if _RESUME.search(requests) and re.search(r"\bsuspen(?:d|ded|ding|sion)\b", text, re.I) and not _RESUME.search(text):
            # "You'd like line 555-0116 suspended, is that right?" to a customer who wants it
            # resumed.
            return False
        for pattern, word in _UNWANTED_LINE_CHANGES:
            if pattern.search(text) and not re.search(word, requests, re.I):
                return False
        keep_on = bool(_KEEP_ON.search(text)) and "roaming" in text.lower()
        if _ROAMING_ON.search(text) or _ROAMING_OFF.search(text) or keep_on:
            location = " ".join(
                [self.script.facts.get("location", ""), requests]
            )
            abroad = bool(_ABROAD.search(location)) and not _AT_HOME.search(location)
            if (_ROAMING_ON.search(text) or keep_on) and not abroad and not _FUTURE_TRIP.search(requests):
                return False
            if _ROAMING_OFF.search(text) and abroad:
                return False
        return True

    def _withhold_payment(self, why: str) -> None:
        """The payment the agent's condition rules out, once the phone shows the request: a
        pending ``make_payment`` is dropped and ``why`` said first."""
        if any(c.name == "make_payment" for c in self._pending):
            self._pending = [c for c in self._pending if c.name != "make_payment"]
            self._tail.insert(0, why)

    def respond_text(self, text: str) -> str:
        """As :meth:`ScriptedUser.respond_text`; when asked for name and date of birth
        together, both are given in one answer."""
        reply = super().respond_text(text)
        if matches(text, _DOB) and "birth" not in reply.lower() and reply.startswith("My "):
            dob = next(
                (r.say for r in self.script.answers if any("birth" in g for g in r.keywords)), None
            )
            if dob is not None:
                reply = f"{reply} {dob}"
        return reply

    def _done_before(self, question: str) -> str | None:
        """The answer to "have you <changed X>?" from the user's own calls so far (None when
        the question names no change the user can make)."""
        tools = [n for n, _ in self._sentence_calls(question, reading=True) if n not in _READ_TOOLS]
        if not tools:
            return None
        if all(t in self._made for t in tools):
            return "Yes, I did that earlier."
        return "No, I haven't done that yet."

    def changes_state(self, tool: str) -> bool:
        return tool not in _READ_TOOLS

    def names_tool(self, tool: str, text: str) -> bool:
        """As the base user's; a switch is also named by its words ("Data Saver", "roaming")
        and a restart by "turn the phone off and on"."""
        if super().names_tool(tool, text):
            return True
        words = _SWITCH_WORDS.get(tool)
        return words is not None and bool(words.search(text.lower()))

    def _call(self, call: ToolCall) -> UserMessage:
        self._made.add(call.name)
        if self.phone is not None and self.phone.has_tool(call.name):
            try:
                self.phone.call(call.name, call.arguments)
            except ToolError:
                pass  # the real environment reports the same failure
        return super()._call(call)

    def device_calls(self, text: str) -> list[ToolCall]:
        """The user tool calls an agent message asks for, in the order asked."""
        if not text:
            return []
        return self.plan(dialogue.read(text), text)[0]

    def plan(self, parts: Sequence[Segment], text: str) -> tuple[list[ToolCall], list[str], set[int]]:
        """``(calls, words, used)``: the device calls the segments ask for (each tool once,
        in order), what the user says instead of a call (a switch already as asked, the
        state a question asks about) and the indices of the segments that were about the
        device."""
        self._already = []
        self._pay_limit = None
        if m := _PAY_LIMIT.search(dialogue.strip_markdown(text)):
            # "If the amount shown is $500 or more, don't pay it yet; otherwise pay it": the
            # amount on the phone decides.
            self._pay_limit = (float((m.group(1) or m.group(2)).replace(",", "")), m.group(1) is not None
                               or bool(re.search(r"at least", m.group(0), re.I)))
        names: list[tuple[str, dict[str, Any]]] = []
        words: list[str] = []
        used: set[int] = set()
        last_noun: str | None = None
        acted_headers: set[str] = set()
        prev: Segment | None = None
        for i, seg in enumerate(parts):
            if i:
                prev = parts[i - 1]
            found: list[tuple[str, dict[str, Any]]] = []
            said: list[str] = []
            if seg.header and seg.header in acted_headers:
                # "Please turn Airplane Mode off:" then "1. Swipe down ... 2. Tap the icon":
                # the items say how, they are not further actions.
                used.add(i)
                continue
            if (
                seg.act == Act.OFFER and prev is not None and not prev.asks
                and _BARE_CONFIRM.match(seg.text.strip())
            ):
                # "It looks like Airplane Mode may be on. Can you confirm?"
                found, said = self._state_reading(prev.text, True)
            elif seg.act == Act.QUESTION and _HAVE_YOU.match(seg.text) and (
                done := self._done_before(seg.text)
            ) is not None:
                said = [done]
            elif seg.act == Act.QUESTION and (
                _NOT_ABOUT_STATE.search(seg.text)
                or any(matches(seg.text, r.keywords) for r in self.script.answers)
            ):
                # "How long have you had trouble sending MMS?", "Do you have access to
                # Wi-Fi?": the scenario answers, the phone is not asked.
                pass
            elif seg.asks and not seg.negated and not seg.past and seg.act != Act.OFFER:
                sentence = seg.text
                if seg.act == Act.REQUEST and seg.conditional:
                    found, said = self._conditional(seg, prev, last_noun, bool(names or self._already), names)
                elif seg.act == Act.REQUEST and not seg.check and not seg.conditional:
                    found = self._sentence_calls(sentence)
                    if not found and not self._already and prev is not None and _DO_THAT.search(sentence):
                        # "Turning it off should help — can you do that?"
                        found = self._sentence_calls(prev.text)
                        if not found and not self._already and last_noun and _PRONOUN.search(prev.text):
                            found = self._sentence_calls(_PRONOUN.sub(last_noun, prev.text, count=1))
                    if (
                        all(f[0] in _READ_TOOLS for f in found) and not self._already
                        and last_noun and _PRONOUN.search(sentence)
                    ):
                        # "Tell me your network mode, then set it to 4G/5G preferred."
                        other = self._sentence_calls(_PRONOUN.sub(last_noun, sentence, count=1))
                        if not found or any(f[0] not in _READ_TOOLS for f in other):
                            found = other
                    if (not found and _OTHERWISE_PAY.search(sentence)
                            and re.search(r"\bpayment request\b|\brequest\b[^.]*\b(?:phone|sent)\b", text, re.I)):
                        # "The request is on your phone. ...; otherwise go ahead and pay."
                        found = self._sentence_calls("pay the payment request")
                    if not found and not self._already and _PRONOUN.search(sentence) and _PHONE.search(sentence):
                        # "To get your phone on the network, please turn it off and back on."
                        found = self._sentence_calls(_PRONOUN.sub("your phone", sentence, count=1))
                elif seg.act in (Act.QUESTION, Act.REQUEST) and not seg.conditional:
                    found, said = self._state_reading(sentence, seg.check)
                    if not found and not said and _TERSE_QUESTION.match(sentence):
                        # "network mode?": a bare name of something the phone shows asks to read it.
                        found, said = self._state_reading(f"Check your {sentence}", True)
                    if not found and not said and last_noun and _PRONOUN.search(sentence):
                        # "The payment request is on its way. Could you check that you got it?"
                        found, said = self._state_reading(
                            _PRONOUN.sub(last_noun, sentence, count=1), seg.check
                        )
            if (not found and not said and seg.act == Act.QUESTION and _WHICH_OF_THESE.search(seg.text)
                    and "check_network_mode_preference" in self.user_tool_names
                    and sum(1 for p in parts[:i] if not p.asks and _extract_mode(p.text).get("mode")) >= 2):
                # A table of network modes, then "Which of these is your phone set to?": the
                # phone's mode is read.
                found = [("check_network_mode_preference", {})]
            if found or said:
                used.add(i)
                if not seg.header:
                    acted_headers.add(seg.text)
            names.extend(found)
            words.extend(said)
            last_noun = _noun_of(seg.text) or last_noun
        words = self._already + words
        calls: list[ToolCall] = []
        seen: set[Any] = set()
        for name, args in names:
            if name in seen and not (name == "grant_app_permission" and (name, str(sorted(args.items()))) not in seen):
                continue  # each action once; each permission granted once
            seen.add((name, str(sorted(args.items()))))
            if name == "make_payment" and "check_payment_request" not in seen and (
                    not _SENT_REQUEST.search(text) or _AMOUNT_COND.search(text)):
                # Only a request the phone shows is paid: look first ("if the amount shown is
                # $500 or more, don't pay it; otherwise pay it": the amount is looked at too).
                seen.add("check_payment_request")
                calls.append(self._tool_call("check_payment_request", {}))
            seen.add(name)
            calls.append(self._tool_call(name, args))
        return calls, list(dict.fromkeys(words)), used

    def _conditional(
        self, seg: Segment, prev: Segment | None, last_noun: str | None, acted: bool,
        planned: Sequence[tuple[str, dict[str, Any]]],
    ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
        """A request under a condition the user can judge now: a switch state ("if Data
        Saver is on, turn it off"; "if so, ..." takes the state the question before asked
        about), read from the phone as this message's earlier actions leave it, or the
        completion of an action this message asks for ("once that's set, run a speed test").
        Any other condition (the user's situation, an outcome to come) is not acted on."""
        where = _LOCATION_COND.match(seg.text.strip())
        if where is not None:
            # "If you're outside the US, turn on data roaming": judged on where the
            # scenario's customer is.
            home = bool(re.search(r"^(?:in the|inside|at home)", where.group(1), re.I))
            if self._abroad() == home:
                return [], []
            return self._sentence_calls(where.group(2)), []
        parts = dialogue.condition(seg.text)
        if parts is None:
            return [], []
        word, cond, then = parts
        # "Turn Airplane Mode off only if it's on": with nothing named before, "it" is the
        # step's own thing.
        noun = _noun_of(cond) or last_noun or (_noun_of(then) if _PRONOUN.search(cond) else None)
        said: list[str] = []
        judged = self._judge_condition(cond, then)
        if judged is not None:
            return judged
        if acted and word in dialogue.SEQUENCE_WORDS:
            holds = True
        elif (_LOOKS_RIGHT.search(cond) or _AMOUNT_SAID.search(cond)) and (
            noun == "the payment request" or _PAYMENT_WORDS.search(then)
        ):
            # "if the amount looks right, pay it": the user judges by what the phone shows;
            # the check goes first and the payment is dropped when it shows no request, or
            # another amount than the condition names ("if it shows $110").
            holds = True
            if m := _AMOUNT_SAID.search(cond):
                self._pay_if_amount = float(m.group(1).replace(",", ""))
        elif _SEE_IT.search(cond.strip()) and (noun == "the payment request" or _PAYMENT_WORDS.search(then)):
            # "check your phone for it and, if you see it, pay": the check goes first and
            # the payment is dropped when the phone shows no request.
            holds = True
        else:
            subject = cond if _noun_of(cond) else f"{noun or ''} {cond}"
            mode = _extract_mode(cond).get("mode")
            if mode is not None and self.phone is not None and (noun == "the network mode" or (
                    noun is None and re.search(r"\bnetwork mode\b|\bpreferred network\b", then, re.I))):
                # ("If your phone is on 3G or 2G only, set the network mode to ...": the step
                # names it.)
                # "If it's 3G only / anything other than 4G/5G, change it to ...": the phone's
                # current mode.
                current = str(getattr(self.phone.db.device.network_mode_preference, "value", ""))
                other = bool(re.search(r"\bother than\b|\bnot\b|n't\b", cond, re.I))
                # "if it's on 2G or 3G only": either mode named.
                named = {m for m, groups in _MODES.items() if matches(cond, groups)} if re.search(
                    r"\bor\b", cond, re.I) else {mode}
                if (current in named) == other:
                    return [], []
                if _PRONOUN.search(then):
                    then = _PRONOUN.sub(noun, then, count=1)
                return self._sentence_calls(then), []
            state = next(
                ((attr, label) for pat, attr, label, _ in _STATES if pat.search(subject.lower())), None
            )
            bare = dialogue.BARE_CONDITIONS.get(cond.strip().lower())
            want = None if bare is not None else _condition_state(cond)
            if want is None and prev is not None:
                # "whether X is on? If it is / if so / if not, ..."
                asked = wanted_state(prev.text)
                if asked is None:
                    # "check whether you're connected to a VPN, and if you are, ...": the
                    # question asked whether it is on.
                    want = bare
                else:
                    want = asked if bare is not False else not asked
            if state is None or want is None:
                return [], []
            attr, label = state
            now = self._state(attr)
            if now is None:
                return [], []
            toggles = sum(1 for name, _ in planned if _SWITCHES.get(name, ("",))[0] == attr)
            now = now != (toggles % 2 == 1)
            holds = now == want
            said = [] if toggles else [
                f"My phone shows the VPN is {'connected' if now else 'not connected'}."
                if attr == "vpn_connected" else f"{label} is {'ON' if now else 'OFF'} on my phone."
            ]
        if not holds:
            return [], said
        # "If it's off, restart your phone and let me know once it's back up": the report asked
        # for afterwards names no step, so its pronoun is not the condition's thing.
        then = _REPORT_BACK.sub("", then)
        if noun and _PRONOUN.search(then):
            then = _PRONOUN.sub(noun, then, count=1)
        calls = self._sentence_calls(then)
        if not calls and noun == "the payment request" and re.search(r"\bpay\b", then, re.I):
            calls = self._sentence_calls("pay the payment request")  # "..., go ahead and pay."
        return calls, said

    def _judge_condition(
        self, cond: str, then: str
    ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None:
        """A condition on an app permission ("if Storage isn't allowed, grant it") or on
        the APN name ("if the APN name isn't internet, reset it"), read from the phone;
        None for any other condition."""
        if self.phone is None:
            return None
        device = self.phone.db.device
        low = cond.lower()
        negated = bool(_NOT.search(low)) or bool(re.search(r"\bother than\b|\bmissing\b|\bdenied\b|\boff\b", low))
        sim = _SIM_COND.search(low)
        if sim is not None and re.search(r"\bsim\b", f"{low} {then.lower()} {self._message.lower()}"):
            # "Check your SIM status. If it says it's missing, reseat it": read on the phone.
            missing = bool(device.sim_card_missing)
            if missing == (not re.search(r"\bnot (?:missing|absent)\b", low)):
                return self._sentence_calls(_PRONOUN.sub("the SIM card", then, count=1)), []
            return [], []
        perm = _PERMISSION_COND.search(low)
        names = dict.fromkeys(re.findall(r"\b(storage|sms|phone|network)\b", low))
        if perm is not None and len(names) > 1 and re.search(r"\b(?:grant|allow|enable|give|turn on)\b", then, re.I):
            # "if SMS or storage is missing, grant whichever is missing": each permission named.
            app = next((a for a in device.app_statuses if a in f"{low} {then.lower()} {self._message.lower()}"), None)
            if app is not None:
                lacking = [n for n in names if not getattr(device.app_statuses[app].permissions, n, False)]
                if negated:
                    return [("grant_app_permission", {"app_name": app, "permission": n}) for n in lacking], []
        if perm is not None:
            app = next((a for a in device.app_statuses if a in f"{low} {then.lower()} {self._message.lower()}"), None)
            if app is None:
                return None
            name = perm.group(1) or perm.group(2)
            has = bool(getattr(device.app_statuses[app].permissions, name, False))
            if has == (not negated):
                if re.search(r"\b(?:grant|allow|enable|give|turn on)\b", then, re.I) and not has:
                    return [("grant_app_permission", {"app_name": app, "permission": name})], []
                return self._sentence_calls(then), []
            state = "has" if has else "does not have"
            return [], [f"The {app} app {state} the {name} permission on my phone."]
        mmsc = _MMSC_COND.search(low)
        if mmsc is not None:
            # "If the MMSC URL is not set, reset the APN settings": read in the APN settings.
            unset = device.active_apn_settings.mmsc_url is None
            if unset == bool(re.search(r"\bnot\b|n't\b|missing|empty|blank", mmsc.group(0))):
                return [("check_apn_settings", {}), *self._sentence_calls(then)], []
            return [("check_apn_settings", {})], []
        apn = _APN_COND.search(low)
        if apn is not None:
            current = str(getattr(device.active_apn_settings.apn_name, "value", device.active_apn_settings.apn_name))
            if (current.lower() == apn.group(1)) != negated:
                if _PRONOUN.search(then):
                    then = _PRONOUN.sub("the APN settings", then, count=1)
                return self._sentence_calls(then), []
            return [], [f"My APN name is {current}."]
        return None

    def _abroad(self) -> bool:
        """Whether the scenario's customer is abroad now."""
        requests = " ".join(self.script.requests)
        location = " ".join([self.script.facts.get("location", ""), requests])
        return bool(_ABROAD.search(location)) and not _AT_HOME.search(location)

    def _tool_call(self, name: str, args: dict[str, Any]) -> ToolCall:
        self._n_calls += 1
        return ToolCall(id=f"user_call_{self._n_calls}", name=name, arguments=args, requestor="user")

    def _state_reading(self, sentence: str, check: bool) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
        """A question about the device: read tools it names; switches it asks about are
        answered from the phone ("Mobile data is OFF on my phone."), or with their check
        tool when the agent asks to check one that has a tool. Never a change."""
        low = sentence.lower()
        found = [
            f for f in self._sentence_calls(sentence, reading=True) if f[0] in _READ_TOOLS
        ]
        if (
            _APN_SETTINGS.search(low) and "check_apn_settings" in self.user_tool_names
            and not any(f[0] == "check_apn_settings" for f in found) and not _APN_CHANGE.search(low)
        ):
            # "SIM status and APN settings? Check both.": naming them in a question asks to read.
            found.append(("check_apn_settings", {}))
        said: list[str] = []
        for pattern, attr, label, tool in _STATES:
            if not pattern.search(low):
                continue
            if any(f[0] == "check_status_bar" for f in found) and not re.search(
                rf"\b(?:is|are) (?:your |the )?(?:{pattern.pattern})", low
            ):
                # "What icons do you see (signal bars, airplane icon, ...)?" asks what the
                # status bar shows, which the check answers; not each switch as well.
                continue
            if check and tool is not None and any(f[0] == tool for f in found):
                continue
            found = [f for f in found if f[0] != tool]
            state = self._state(attr)
            if state is None:
                continue
            if attr == "vpn_connected":
                said.append(f"My phone shows the VPN is {'connected' if state else 'not connected'}.")
            else:
                said.append(f"{label} is {'ON' if state else 'OFF'} on my phone.")
        return found, said

    def _state(self, attr: str) -> bool | None:
        if self.phone is None:
            return None
        value = getattr(self.phone.db.device, attr, None)
        return bool(value) if value is not None else None

    def _sentence_calls(
        self, sentence: str, reading: bool = False
    ) -> list[tuple[str, dict[str, Any]]]:
        """Tools one segment names. ``reading``: a question about state (check tools are
        kept even where a change tool also matches, nothing is "already as asked")."""
        low = sentence.lower()
        found: list[tuple[int, str, dict[str, Any]]] = []
        seen: set[str] = set()
        # A literal tool name is always understood (word-bounded, so toggle_data is not
        # found inside toggle_data_saver_mode).
        for m in self._literal_names().finditer(low):
            name = m.group(0)
            if name not in seen:
                found.append((m.start(), name, {}))
                seen.add(name)
        if not seen:
            norm = _normalize(_MENU_PATH.sub("", sentence))
            # "Wi-Fi Calling status" names no Wi-Fi status, "airplane mode" no network mode.
            bare = {"wifi": _WIFI_CALLING_WORDS.sub(" calling ", norm), "network_mode": _OTHER_MODE.sub(r" \1 ", norm)}
            for intent in self.intents:
                kind = ("wifi" if intent.tool in ("check_wifi_status", "toggle_wifi")
                        else "network_mode" if "network_mode" in intent.tool else "")
                words = bare[kind] if kind else norm
                groups = [g for g in intent.keywords if all(" " + w in words for w in g)]
                if intent.tool in self.user_tool_names and groups:
                    # Where the phrase naming it is complete ("check which permissions ...
                    # and whether Wi-Fi calling is on": permissions first).
                    pos = min(max(norm.find(" " + w) for w in g) for g in groups)
                    found.append((pos, intent.tool, {}))
                    seen.add(intent.tool)
            if (not found and not reading and _SELECT.match(low) and _extract_mode(sentence)
                    and "set_network_mode_preference" in self.user_tool_names):
                # "Select 4G/5G preferred" (a step after opening the network-type menu): a
                # network mode chosen is the mode set.
                found.append((0, "set_network_mode_preference", {}))
                seen.add("set_network_mode_preference")
            if "can_send_mms" in seen and not _MMS_WORDS.search(low):
                found = [f for f in found if f[1] != "can_send_mms"]  # "the MMSC URL"
            if "check_status_bar" in seen and "check_network_status" in seen and not matches(
                sentence, _NETWORK_STATUS_WORDS
            ):
                # "check whether the status bar shows signal": the status bar, not the
                # network status as well.
                found = [f for f in found if f[1] != "check_network_status"]
            for weaker, stronger in _EXCLUSIVE.items():
                if weaker in seen and stronger in seen and not reading:
                    found = [f for f in found if f[1] != weaker]
            if not re.search(r"\b(?:connect|enable|turn)\b", low):  # "is it connected?"
                found = [f for f in found if f[1] != "connect_vpn"]
            # "data roaming" / "data saver" name other switches than mobile data.
            if ("roaming" in low or "saver" in low) and not re.search(
                r"\b(?:mobile|cellular) data\b", low
            ):
                found = [f for f in found if f[1] != "toggle_data"]
            if _OFFER.match(low):  # "Would you like to pay the bill?" asks for agreement
                found = [f for f in found if f[1] != "make_payment"]
        resolved = []
        for pos, name, _ in found:
            spec = next((i for i in self.intents if i.tool == name), None)
            said = spec.extract(sentence) if spec and spec.extract else {}
            if name == "set_network_mode_preference" and "mode" not in said:
                # "What is your network mode set to?" names no mode: it is a question.
                name, said, spec = "check_network_mode_preference", {}, None
            # What the agent said wins; the scenario fills in what it left out (the user
            # knows which app misbehaves), then the intent's defaults.
            script = self._script_args(name) or {}
            args = {**(spec.defaults if spec else {}), **script, **said}
            resolved.append((pos, name, args))
        if not reading:
            resolved = [f for f in resolved if not self._already_as_asked(f[1], sentence)]
        found = resolved
        found.sort(key=lambda x: x[0])
        return [(name, args) for _, name, args in found]

    def _literal_names(self) -> re.Pattern[str]:
        if self._literal_re is None:
            names = "|".join(
                re.escape(n) for n in sorted(self.user_tool_names, key=len, reverse=True)
            )
            self._literal_re = re.compile(
                rf"(?<![a-z_])(?:{names})(?![a-z_])" if names else r"(?!)"
            )
        return self._literal_re

    def _already_as_asked(self, tool: str, sentence: str) -> bool:
        if self.phone is None or tool not in _SWITCHES:
            return False
        # "toggle it off and back on" names no end state, even split into clauses.
        want = None if _OFF_AND_ON.search(sentence.lower()) else wanted_state(_clause_about(tool, sentence))
        attr, label = _SWITCHES[tool]
        state = getattr(self.phone.db.device, attr)
        if want is None or state != want:
            return False
        self._already.append(f"{label} is already {'ON' if state else 'OFF'} on my phone.")
        return True
