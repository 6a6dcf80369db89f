"""Dialogue acts: what each part of an agent message does, for the scripted user.

Instruction-tuned chat models write full sentences, markdown lists, empathy, recaps and
closing summaries. A user that reacts to device or topic words wherever they appear acts on
a negation ("airplane mode doesn't seem to be on"), re-runs every step of a recap and
answers questions nobody asked. This module reads a message the way a person does:

1. :func:`segments` splits it into sentences and list items, markdown stripped; a list
   item keeps the header it belongs to ("Here's what we did:", "Please provide:").
2. :func:`classify` gives each segment one :class:`Act` and its modifiers (negated,
   conditional, past), from the pattern tables below, first match wins.

Only :attr:`Act.REQUEST` and :attr:`Act.QUESTION` / :attr:`Act.OFFER` segments ask the user
for anything; statements (explanations, recaps, reports, empathy, conditionals, summaries)
get no reaction. Domain knowledge (which words name which device action, which facts
answer which question) stays in the domain's user module; this layer only knows English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Act(str, Enum):
    """What a segment of an agent message does."""

    REQUEST = "request"  # asks the user to do something ("Please restart your phone.")
    QUESTION = "question"  # asks for information, yes/no or either/or
    OFFER = "offer"  # asks permission / agreement ("Would you like me to ...?", "Shall I ...?")
    STATEMENT = "statement"  # explanation, recap, report, empathy, conditional, summary
    TRANSFER = "transfer"  # the agent hands the user over to a human
    CLOSING = "closing"  # "Is there anything else I can help you with?"
    GREETING = "greeting"  # "How can I help you today?"


@dataclass(frozen=True)
class Segment:
    """One sentence or list item of an agent message and what it does.

    ``header``: the text of the list header this item belongs to ("" when none);
    ``negated``: the request is negated ("don't restart yet", "no need to reset");
    ``conditional``: it depends on a condition ("if/when you ..."); ``past``: it reports
    what was done or is so (recap, report); ``check``: it asks to look at a state
    ("check whether X", "tell me if X"), never to change it; ``either_or``: a question
    offering alternatives.
    """

    text: str
    act: Act
    header: str = ""
    negated: bool = False
    conditional: bool = False
    past: bool = False
    check: bool = False
    either_or: bool = False

    @property
    def asks(self) -> bool:
        """True when the segment wants a reaction from the user."""
        return self.act in (Act.REQUEST, Act.QUESTION, Act.OFFER)


# -- segmentation ---------------------------------------------------------------------------

_MARKDOWN = (
    (re.compile(r"\*\*|__|`+"), ""),
    (re.compile(r"(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])"), ""),
    (re.compile(r"^\s{0,3}#{1,6}\s*", re.MULTILINE), ""),
    (re.compile(r"^\s*>\s?", re.MULTILINE), ""),
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),
)
_ITEM = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)]|[a-z][.)]|step \d+[:.])\s+", re.IGNORECASE)
# A sentence ends at . ! ? followed by space and something that starts a sentence; not
# inside "e.g." or a number ("$80.50").
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9#$])"
                           # terse chat: "… set to? dont change it yet"
                           r"|(?<=\?)\s+(?=[a-z]+\b)")
# Clauses that do different things inside one sentence ("X doesn't seem on, so let's check Y").
_CLAUSE_END = re.compile(
    r"\s*;\s+|,\s+and\s+(?=(?:once|when|after|if|then)\b)|\s+and,\s+(?=(?:once|when|after|if|then)\b)|(?<!go ahead),?\s+and also\s+|\s+[—–]\s+|\s+-\s+(?=[a-z])|,\s+(?:so(?!\s+(?:that\s+)?(?:you|we|i|it|this|that|they|there|nothing)(?:'s|'re|'ll)?\s+(?:can|could|will|would|won't|don't|doesn't|do not|does not|is|isn't|are|aren't|not|never|get|gets|have|has|stay|stays|keep|keeps|work|works|reconnect|reconnects|happen|happens|should)\b)|but|because|since|and then|then|after that)\s+|"
    # "..., so you can reorder it?" and "..., so it reconnects": a purpose, part of its
    # clause (not split above); "..., and let me know what it shows": a check of its own.
    r",\s+and\s+(?=(?:please\s+)?(?:let me know|tell me|report back|send me|check whether|check if)\b)|"
    # "please don't restart it yet, just tell me if data is on": the check after the negation.
    r",\s+(?=(?:just|only|instead|but just) (?:tell me|check|look at|confirm|read|see) (?:if|whether|what|which|how)\b)|"
    r"\s+(?:and then|after that|afterwards)\s+|\s+then\s+(?=[a-z]+\b(?! (?:it|that)\b))|"
    r"\s+(?=(?:before|after|once|when|until|while) you\b)|:\s+(?=(?:please|could you|can you|kindly|go ahead)\b)|"
    # "Check your APN settings: if the MMSC URL is not set, reset them": a step, then a
    # conditional step.
    r":\s+(?=if\b[^,?]{3,60},)|"
    # "Two things: turn your mobile data on, and ...": the header's count, then the steps.
    r"(?:(?<=\bthings)|(?<=\bsteps)|(?<=\bstep)|(?<=\bnext)|(?<=\bfirst)|(?<=\bfinally)|(?<=\bnow)):\s+(?=(?:turn|switch|toggle|enable|disable|restart|reboot|reset|reseat|set|grant|"
    r"pay|open|go|run|try|make|remove|insert|connect|disconnect)\b)|"
    # Inline enumerations: "Two checks: (1) is data on, and (2) is a VPN connected?"
    # (Not a choice: "is it (a) no longer needed or (b) ordered by mistake?" is one question.)
    r":\s+(?=\(?(?:\d|[a-h])\)\s)(?![^?.!]*\bor\s+\(?(?:\d|[a-h])\)\s)|"
    r"(?<!\bor),?\s+(?:and\s+)?(?=\((?:\d|[a-h])\)\s)(?![^?.!]*\bor\s+\((?:\d|[a-h])\)\s)|\s+(?=\d\)\s)|"
    # Two questions in one sentence: "How would you like to pay, and do you want me to proceed?"
    r",\s+(?:and|also|plus)\s+(?=(?:do|would|can|could|shall|should|may|is|are|will) (?:you|i|we)\b)",
    re.IGNORECASE,
)


_REASON = re.compile(r"^(?:and |so )?(?:since|because|as|given that|now that)\b", re.IGNORECASE)
_REASON_THEN_PLEASE = re.compile(
    r",\s+(?=(?:please|kindly|could you|can you|would you|will you|what|which|how|let's|let me know|"
    r"tell me|i(?:'ll| will)? need)\b)", re.IGNORECASE)


_REASONING = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.IGNORECASE | re.DOTALL)


def strip_reasoning(text: str) -> str:
    """``text`` without the reasoning blocks some chat models leak into their reply
    (Qwen3's ``<think>…</think>``, an unclosed one to the end): what the agent thinks is not
    said to the user, so an imperative inside it asks for nothing."""
    return _REASONING.sub(" ", text)


# A request run on into a confirmation question without a full stop ("Please make the payment
# for the request I sent you confirm that I should proceed?", a degraded model's fusion of two
# sentences): two acts, split before the confirmation.
_RUN_ON_CONFIRM = re.compile(
    r"^(please\s+\S.*?\S)\s+((?:do you |can you |could you |please )?confirm (?:that )?(?:i|we) "
    r"(?:should|can|may)\b.*)$", re.IGNORECASE | re.DOTALL)


def _split_run_on(clause: str) -> list[str]:
    m = _RUN_ON_CONFIRM.match(clause)
    return [m.group(1), m.group(2)] if m else [clause]


# "keep / leave X on", "(but leave mobile data on)", "leave both as they are": asks that a
# state stays as it is, so never a change; removed before the message is read.
_KEEP = re.compile(
    r"\(\s*(?:but |and |please |just )*(?:keep|leave)\b[^()]*\)"
    r"|(?:(?:,\s*|\s+)(?:but|and)\s+|^|(?<=[.!?:]\s)|(?<=\bi'll\s)|(?<=\bwe'll\s)|(?<=\bi will\s))"
    r"(?:please\s+|just\s+|also\s+|make sure (?:to |you )?|"
    r"be sure to |remember to |try to )*"
    r"(?:keep|leave)\s+(?![^,;.!?—]*\b(?:in mind|trying|an eye|going(?! forward)|me posted)\b)"
    r"[^,;.!?()—]*?\b(?:on|off|enabled|disabled|alone|connected|disconnected|unchanged|untouched|"
    r"as (?:it is|they are|is)|where (?:it is|they are)|(?:the way|how) (?:it is|it's|they are|they're)|"
    r"for now|the same)\b"
    r"(?:\s+(?:for now|going forward|from now on|for the future))?(?:\s*(?:—|-|,)\s*(?:it's|it is|that's|they're)\b[^.!?]*)?"
    r"(?:(?=\s+and\s)|[.!]?)",
    re.IGNORECASE,
)


_KEEP_WORD = re.compile(r"\b(?:keep|leave)\b", re.IGNORECASE)


def strip_keep(text: str) -> str:
    """``text`` without the phrases that ask for a state to stay as it is ("please keep data
    roaming on", "(but leave mobile data on)"): they ask for no action."""
    if not _KEEP_WORD.search(text):
        return text
    out = _KEEP.sub(" ", text)
    out = re.sub(r"[ \t]{2,}", " ", out).strip()
    # What is left of "Please keep roaming on on your phone, turn off Data Saver": the
    # place the kept state is in, dangling before the next request.
    out = re.sub(r"(^|[.!?:]\s+)(?:on|in) (?:your|the) (?:phone|device|line|account)\b,?\s*(?:and\s+)?(\w)",
                 lambda m: m.group(1) + m.group(2).upper(), out)
    # What is left of "I'll keep the address as it is and only change the payment": "I'll only …".
    out = re.sub(r"\b(i'll|we'll|i will)\s+and\s+", r"\1 ", out, flags=re.IGNORECASE)
    # What is left of "Please leave X on and restart": "and restart" starts a sentence.
    out = re.sub(r"(^|[.!?:]\s+)and\s+(\w)", lambda m: m.group(1) + m.group(2).upper(), out)
    out = re.sub(r"\s+and\s*(?=[.!?]|$)", "", out)
    return re.sub(r"\s+([.!?])", r"\1", out).strip()


# "Restart your phone only if Airplane Mode is already off": the condition after the step, read
# as "If Airplane Mode is already off, restart your phone" (judged like any other condition).
_ONLY_IF = re.compile(r"^(?P<main>.*?\S),?\s+(?:but\s+)?only (?:if|when)\s+(?P<cond>[^,;]+?)(?P<end>[.!]*)$",
                      re.IGNORECASE | re.DOTALL)
# "... unless you say otherwise / you'd rather change plans / you need it for work": the step is
# the default; the exception is the customer's, and its scenario names none.
_UNLESS_YOU = re.compile(r"^(?P<main>.*?\S),?\s+unless\s+(?P<exc>(?:you|u)\b[^.?!]*)(?P<end>[.!]*)$",
                         re.IGNORECASE | re.DOTALL)
# The customer's own say-so or preference: its scenario never asks for it, so the default holds.
# (Other exceptions, "unless you're at home", stay a condition and are not acted on.)
_PREFERENCE_EXCEPTION = re.compile(
    r"^(?:you|u)(?:'d| would)? (?:say|tell me|let me know|object|disagree|rather|prefer|want|need it|need them|use it|"
    r"have a reason|would rather|'d rather|decide)\b", re.IGNORECASE)
# "I'll also sign you up for the newsletter unless you say otherwise": an offer with a default.
_I_WILL = re.compile(r"^(?:(?:\w+),?\s+)?(?:i|we)(?:'ll| will| am going to|'m going to| are going to|'re going to)"
                     r"\s+(?P<what>.+)$", re.IGNORECASE | re.DOTALL)


# "You don't have Wi-Fi Calling turned on, do you?", "Your status bar doesn't show the icon, does
# it?", "You haven't left the country, right?": a negative statement with a tag asks the yes/no
# question of its positive ("Do you have Wi-Fi Calling turned on?"); the negation is the
# statement's guess, not a request not to do something.
_NEGATIVE_TAG = re.compile(
    r"^(?P<subj>you|it|(?:your|the) [\w' -]{2,40}?|(?:mobile |cellular )?data|wi-?fi(?: calling)?|[\w-]+ mode)\s+"
    r"(?P<aux>don't|doesn't|didn't|haven't|hasn't|isn't|aren't|wasn't|weren't|can't|won't|do not|does not|"
    r"did not|have not|has not|is not|are not|cannot)\s+(?P<rest>[^?]+?),?\s*"
    r"(?:(?:do|does|did|have|has|is|are|was|were|can|will)(?: (?:you|it|they|there|we))?|right|correct|yes|no)\?$",
    re.IGNORECASE)
_AUX = {"don't": "Do", "doesn't": "Does", "didn't": "Did", "haven't": "Have", "hasn't": "Has", "isn't": "Is",
        "aren't": "Are", "wasn't": "Was", "weren't": "Were", "can't": "Can", "cannot": "Can", "won't": "Will",
        "do not": "Do", "does not": "Does", "did not": "Did", "have not": "Have", "has not": "Has",
        "is not": "Is", "are not": "Are"}


# "Before I switch roaming off, can you confirm you're back home?": what the agent will do next
# is its own step, told; what it asks for is the rest.
_AGENT_FIRST = re.compile(r"^(?:(?:so|and|but|now|ok|okay),?\s+)?before (?:i|we)\b[^,?;]{3,80},\s+(?P<rest>\S.*)$",
                          re.IGNORECASE | re.DOTALL)


def _condition_first(clause: str) -> str:
    """``clause`` with a trailing condition read in the order it is meant: "X only if C" is
    "If C, X"; "I'll X unless you …" asks "Shall I X?"; a request "X unless you …" is X.
    A leading "Before I …," (the agent's next step) is dropped."""
    if m := _AGENT_FIRST.match(clause):
        rest = m.group("rest")
        clause = rest[0].upper() + rest[1:]
    if (m := _NEGATIVE_TAG.match(clause)) and (
            m.group("aux").lower() not in ("haven't", "hasn't", "have not", "has not")
            or m.group("rest").lower().startswith("got ")):
        # ("You haven't switched it off yet, have you?" asks what was done: left as it is.)
        subj, aux, rest = m.group("subj"), _AUX[m.group("aux").lower()], m.group("rest")
        if subj.split()[0].lower() in ("you", "your", "it", "the"):
            subj = subj[0].lower() + subj[1:]
        if aux in ("Have", "Has") and rest.lower().startswith("got "):
            # "You haven't got Data Saver on, have you?": "have got" is "have".
            aux, rest = "Do" if aux == "Have" else "Does", "have " + rest[4:]
        return f"{aux} {subj} {rest}?"
    if m := _ONLY_IF.match(clause):
        main = m.group("main")
        return f"If {m.group('cond')}, {main[0].lower() + main[1:]}{m.group('end')}"
    if m := _UNLESS_YOU.match(clause):
        main = m.group("main")
        if w := _I_WILL.match(main):
            who = "we" if re.match(r"^(?:\w+,?\s+)?we\b", main, re.I) else "I"
            return f"Shall {who} {w.group('what')}?"
        if _PREFERENCE_EXCEPTION.match(m.group("exc")):
            return main + (m.group("end") or ".")
    return clause


def strip_markdown(text: str) -> str:
    """``text`` without emphasis, headings, quotes and link syntax."""
    for pattern, repl in _MARKDOWN:
        text = pattern.sub(repl, text)
    return text


def last_sentence(line: str) -> str:
    """The last sentence of ``line`` (a list header's own words)."""
    parts = [p for p in _SENTENCE_END.split(line) if p.strip()]
    return parts[-1] if parts else line


_EMOJI_AFTER_END = re.compile(r"(?<=[.!?])[ \t]*[\u231a-\u23ff\u2b00-\u2bff\u2600-\u27bf\U0001f300-\U0001faff\ufe0f\u200d]+(?=[ \t]|$)")
_BARE_HEADER = re.compile(r"[A-Za-z][\w'’ /&-]{0,40}", re.IGNORECASE)


_ENUM_MARK = re.compile(r"^\(?(?:\d|[a-h])\)\s*")


def segments(text: str) -> list[tuple[str, str]]:
    """``(segment, header)`` pairs: sentences and list items of ``text`` in order.

    A list item's header is the last non-item line before it when that line ends with a
    colon ("Could you tell me:", "Here's a quick summary of what we did:"); its last
    sentence decides what the items do, the whole line is their context.
    """
    out: list[tuple[str, str]] = []
    header = ""
    first_row: int | None = None  # where the current table's first row went in ``out``
    in_table = False
    # An emoji after a sentence's end ("resumed. ✅ Please restart") does not join the next one.
    text = _EMOJI_AFTER_END.sub(" ", text)
    for raw_line in strip_markdown(strip_reasoning(text)).splitlines():
        line = strip_keep(raw_line.strip())
        if not line:
            continue
        if line.startswith("|"):
            # A markdown table row: its cells, as a list item of the header above.
            if re.fullmatch(r"[|:\-\s]+", line):
                if first_row is not None:
                    del out[first_row:]  # the row above the separator names the columns
                first_row = None
                continue
            first_row = len(out) if not in_table else None
            in_table = True
            cells = [c.strip() for c in line.strip("|").split("|") if c.strip()]
            if len(cells) > 1 and re.fullmatch(r"\d{1,2}[.)]?", cells[0]):
                cells = cells[1:]  # "| 1 | Turn mobile data on |": the step's number is no word of it
            line = "- " + " ".join(cells)
        else:
            in_table, first_row = False, None
        is_item = bool(_ITEM.match(line))
        if is_item:
            line = _ITEM.sub("", line, count=1)
        else:
            header = ""
        parts: list[str] = []
        for p in _SENTENCE_END.split(line):
            clauses = [
                e.strip(" ,")
                for c in _CLAUSE_END.split(p)
                # "Since the SIM isn't detected, please reseat it": the reason apart.
                for d in (_REASON_THEN_PLEASE.split(c, maxsplit=1) if _REASON.match(c) else [c])
                for e in _split_run_on(d.strip(" ,"))
                if e.strip(" ,")
            ]
            if p.rstrip().endswith("?"):
                # "Before I check, what's the reason — A or B?": the question mark ends
                # the whole sentence, so a wh-clause before the split asks too.
                # ("(1) which order is it, and (2) ...": the enumeration mark is no word of it.)
                clauses = [
                    c + "?" if i < len(clauses) - 1 and (_WH.search(_ENUM_MARK.sub("", c)) or _YES_NO_START.match(c)
                                                         or _OFFER.search(c))
                    and not c.endswith("?") else c
                    for i, c in enumerate(clauses)
                ]
            for k in range(len(clauses) - 1, 0, -1):
                if re.match(r"(?:only (?:if|when)|unless (?:you|u))\b", clauses[k], re.I):
                    # "Switch Wi-Fi off, but only if ...": split at ", but", one step again.
                    clauses[k - 1:k + 1] = [f"{clauses[k - 1]} {clauses[k]}"]
            clauses = [_condition_first(_ENUM_MARK.sub("", c)) for c in clauses]
            # "..., so leave it off": a clause asking that a state stays asks for nothing.
            clauses = [k for k in (strip_keep(c) for c in clauses) if k.strip(" .!?,")]
            parts.extend(clauses)
        for p in parts:
            out.append((p, header if is_item else ""))
        if not is_item and parts and (parts[-1].endswith(":") or _BARE_HEADER.fullmatch(line)):
            # "Here's what we did:" or a heading line without a colon ("### Summary").
            header = line
    return out


# -- the act tables -------------------------------------------------------------------------


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives), re.IGNORECASE)


_TRANSFER = _rx(
    r"(?<!can )(?<!could )(?<!may )(?<!might )(?<!able to )(?<!happy to )(?<!option to )\btransfer(?:ring)? (?:you|your (?:call|case|chat)|this)\b",
    r"\b(?:being|been|get|be) transferred\b", r"\btransferred your (?:case|call|chat)\b",
    r"^i(?:'ve| have) (?:just |now )?transferred you\b",
    r"\b(?:be|being|get) connected (?:with|to) (?:\w+ ){0,3}?(?:human|live|real|specialist|agent|representative)",
    r"\bconnect(?:ing)? you (?:with|to) (?:\w+ ){0,3}?(?:human|live|real|specialist|technical)",
    r"\bget(?:ting)? you (?:over |through )?to (?:a |an |our |one of our )?(?:human|live|real|specialist)",
    r"\bput(?:ting)? you through to\b", r"\bpass(?:ing)? you (?:on |over )?to (?:a |an |our )?(?:human|specialist|colleague)",
    r"\bhand(?:ing)? (?:you|this|your case) (?:over|off) to\b",
    r"\bescalat(?:e|ing) (?:this|your case|you) to (?:a |an |our )?(?:human|specialist|team)",
)
# Not a transfer now: negated ("I don't want to transfer you yet"), later ("before I
# transfer you, ...") or one option among others ("..., or transfer you if you'd prefer").
_NOT_TRANSFER = _rx(
    r"\b(?:don't|do not|won't|will not|not going to|no need to|rather not|wouldn't|never|not)"
    r"(?:\s+\w+){0,3}?\s+(?:transfer|connect|hand)",
    r"\b(?:before|until|unless) (?:i|we) (?:can |could )?(?:transfer|connect|hand)",
    # Later or instead: "before transferring you", "instead of transferring you", "to get you
    # transferred, I'll first need ...".
    r"\b(?:before|until|unless|instead of|rather than|prior to) (?:transferring|connecting|handing)\b",
    r"^to (?:get you|have you) (?:transferred|connected)\b",
)
_TRANSFER_OPTION = _rx(
    r"\bor (?:i|we) (?:can|could) (?:also )?(?:transfer|connect) you\b",
    r"\bor (?:transfer|connect) you\b", r"\b(?:can|could) (?:also )?(?:transfer|connect) you\b",
    r"\b(?:transfer|connect) you\b.*\bif you(?:'d| would) (?:prefer|like|rather)\b",
)
_YES_NO_START = re.compile(r"^(?:\(\d\)\s*)?(?:is|are|does|do|can|did|has|have)\s+(?:your|the|a|an|mobile|data|wi-?fi|it)\b", re.I)
# "Would you also like to exchange anything else?" offers an action, it does not close.
_ACTION_ON_ELSE = _rx(r"\b(?:cancel|return|exchange|modify|change|add|remove|update)\b[^.?!]{0,20}\banything else\b")
_CLOSING = _rx(
    r"(?<!before )(?<!or do )\banything else\b(?! (?:first|yet))", r"\bsomething else (?:i|we) can\b", r"\banything more\b",
    r"\bany other (?:questions|issues|concerns|way)\b", r"\bfurther assistance\b",
    r"\belse (?:i|we) can (?:help|do|assist)\b",
)
_FAREWELL = _rx(
    r"\bhave a (?:great|good|nice|wonderful|lovely|fantastic) (?:day|evening|weekend|one)\b",
    r"^take care\b", r"\benjoy (?:the rest of )?your (?:day|evening|weekend|afternoon)\b", r"\bfeel free to (?:reach out|contact us|get in touch)\b",
    r"\bdon't hesitate to (?:reach out|contact us)\b", r"^(?:goodbye|bye)\b",
)
_HI = r"^(?:(?:hi|hello|hey|hiya|heya)(?: there)?[\s,.!]+)?"
_GREETING = _rx(
    r"\bhow (?:can|may|could|might) (?:i|we) (?:help|assist|be of (?:service|help|assistance))\b",
    # "How can I make your day better?", "What brings you to us today?"
    r"\bhow (?:can|may|could|might) (?:i|we) (?:make your day|brighten your day|make (?:things|this) easier for you)\b",
    r"^(?:[^.?!]{0,40}[.!]\s*)?what brings you (?:here|in|by|to us|to our (?:store|shop))\b",
    r"\bwhat can (?:i|we) (?:do for you|help (?:you )?with)\b",
    # "What would you like help with?", "Anything I can sort out for you?", "hi, what's up?",
    # "What's the trouble today?", "hey. problem?": what the customer came for.
    r"\bwhat (?:would|do) you (?:like|need|want) (?:some )?(?:help|assistance) with\b",
    _HI + r"(?:is there )?(?:anything|something) (?:i|we) can (?:do|help|sort|assist|take care)\b(?!.*\belse\b)",
    _HI + r"(?:so,? )?what'?s up\b", _HI + r"what(?:'s| is) the (?:trouble|problem|issue)(?: today)?\?",
    _HI + r"(?:any )?(?:problems?|issues?|trouble)\?$",
    # "hi. what do u need", "What issue are you experiencing?", "Tell me a little about what
    # you need", "Go ahead." (alone): what the customer came for.
    _HI + r"what (?:do|can|would) you (?:need|want)(?: (?:today|help with|from (?:me|us)))?[?.!]*$",
    _HI + r"what (?:issues?|problems?|trouble) (?:are|is) you (?:experiencing|having|facing|seeing)(?: today)?\?$",
    r"^(?:please )?(?:tell me|let me know) (?:a (?:little|bit) )?(?:more )?(?:about )?what (?:you need|you're looking for"
    r"|brings you)\b",
    r"^(?:please )?go ahead[.!]*$",
    # A bare greeting ("hello", "Good morning."): the customer says what it came for.
    r"^(?:hi|hello|hey|hiya|heya|howdy|greetings|good (?:morning|afternoon|evening|day))(?: there)?[\s,.!]*$",
)
# Offers and permission questions: the agent proposes to act, the user says yes or no.
_OFFER = _rx(
    r"^(?:so,? |okay,? |ok,? |great,? |alright,? )?(?:would|do) you (?:like|want) me to\b",
    r"\b(?:would|do) you (?:also |still |now )?(?:like|want) me to\b", r"\bwant me to\b",
    r"^(?:do you )?want to (?:do|try) (?:that|this|it)\?$",  # "I could help you turn on X. Want to do that?"
    r"^(?:so,? |okay,? |ok,? )?(?:shall|should|may|can) (?:i|we)\b(?! (?:have|get|ask|know)\b)",
    r"(?:^|[:,]\s*)(?:shall|should) (?:i|we)\b", r"\bdo you confirm\b", r"\bcan you confirm (?:that )?(?:i|you want|you'd like)\b",
    r"\bplease confirm (?:that )?(?:i|you (?:want|would like|'d like))\b",
    r"\bconfirm (?:that )?i should\b", r"\bis (?:that|this) (?:correct|right|okay|ok|alright|all right|fine|acceptable)\b",
    r"\b(?:would|do) you (?:like|want) to (?:proceed|go ahead|continue)\b",
    r"\bproceed\?", r"\bgo ahead\?", r"\byes/no\b", r"\byes or no\b", r"\(yes\)",
    r"\bis it (?:ok|okay|alright) (?:if|to|with you)\b", r"\bdo i have your (?:permission|consent|ok)\b",
    r"\bwould it be (?:ok|okay|alright) (?:if|to)\b",
    r"^would it (?:make sense|be (?:helpful|better|worth it|a good idea)|help) (?:to|if|for)\b",
    r"^(?:how|what) about (?:i |we |me |moving|switching|upgrading|adding|changing|trying)\b",
    r"\b(?:would|do) you (?:also |still )?(?:like|want|wish|prefer) to (?!know\b|tell\b)",
    r"\b(?:would|do) you (?:prefer|want|like) (?:an?|some|store|the)\b(?! (?:few|bit|moment)\b)",
    r"^(?:is that |is this |is everything )?(?:correct|right)\?$", r"^(?:ok|okay|alright|all right|good)\?$",
    r"^(?:can you |could you |please )?confirm\?$",
    r"\bconfirm with (?:an? )?[\"'“]?yes\b", r"\b(?:would|are) you (?:be )?(?:interested|keen) in\b",
    r"^(?:are we |is it |is that |we're |all )?(?:good|ready|okay|ok) to (?:go|proceed|continue)\b",
    r"^(?:shall we|can we|should we) (?:go|proceed|continue)\b", r"^(?:all )?good\?$",
    r"\b(?:would|do) you (?:like|want) (?:that|this|me to do that)\b",
    r"\b(?:are|r) you (?:ok|okay|fine|happy) with\b",
    r"\bwould you be (?:ok|okay|alright|fine|happy|comfortable) (?:with|if)\b",
    # "There's a bigger plan with 50 GB. Want it?", "Interested?": a bare offer of what was told.
    r"^(?:do you |would you )?(?:want|fancy|like) (?:it|that|this|one)\?$", r"^(?:are you |would you be )?(?:interested|keen)\?$",
    # "would you like international roaming turned off on your line?"
    r"\b(?:would|do) you (?:still |also )?(?:like|want) (?:[\w-]+ ){1,4}(?:turned|switched|set|changed|enabled|disabled|"
    r"cancell?ed|suspended|resumed|removed|added|updated|reactivated)\b",
    # "you'd be OK paying it, yes?"
    r"^(?:and |so )?you(?:'d| would) be (?:ok|okay|alright|fine|happy|comfortable) (?:with )?\w+ing\b",
    r"\b(?:would|do) you (?:still )?(?:prefer|rather) (?:that )?(?:i|we)\b",
    r"\b(?:would|do) you still (?:like|want) (?:me|us) to\b", r"\btype [\"']?yes\b",
    r"\b(?:reply|respond|answer|say) (?:with )?[\"']?yes\b", r"\bplease confirm (?:the|this|that) (?:cancellation|return|exchange|change|update|modification|"
    r"order details|details|above|request)\b",
    r"\b(?:does|do) (?:that|this|everything|these details) (?:look|sound|seem) (?:right|correct|good|ok|okay)\b",
    r"\bis (?:everything|all of this|all that) (?:correct|right)\b", r"^sound good\b",
    r"^(?:(?:does|do) (?:that|this) )?(?:sounds?|looks?|seems?) (?:right|correct|ok|okay|good|alright)\?$",
    r"^(?:does|would|will) (?:that|this) (?:work|be ok|be okay|be alright|be fine)(?: for you)?\?$",
    # "Just to confirm: you'd like roaming disabled on 555-0119, correct?"
    r"\b(?:you(?:'d| would)? (?:like|want|wish|prefer)|(?:i|we)(?:'ll| will| should| am going to|'m going to))"
    r"\b[^?]*,\s*(?:correct|right|is that (?:right|correct))\?$",
    r"^(?:just )?to confirm\b[^?]*\byou(?:'d| would)? (?:like|want|wish|prefer)\b[^?]*\?$",
    r"\b(?:are|would) you (?:be )?(?:willing|prepared|happy) to\b", r"\bwould you (?:consider|be open to)\b",
    r"\bwould you rather (?:just |simply )?(?:get|have|keep|do|go|take|receive)\b",
)
# Requests: imperatives and polite forms asking the user to do something.
_REQUEST = _rx(
    r"^(?:(?:so|now|next|then|first|firstly|second|finally|lastly|also|and|great|okay|ok|"
    r"alright|perfect|thanks|thank you|just|for now|right now|meanwhile|once more|again|simply|"
    r"instead|lastly|next up|after that|afterwards)[,!.:]?\s+|[^,.?!]{1,40},\s+)*"
    r"(?:please\s+|kindly\s+)?(?:just\s+)?(?:go ahead and\s+)?(?:make sure|ensure|"
    r"(?:turn|switch|toggle|enable|disable|activate|deactivate|restart|reboot|reset|restore|"
    r"check|look|open|go|navigate|tap|select|try|run|take|remove|pull|reinsert|insert|put|"
    r"re-?seat|power|make|pay|complete|accept|grant|give|allow|connect|disconnect|change|set|"
    r"tell|let|send|share|provide|give|confirm|verify|read|see|find|describe|list|note|"
    r"double-check|view|test|perform|do|wait|keep|leave|hold|choose|pick|type|enter|"
    r"reply|respond|specify|confirm))\b",
    r"\b(?:could|can|would|will) you(?: please| kindly| also| now| quickly| maybe| just)*\s+"
    r"(?!be\b|like\b|want\b|prefer\b|mind if\b)\w",
    r"\bwould you mind\b", r"\bplease\b", r"\bkindly\b",
    r"\b(?:i|we)(?:'d| would) (?:like|need|ask) (?:you|for you) to\b",
    r"\b(?:i|we)(?: just| really| also| only| now)? (?:need|want) you to\b", r"\bi(?:'ll| will) need you to\b",
    r"\b(?:i|we)(?:'ll| will)? (?:first |also |just |still )?need (?:a few|some|the following|two|three|these|a couple|your|one of|either|any of|one or|the)\b",
    r"^(?:just |also |first )?need (?:your|the|a|an)\b",  # terse: "need your email, or name and zip"
    r"\b(?:i|we)(?:'ll| will|'d| would)? (?:need|require)(?: from you)?:",
    r"\b(?:i|we)(?:'ll| will)? (?:first |just )?need to (?:verify|confirm|authenticate|validate) (?:your identity|you)\b",
    r"^(?:i|we)(?:'d| would)? (?:recommend|suggest|advise)\b",
    r"\byou(?:'ll| will)? (?:need|have|want) to\b", r"\byou (?:should|must|may want to|might want to)\b",
    r"\blet(?:'s| us)\b(?! me\b)",
    r"\bit (?:might|may|could|would) (?:help|be (?:worth|a good idea|best))\b",
    r"\b(?:the next|one more|another) step (?:is|would be) to\b",
    r"\b(?:go ahead and|feel free to)\b",
)
# "Could you restart your phone?" asks the user to act; "could you tell me / check whether"
# asks for information.
_POLITE_REQUEST = _rx(
    r"^(?:\w+[,!]\s+)?(?:could|can|would|will) you(?: please| kindly| also| now| quickly| maybe| just)*\s+"
    r"(?!tell\b|let\b|confirm\b|check\b|see\b|verify\b|look\b|find\b|describe\b|provide\b|"
    r"share\b|give me\b|remind\b|be\b|like\b|want\b|prefer\b|send me\b|read\b|spell\b|"
    r"clarify\b|explain\b|say\b|note\b|mind if\b|help\b|double-check\b|view\b|open\b)\w",
    r"^(?:\w+[,!]\s+)?would you mind\b",
)
_WH = _rx(r"^(?:[^,?:]{0,40}[,:]\s*)?(?:and |also |so )?(?:what|which|who|where|when|why|how)\b")
# "Which network mode does your phone.", "What is your account number.": a question that lost
# its question mark (a terse or damaged agent): a wh-word, a short noun phrase, then the verb
# or "of" before "your/the" — not a statement such as "What I found is ..." or "Which is why".
_UNMARKED_QUESTION = re.compile(
    r"^(?:which|what)(?! (?:i|we|you|they|it|this|that|the|a|an)\b)(?: [a-z'-]+){0,3} "
    r"(?:does|do|is|are|of) (?:your|the)(?: [a-z'-]+){1,4}\.?$"
)
_QUESTION_START = _rx(
    r"^(?:and |also |so |just to confirm,? |quick question:? )?(?:what|which|who|where|when|why|how|"
    r"is|are|am|was|were|do|does|did|have|has|had|can|could|will|would|should|shall|may)\b"
)
# "Would you mind checking whether X is on?": the gerund asks to look as well.
_CHECK = _rx(
    r"\b(?:check|see|look|verify|confirm|tell me|let me know|find out|note|report|read|describe|"
    r"double-check|checking|verifying|confirming|looking)\b[^.?!]*\b(?:whether|if|what|which|how|is|are)\b",
)
_BARE_CHECK = _rx(r"\b(?:check|look at|verify|view|read|describe)\b")
# Verbs that change something: a check phrase after one of them ("turn Wi-Fi on and tell
# me if it connects") does not make the segment a check.
_CHANGE_VERB = _rx(
    r"\b(?:turn|switch|toggle|enable|disable|activate|deactivate|restart|reboot|reset|restore|"
    r"reseat|re-seat|remove|reinsert|insert|connect|disconnect|grant|allow|give|pay|make|change|"
    r"set|put|take|complete|accept|submit|send|install|update)\b"
)
_POLITE_THEN_CHANGE = _rx(
    r"^(?:could|can|would|will) you (?:please )?(?:check|look at|open|verify)\b[^?]*\b(?:and|then) (?:then )?"
    r"(?:please )?(?:turn|switch|toggle|enable|disable|restart|reboot|reset|pay|make|change|set|grant|"
    r"reinsert|remove|connect|disconnect)\b"
)
_NEGATION = _rx(
    r"\b(?:don't|do not|doesn't|does not|didn't|did not|isn't|is not|aren't|are not|wasn't|"
    r"weren't|won't|will not|cannot|can't|never|no need|not necessary|not needed|no longer|nothing|"
    r"without|instead of|rather than|avoid|hold off|not yet|shouldn't|should not|not)\b"
)
_NO_CHANGE = _rx(r"\b(?:without (?:changing|touching)|(?:don't|do not) (?:change|touch)) (?:anything|it|them|any settings?)"
                 r"(?: (?:yet|for now))?\b")
_NEGATION_EXEMPT = _rx(r"\bdon't forget\b", r"\bdo not forget\b", r"\bif not\b", r"\bwhether or not\b",
                       r"\bnot only\b")
_CONDITIONAL = _rx(
    r"^(?:and |but |so |also |then )?(?:if|when|whenever|once|in case|should you|unless|as soon as)\b",
    # "Also, once we've sorted that, I'll need you to ...": a step after an outcome to come.
    r"^(?:\w+,\s+)?(?:once|after|when|as soon as) we(?:'ve| have)?\b",
    r"\b(?:if|when|whenever|once|in case|unless|as soon as) you(?:'re| are| get| come| return| "
    r"travel| go| arrive| need| want| decide| notice| see| still| ever| have)\b",
)
_NOT_A_CONDITION = _rx(
    r"\b(?:if|when|whenever|once) you(?:'re| are)? (?:ready|able)\b",
    r"\b(?:if|when|whenever) you (?:get|have) a (?:chance|moment|minute|second|sec)\b", r"\bwhen you have (?:it|that|one|a moment|a minute) ?(?:ready)?\b",
    r"\bif (?:you can|possible|you don't mind|you could|that's ok(?:ay)?)\b",
    # "tell me if you're connected" asks about what is, it sets no condition.
    r"\b(?:tell me|let me know|check|see|verify|find out|confirm|look|know)\s+if\b",
)
_PAST = _rx(
    r"^(?:(?:great|good|perfect|okay|ok|alright|thanks|thank you|so|and|also|earlier|already|"
    r"now|just to recap|to recap|to summarize|in summary)[,!.:]?\s+)*"
    r"(?:i|we|you)(?:'ve| have| had)?\s+(?:already\s+|just\s+|successfully\s+|also\s+)*"
    r"(?:enabled|turned|disabled|activated|added|resumed|sent|switched|restored|updated|lifted|"
    r"processed|applied|reactivated|reset|restarted|rebooted|checked|confirmed|verified|"
    r"reseated|removed|reinserted|granted|changed|set|made|paid|ran|run|tested|toggled|"
    r"connected|disconnected|fixed|resolved|cleared|found|looked|noticed|seen|saw|done|did|"
    r"tried|went|gave|took|completed|refreshed|established|identified|determined|ruled|"
    r"cancell?ed|modified|returned|exchanged|placed|submitted|issued|refunded|located)\b",
    r"^(?:earlier|previously|so far|already|at this point|as we saw|as you (?:said|mentioned))\b",
    r"\b(?:has|have) been\b", r"\b(?:is|are) now\b", r"\bwas (?:already|successfully)\b",
    r"\bwe (?:just|already) (?:confirmed|checked|verified|did)\b",
    r"^(?:your|the) \w+(?: \w+){0,4} (?:is|are|was|were|shows?|looks?|seems?|appears?)\b(?!.*\?)",
)
_RECAP_HEADER = _rx(
    r"\b(?:recap|summary|summarize|summarise|to sum up|what we(?:'ve| have)? (?:did|done|tried|"
    r"checked|covered|changed|fixed)|steps (?:we|i|you)(?:'ve| have)? (?:took|taken|done|tried|"
    r"followed)|here'?s what (?:we|i|you)(?:'ve| have)? (?:did|done|tried|checked|covered|changed|"
    r"fixed)|what was done|so far|where we are|progress|status update|completed steps)\b",
)
_REVIEW_HEADER = _rx(r"\b(?:review|look over|go over|double-check)\b(?! (?:your|the) (?:order|account) (?:and|to))")
_NOTE = _rx(r"^(?:\W*)(?:please )?(?:note|keep in mind|be aware|remember)\b(?! to\b)", r"^(?:fyi|heads up)\b")
_EMPATHY = _rx(
    r"^(?:i'm|i am|i’m) (?:so |very |really |truly )?(?:sorry|afraid|glad|happy|sad)\b",
    r"^(?:i|we) (?:understand|apologi[sz]e|appreciate|know how|can imagine|see)\b",
    r"^(?:that|this) (?:sounds|must be|is) (?:really |very |so )?(?:frustrating|annoying|"
    r"inconvenient|stressful|difficult|tough)\b",
    r"^(?:sorry|apologies|no worries|no problem|thanks|thank you|great|perfect|excellent|"
    r"awesome|wonderful|got it|understood|of course|sure|certainly|absolutely)[.!,]*$",
)
_FIRST_PERSON_PLAN = _rx(
    r"^(?:(?:now|next|first|okay|ok|alright|great|so|thanks|thank you|perfect|got it|sure|excellent|"
    r"understood|wonderful|awesome)[,.!]?\s+)*(?:i(?:'ll| will| am going to|'m going to| can| need to| am| 'm)"
    r"(?!\s+(?:first\s+|also\s+|just\s+)?need (?:your|the|a few|some|one of|either)\b)|"

    r"let me(?! know)|i'd like to (?:check|look|verify|review|take a look)|allow me)\b(?!.*\byou to\b)",
    # "Let's get your picture messages working again.": the goal, not a step.
    r"^let's (?:get|have) (?:your|this|that|it|you|things)\b[^.?!:;]*\b(?:working|fixed|sorted|going|back|up and running|"
    r"resolved)(?: again| properly| for you| today| right away)*[.!]*$",
    # "Depending on what you see, we may restart the phone, look at the SIM card, ...": what
    # might come later, told, not asked.
    r"^(?:[^,?]{0,60},\s+)?(?:we|i) (?:may|might)(?: also| then| later| need to| have to)? "
    r"(?!.*\b(?:you to|could you|can you|please)\b)",
    # "We could reset your APN settings later if needed": a later option; "We could try
    # restarting your phone." (now) is still a suggestion to act on.
    r"^(?:[^,?]{0,60},\s+)?(?:we|i) could\b(?=[^?]*\b(?:later|if needed|if necessary|afterwards|eventually|"
    r"down the line|if that doesn't (?:work|help)|if it doesn't (?:work|help))\b)(?!.*\b(?:you to|could you|can you|please)\b)",
)


def classify(text: str, header: str = "") -> Segment:
    """The act of one segment (``header``: its list header, see :func:`segments`)."""
    t = text.strip()
    low = t.lower()
    question = t.endswith("?") or "?" in t or bool(_UNMARKED_QUESTION.match(low))
    neg = bool(_NEGATION.search(low)) and not _NEGATION_EXEMPT.search(low)
    cond = bool(_CONDITIONAL.search(low)) and not _NOT_A_CONDITION.search(low)
    if cond and (m_if := _CONDITION.match(low)):
        # "If it isn't, enable it": the negation is the condition's, not the request's.
        then = m_if.group(3)
        neg = bool(_NEGATION.search(then)) and not _NEGATION_EXEMPT.search(then)
    past = bool(_PAST.search(low)) and not question
    m_check = _CHECK.search(low)
    # A change verb before the check phrase in the same clause: "turn Wi-Fi on and tell me if".
    check = (
        m_check is not None and not _CHANGE_VERB.search(low[: m_check.start()].rsplit(",", 1)[-1])
    ) or (
        bool(_BARE_CHECK.search(low)) and not _CHANGE_VERB.search(low)
    )
    if neg and check and _NO_CHANGE.search(low):
        # "Check whether X is on, without changing anything yet": the look is asked; only a
        # change is ruled out.
        rest = _NO_CHANGE.sub(" ", low)
        neg = bool(_NEGATION.search(rest)) and not _NEGATION_EXEMPT.search(rest)
    wh = bool(_WH.search(low))
    either = question and bool(re.search(r"\b(?:or|Or|either|Either)\b", t))  # not a state code "OR"

    def seg(act: Act, **kw: bool) -> Segment:
        base = {"negated": neg, "conditional": cond, "past": past, "check": check,
                "either_or": either}
        base.update(kw)
        return Segment(t, act, header, **base)

    if header:
        head = classify(last_sentence(header))
        if wh and not question and not (_RECAP_HEADER.search(header) or head.past):
            return seg(Act.QUESTION)
        if _RECAP_HEADER.search(header) or head.past or _REVIEW_HEADER.search(header):
            return seg(Act.STATEMENT, past=True)
        if head.act in (Act.REQUEST, Act.QUESTION) and not head.conditional:
            # "Could you tell me:" / "Please do the following:" — each item is asked.
            if head.act == Act.QUESTION or head.check or not _REQUEST.search(low):
                return seg(Act.QUESTION if head.act == Act.QUESTION or head.check else Act.REQUEST,
                           check=check or head.check)
            return seg(Act.REQUEST)
    if re.match(r"^\W*(?:\(?[a-z0-9]\)\s*)?whether\b", low) and not neg:
        # "Check two things: (a) whether Mobile Data is on, and (b) ...": an item of a check.
        return seg(Act.QUESTION, check=True)
    if _TRANSFER_OPTION.search(low) and not neg:
        # "I can do X, or transfer you to a human agent?" offers; without a question it
        # only tells what is possible (see :func:`read` for a choice question after it).
        return seg(Act.OFFER if question else Act.STATEMENT)
    if _TRANSFER.search(low) and not cond and not _OFFER.search(low) and not _NOT_TRANSFER.search(low):
        return seg(Act.TRANSFER)
    if (_CLOSING.search(low) and (question or low.startswith(("is there", "let me know")))
            and not _ACTION_ON_ELSE.search(low)) or (
        _FAREWELL.search(low) and not question
    ):
        return seg(Act.CLOSING)
    if _GREETING.search(low):
        return seg(Act.GREETING)
    if _RECAP_HEADER.search(low) and not question:
        return seg(Act.STATEMENT, past=True)
    if _HOLD_ON.search(low) and not question:
        return seg(Act.STATEMENT)  # "One moment please while I check.": nothing to do
    if (_EMPATHY.search(low) or _NOTE.search(low)) and not question:
        return seg(Act.STATEMENT)
    if _OFFER.search(low) and (question or "confirm" in low or _REPLY_YES.search(low)) and (
        not wh or re.match(r"^(?:how|what) about\b", low)) and (
        not either or "yes or no" in low
    ):
        # "Would you like the refund to PayPal or to a gift card?" is a question, not an offer.
        return seg(Act.OFFER)
    if cond and not question:
        # "If/when you ... , turn X off": depends on something that is not now; a domain may
        # still act when the condition names state it can see (see the telecom user).
        return seg(Act.REQUEST if _REQUEST.search(low) else Act.STATEMENT)
    if past or (_DONE_MARK.search(low) and (header or not _REQUEST.search(low))):
        # "Reset APN — Done", "Rebooted ✅": a step reported done.
        return seg(Act.STATEMENT, past=True)
    if question:
        if _POLITE_REQUEST.search(low) and not check:
            return seg(Act.REQUEST)
        if _POLITE_THEN_CHANGE.search(low):
            # "Could you check it and pay it in full?": a look, then a change asked for.
            return seg(Act.REQUEST)
        if _QUESTION_START.search(low) or not _REQUEST.search(low):
            return seg(Act.QUESTION)
        return seg(Act.REQUEST)
    if _FIRST_PERSON_PLAN.search(low):
        return seg(Act.STATEMENT)
    if _REQUEST.search(low):
        return seg(Act.REQUEST)
    return seg(Act.STATEMENT)


# "Reply yes to proceed.", "Just type YES and I'll submit it.": asks for agreement.
_REPLY_YES = _rx(r"\b(?:reply|respond|answer|say|type|write|send) (?:with |me )?(?:an? )?[\"'“]?yes\b")
_HOLD_ON = _rx(r"^\W*(?:(?:one|just a|give me a) (?:moment|second|sec|minute)|bear with me|hold on)\b(?:[^.!?]*\bwhile (?:i|we)\b)?",
               r"^\W*please (?:hold|wait)(?: (?:on|a moment|a second|a minute))?(?:[.!]|\s+while (?:i|we)\b|$)")
_DONE_MARK = re.compile(r"(?:\bdone|\bcompleted?|\bfinished|✅|✔️?|☑️?)\W*$", re.IGNORECASE)
_CONDITION = re.compile(
    r"^(?:and |but |so |also |then )?(if|when|whenever|once|as soon as|after)\s+(.+?),\s*(.+)$",
    re.IGNORECASE | re.DOTALL,
)
# Conditions about the user's situation or an outcome still to come ("when you're back
# home", "if the problem persists", "if that doesn't work"): nothing the user can see now.
_SITUATION = _rx(
    r"\b(?:back|home|return|returning|travel|travelling|traveling|abroad|arrive|trip|ever|"
    r"again|future|next time|later|chance|need|want|decide|prefer|notice|still|persists?|"
    r"continues?|work|works|worked|fails?|failed|problem|issue|have|don't|doesn't|didn't|"
    r"can't|cannot|not|ready)\b",
    # "once we've sorted that": what agent and customer will have done together, later.
    r"^we\b",
)
SEQUENCE_WORDS = frozenset({"once", "after", "as soon as", "when", "whenever"})
#: "if so / if yes" and "if not / if no": the state the question before asked about, or not.
BARE_CONDITIONS = {"so": True, "yes": True, "it is": True, "not": False, "no": False, "it isn't": False,
                   "it's not": False, "it is not": False, "you are": True, "you're": True,
                   "you aren't": False, "you are not": False, "you're not": False,
                   "it does": True, "it doesn't": False}


# "If the MMSC URL is not set", "if the APN isn't internet", "if a permission is not granted":
# a setting the phone shows, not the user's situation.
_SETTING_STATE = _rx(r"\b(?:mmsc|apn|permissions?)\b[^,]*\b(?:not|isn't|aren't) (?:set|configured|granted|allowed|"
                     r"enabled|there|internet|listed)\b",
                     # "if your messaging app doesn't have the SMS permission": what the phone shows.
                     r"\b(?:doesn't|does not|don't|do not) have (?:the |its |an? )?(?:\w+ )?permissions?\b")
# "Once you've confirmed the amount, pay it": a check the user makes now, not its situation.
_CHECKED = _rx(r"^you(?:'ve| have)? (?:confirmed|checked|verified|reviewed|seen|received|got|looked at)\b")


def condition(text: str) -> tuple[str, str, str] | None:
    """``(word, condition, consequence)`` of "if/once/when X, do Y" ("if so, ..." gives the
    condition "so"); None when the segment is not of that form or the condition is about
    the user's situation or an outcome still to come (those are never acted on)."""
    m = _CONDITION.match(text.strip())
    if m is None:
        return None
    word, cond, then = m.group(1).lower(), m.group(2), m.group(3)
    if (_SITUATION.search(cond) and cond.strip().lower() not in BARE_CONDITIONS and not _CHECKED.search(cond)
            and not _SETTING_STATE.search(cond)):
        return None
    return word, cond, then


_CONTINUATION = re.compile(r"^(?:also\s+|then\s+)?\w+ing\b")
# What to do instead, after a negated request ("don't send the old one — just the new one").
_CONTRAST = _rx(r"^(?:but |and )?(?:just|only|instead|rather)\b")
# A bare choice question asks to choose among the options just told ("Which would you like?").
_CHOICE = _rx(
    r"^(?:so,? |or,? )?(?:which|what)(?: one| option)? (?:would|do) you (?:like|prefer|want)\b",
    r"^(?:which|what) do you prefer\b", r"^what would you (?:like|prefer) (?:me )?to do\b",
    r"^(?:how|what) (?:does that sound|do you think)\b",
    r"^(?:so,? )?(?:which|what)(?: one| option)? (?:works|suits|sounds|would work) (?:best|better|good|for you)\b",
    r"^(?:which|what)(?: one| option)? (?:should|shall) (?:i|we)\b", r"^which (?:do|would) you (?:choose|pick|go with)\b",
    r"^(?:which|what) (?:one|option) (?:would|do) you (?:like|prefer|want)\b",
)


def choice(text: str) -> bool:
    """Whether a segment is a bare choice question ("Which would you prefer?")."""
    return bool(_CHOICE.search(text))


# A list header that introduces alternatives ("Options:", "You have two options:", "Here
# are a few choices:"): with a choice question after it, its items are the options told.
_OPTIONS_HEADER = _rx(r"\b(?:options?|choices?|alternatives?|possibilities|ways)\b",
                      r"\b(?:you|we|i) (?:can|could)(?: either)?:\s*$")


def _options_told(out: list[Segment]) -> list[Segment]:
    """``out`` with the items under an options header turned into statements when a choice
    question follows them ("Options: 1. Keep the card 2. Switch cards. Which would you
    prefer?" asks to pick one, not to do both)."""
    for i, seg in enumerate(out):
        if seg.act == Act.QUESTION and (choice(seg.text) or seg.either_or or re.match(
                r"^(?:which|what)\b", seg.text, re.I)):
            for j in range(i):
                o = out[j]
                if o.header and _OPTIONS_HEADER.search(o.header) and o.act in (Act.REQUEST, Act.OFFER):
                    out[j] = Segment(o.text, Act.STATEMENT, o.header, o.negated, o.conditional,
                                     o.past, o.check, o.either_or)
    return out


def options_before(parts: list[Segment], index: int) -> list[str]:
    """The list items told just before ``parts[index]`` under one header (the options a
    choice question after them asks to pick from); empty when there are none."""
    items: list[str] = []
    header = ""
    for seg in parts[:index]:
        if seg.header and not seg.asks:
            if seg.header != header:
                header, items = seg.header, []
            items.append(re.sub(r",?\s*\bor$", "", seg.text.strip(" .;")))
        elif seg.asks:
            header, items = "", []
    return items if len(items) >= 2 else []


def read(text: str) -> list[Segment]:
    """Every segment of an agent message with its act, in order. A clause that only goes
    on with a verb ("I recommend resetting the APN and then | restarting the phone") does
    what the clause before it does."""
    return _options_told(_read(text))


_BARE_GREETING = re.compile(r"^(?:hi|hello|hey|hiya|heya|howdy|greetings|good (?:morning|afternoon|evening|day))"
                            r"(?: there)?[\s,.!]*$", re.IGNORECASE)


def _read(text: str) -> list[Segment]:
    out = _read_segments(text)
    if len(out) > 1:
        # "Hi! One moment while I check.": a greeting word before something else greets no
        # more than the rest of the message asks.
        out = [Segment(s.text, Act.STATEMENT, s.header) if s.act == Act.GREETING and _BARE_GREETING.match(s.text)
               else s for s in out]
    return out


def _read_segments(text: str) -> list[Segment]:
    out: list[Segment] = []
    for s, h in segments(text):
        seg = classify(s, h)
        prev = out[-1] if out else None
        if (
            prev is not None and prev.act == Act.REQUEST and prev.negated
            and seg.act == Act.STATEMENT and _CONTRAST.match(seg.text) and not seg.past
        ):
            seg = Segment(seg.text, Act.REQUEST, seg.header, False, seg.conditional, False,
                          seg.check, seg.either_or)
        if (
            prev is not None and prev.act == Act.STATEMENT and seg.act == Act.QUESTION
            and _CHOICE.search(seg.text) and _TRANSFER_OPTION.search(prev.text)
        ):
            # "I can change the plan myself, or transfer you to a human. Which would you like?"
            out[-1] = Segment(prev.text, Act.OFFER, prev.header, prev.negated, prev.conditional,
                              prev.past, prev.check, True)
        if (
            prev is not None and prev.act == Act.REQUEST and seg.act == Act.STATEMENT
            and not prev.text.rstrip().endswith((".", "!", "?", ":"))
            and _CONTINUATION.match(seg.text.lower()) and not seg.past
        ):
            seg = Segment(seg.text, Act.REQUEST, seg.header, seg.negated, prev.conditional,
                          False, seg.check, seg.either_or)
        out.append(seg)
    return out


def asked_text(parts: list[Segment]) -> str:
    """The segments that ask something, joined (what topic matching should look at)."""
    return " ".join(s.text for s in parts if s.asks)


# Words that name nothing: pronouns, auxiliaries, politeness and generic verbs. A segment
# made only of them ("Can you do that for me?", "Please check it.", "Could you clarify?")
# asks for something the user cannot identify.
EMPTY_WORDS = frozenset(
    "a an the it that this these those them one thing things something anything me you your i we "
    "us my our for to of on in at now again then just please kindly also so okay ok alright right "
    "now here there can could would will should may might do does did doing done try trying "
    "check look see clarify explain confirm handle fix help go ahead and or but with what which "
    "mean meant about more bit little quickly real quick let know tell give say be is are was "
    "were been being have has had get got make sure first next mind if same thanks thank great "
    "perfect sorry hmm well oh like want need would step steps happens happened happen "
    "mentioned earlier before above suggested".split()
)


def vague(text: str) -> bool:
    """True when a segment names nothing the user could act on or answer (only pronouns,
    politeness and generic verbs: "Can you do that for me?", "Please check it.")."""
    # "Could you do the thing on your phone that I mentioned earlier?": the phone is where,
    # not what.
    text = re.sub(r"\b(?:on|with|from|in) (?:your|the) (?:phone|device)\b", " ", text.lower())
    words = re.findall(r"[a-z][a-z'-]*", text)
    return bool(words) and all(w in EMPTY_WORDS or w.endswith("'s") for w in words)


def understood(parts: list[Segment]) -> bool:
    """Whether a message read into ``parts`` has something the user can react to: a
    request, question or offer that names something, a transfer, a closing or a greeting.
    (A domain user may still find nothing in it to do; see the scripted user's events.)"""
    return any(
        (p.asks and not vague(p.text)) or p.act in (Act.TRANSFER, Act.CLOSING, Act.GREETING)
        for p in parts
    )


# What an agent says while it works or when it has what it needs: nothing to answer but an
# acknowledgement ("Let me look into that.", "That's all the info I need.", "One moment.").
_WAIT = _rx(
    r"^(?:(?:great|perfect|thanks|thank you|okay|ok|alright|got it|excellent|awesome|understood|noted|"
    r"wonderful|sure|of course)[,!.]?\s*)*(?:let me|i(?:'ll| will| am going to|'m going to| am|'m) "
    r"(?:now |just |quickly |go ahead and )?(?:check|look|pull|process|review|verify|take|get|see|"
    r"submit|update|handle|proceed|work|go ahead|find|search|run|confirm|place|cancel|modify|"
    r"make|set|start|process|do|note|fetch|open|reach|contact|escalate)\b)",
    r"\b(?:one|just a|give me a|bear with me(?: for)?(?: a)?) (?:moment|second|sec|minute)\b",
    r"\bbear with me\b", r"^(?:please )?hold on\b", r"\bplease (?:hold|wait)\b",
    r"\b(?:that's|that is|this is|that was) (?:all|everything)(?: (?:the )?(?:info|information|details?|"
    r"data))?(?: (?:i|we) (?:need|needed|require))?\b",
    r"\b(?:i|we) (?:now )?have (?:everything|all (?:the )?(?:info|information|details?)|what) (?:i|we) need",
    r"^(?:thanks|thank you)(?: (?:so much|very much))?(?: for [^.?!]+)?[.!]*$",
    r"^(?:great|perfect|okay|ok|alright|got it|excellent|awesome|understood|noted|wonderful|"
    r"sounds good)[.!,]*(?:\s*(?:thanks|thank you)[.!]*)?$",
)


def acknowledges(parts: list[Segment]) -> bool:
    """Whether a message that asks nothing only tells what the agent is doing or that it
    has what it needs ("That's all the info I need.", "Let me look into that."): the user
    acknowledges it and waits; it has understood it (no not-understood turn)."""
    return bool(parts) and not any(p.asks or p.act in (Act.TRANSFER, Act.CLOSING, Act.GREETING)
                                   for p in parts) and any(_WAIT.search(p.text) for p in parts)


# -- typing: chat abbreviations and one-keystroke typos ----------------------------------------

# Chat shorthand a customer reads as the word it stands for ("pls turn on data roaming on ur
# phone", "name + number?").
_SHORTHAND = {
    "pls": "please", "plz": "please", "pleas": "please", "ur": "your", "u": "you", "thx": "thanks",
    "thnx": "thanks", "msg": "message", "msgs": "messages", "pic": "picture", "pics": "pictures",
    "b4": "before", "whats": "what's", "thats": "that's", "dont": "don't", "cant": "can't",
    "wont": "won't", "isnt": "isn't", "doesnt": "doesn't", "youre": "you're", "ive": "I've",
    "speedtest": "speed test", "abt": "about", "addr": "address", "acct": "account", "num": "number",
    "pref": "preference", "prefs": "preferences",
}
# Words of a support chat that are often mistyped and that the reading rules need: a word that
# is no word the reader knows but one keystroke from exactly one of these (a letter left out
# inside it, two neighbours swapped, one letter doubled) is read as that word ("adress",
# "roamng", "Whta", "yuo", "thnaks", "cn").
_TYPO_TARGETS = frozenset(
    "hello thanks please what which where how can could would should you your address email "
    "number phone mobile data roaming enabled disabled enable disable turn switch speed test "
    "restart reboot airplane mode signal service network status settings message messages picture "
    "payment order refund cancel exchange return account help today check send provide confirm "
    "calling"
    .split()
)
# Words the reader knows besides the targets and the words of the reading rules: never
# "corrected" into a target.
_COMMON_WORDS = frozenset(
    "says said red tied net tip lit rely though too to mms form from sing sign trial trail quiet "
    "quite dairy diary angel angle unite untie who'll am an as at be by do go he if in is it me "
    "my no of on or so up us we ok hm oh".split()
)
_VOWEL = re.compile(r"[aeiouy]")
# Capitalised words are names unless they are one of these (a sentence's first word).
_OPENING_WORDS = frozenset("hello hi hey thanks please how what which where can could would should".split())


def _vocabulary() -> frozenset[str]:
    words = set(_TYPO_TARGETS) | set(EMPTY_WORDS) | set(_COMMON_WORDS)
    for value in globals().values():
        if isinstance(value, re.Pattern):
            words.update(re.findall(r"\b[a-z]{2,}\b", value.pattern.lower()))
    return frozenset(words)


_KNOWN: frozenset[str] | None = None


def _one_keystroke(word: str) -> str | None:
    """The one typo target ``word`` is a slip of (a letter left out inside it, two neighbours
    swapped, one letter doubled), None when none or several."""
    hits: set[str] = set()
    n = len(word)
    for i in range(1, n):  # a letter left out inside: "roamng", "adress", "cn", "hw"
        for c in "abcdefghijklmnopqrstuvwxyz":
            if (cand := word[:i] + c + word[i:]) in _TYPO_TARGETS:
                hits.add(cand)
    for i in range(n - 1):  # two neighbours swapped: "whta", "yuo", "thnaks"
        if (cand := word[:i] + word[i + 1] + word[i] + word[i + 2:]) in _TYPO_TARGETS:
            hits.add(cand)
    for i in range(1, n):  # one letter doubled: "helllo"
        if word[i] == word[i - 1] and (cand := word[:i] + word[i + 1:]) in _TYPO_TARGETS:
            hits.add(cand)
    return hits.pop() if len(hits) == 1 else None


def retype(text: str) -> str:
    """``text`` as a customer reads it through chat shorthand and typing slips: "pls" is
    "please", "ur" is "your", "+" and "&" between words are "and", and a word that is no
    word the reader knows but one keystroke from exactly one it does is that word ("Helo, how
    cn I help yuo" reads "Hello, how can I help you"). Words with digits or capitals inside,
    and words of two letters that have a vowel ("am", "ok"), are left as they are."""
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = _vocabulary()
    known = _KNOWN
    text = re.sub(r"(?<=\w)\s+[+&]\s+(?=\w)", " and ", text)

    def fix(m: re.Match[str]) -> str:
        word = m.group(0)
        low = word.lower()
        if low in _SHORTHAND:
            out = _SHORTHAND[low]
        elif low in known or word[1:] != word[1:].lower() or len(low) < 2 or (
                len(low) == 2 and _VOWEL.search(low)):
            return word
        else:
            out = _one_keystroke(low) or word
            if out == word or (word[0].isupper() and out not in _OPENING_WORDS):
                return word  # "Ben" is a name, not "been"; "Helo" / "Whta" open a sentence
        return out[0].upper() + out[1:] if word[0].isupper() else out

    return re.sub(r"(?<![\w@.#/'’-])[A-Za-z]+(?![\w@#/-]|['’](?![a-z]{1,2}\b)|\.\w)", fix, text)
