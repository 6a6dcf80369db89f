"""The domain tokenizer of the bundled reference agent.

A tiny model trained for half an hour on one CPU thread can only learn to *copy* an entity
id from its context when the id is one token (see ``shared/notes/reference-model-
experiment.md``: 7-digit ids spelt digit by digit were never copied; pooled single-token
ids were). So the vocabulary holds:

- special tokens (``<pad>``, ``<bos>``, ``<eos>``, the chat role markers);
- 256 byte tokens, so that *any* text encodes and decodes losslessly;
- every id-like string of the domains' fixed pools (user ids, order ids, item ids, phone
  numbers, emails with digits, ...) as one token;
- frequent words (with their leading space) and JSON punctuation pieces.

Text is split by one regular expression (specials, id-like runs, words, JSON pieces,
single characters); a piece in the vocabulary is one token, anything else falls back to
words/digits/bytes. The vocabulary is saved as ``quantagent_tokenizer.json`` beside the
model's HF files, with the version of the split rule it was built with:

- version 1 let a word swallow the space before an id that starts with letters, so an
  email in prose (``"is celia.eriksen4125@example.com"``) became ``" celia"`` +
  ``".eriksen4125@example.com"`` while the same email in a tool call was one token; a model
  could only *recall* such an id, never copy it;
- version 2 (current) ends a word before any run that reaches a digit, so an id is the same
  token in prose, in tool results and in tool calls; and it splits a whole number written as
  a float (``283.0`` in a tool result) into ``283`` + ``.0``, so the amount the agent states
  is a token it can copy.

**Entity aliases** (optional, saved in the file with their patterns). Even with every id one
token, a model of a few million parameters trained for half an hour *recalls* ids instead
of copying them: each id token is rare, so its embedding hardly moves, and the model writes
a memorised id of the same kind (see ``bundled/models/README.md``). An aliasing tokenizer
replaces each entity id of a listed kind (order ids, payment-method ids, ...) by a numbered
alias token of its kind, in order of first appearance in the text it encodes: the first
order id of a conversation becomes ``<order1>`` wherever it recurs, the second ``<order2>``,
and so on. This is entity anonymisation as in neural semantic parsing (Dong & Lapata,
"Language to Logical Form with Neural Attention", ACL 2016): the handful of alias tokens
are frequent, so the model can learn to copy them, and a conversation's ids can only be
told apart by where they appeared. The backend renders the whole conversation for every
turn, so the numbering is the same at every turn (a prefix keeps its aliases), and it maps
the aliases the model writes back to the ids (:meth:`DomainTokenizer.alias_map`). An alias
the conversation never introduced decodes as itself (``<order7>``), which a tool rejects
as an unknown id. Ids beyond a kind's ``count`` are spelt with ordinary tokens. A kind may
also be a closed list of words, such as customers' names or the words of addresses
(:func:`name_alias_kind`); a word piece's leading space is kept as its own token before
the alias.

**Alias order.** Numbered by first appearance (``alias_order="appearance"``), an alias
also tells *when* its id came up, and a small model takes that shortcut where it happens
to hold in training: the new address of an address change usually starts after the five
or six words of the user's current one, so its state is usually ``<place10>``, and the
model writes ``<place10>`` instead of copying the state. With ``alias_order="hashed"``
each id takes the slot a stable hash of its text points to (the next free one on a
collision), so the numbers say nothing about order and the call can only be right by
copying. Either way a prefix keeps its aliases.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_quantagent.errors import DataFileError

TOKENIZER_FILE = "quantagent_tokenizer.json"
FORMAT_VERSION = 2
"""Split rule of newly built tokenizers; files of every version in ``SPLIT_VERSIONS`` load."""

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SYSTEM, USER, ASSISTANT, TOOL, CALL, END = (
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|tool|>",
    "<|call|>",
    "<|end|>",
)
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, SYSTEM, USER, ASSISTANT, TOOL, CALL, END)

#: Multi-character JSON pieces, matched before single characters (longest first).
JSON_PIECES: tuple[str, ...] = (
    '"},{"',
    '":{"',
    '":["',
    '":[{"',
    '"}]}',
    '"}}',
    '"}]',
    '"]}',
    '"],"',
    '},"',
    ']},"',
    '],"',
    '":"',
    '","',
    '":',
    '",',
    ',"',
    '{"',
    '"}',
    '["',
    '"]',
    '[{"',
    '}]',
    '},{',
    '": "',
    '", "',
    ", ",
    ". ",
    "###",
)

#: An id-like run: contains a digit, may hold ``_ # @ . + -`` inside, ends on a word char.
_ID = r"[A-Za-z0-9_#@.+\-]*[0-9](?:[A-Za-z0-9_#@.+\-]*[A-Za-z0-9_])?"
#: Words per split version: version 2 never lets a word start an id-like run (see above).
_WORDS: dict[int, str] = {
    1: r" ?[A-Za-z]+",
    2: r" ?[A-Za-z]+(?![A-Za-z0-9_#@.+\-]*[0-9])",
}
SPLIT_VERSIONS: tuple[int, ...] = tuple(sorted(_WORDS))
_FALLBACK_WORD = re.compile(r" ?[A-Za-z]+|[0-9]|.", re.DOTALL)


#: Version 2 splits a whole number written as a float (``"balance":283.0``) into ``283`` +
#: ``.0``, so the number the agent says ("283") is the token the tool result holds.
_WHOLE_FLOAT = r"[0-9]+(?=\.0\b)|"


def _pieces_pattern(version: int) -> str:
    specials = "|".join(re.escape(s) for s in SPECIALS)
    json_pieces = "|".join(re.escape(p) for p in sorted(JSON_PIECES, key=len, reverse=True))
    numbers = _WHOLE_FLOAT if version >= 2 else ""
    return f"{specials}|{numbers}{_ID}|{_WORDS[version]}|{json_pieces}|\\s|."


_SPLITS: dict[int, re.Pattern[str]] = {v: re.compile(_pieces_pattern(v), re.DOTALL) for v in SPLIT_VERSIONS}
_ID_FULL = re.compile(_ID)


def _split_rule(version: int) -> re.Pattern[str]:
    """The compiled split rule ``version``; a clear error for an unknown one."""
    if version not in _SPLITS:
        raise ValueError(
            f"tokenizer split version {version!r} is not one of {', '.join(map(str, SPLIT_VERSIONS))}"
        )
    return _SPLITS[version]


def split_pieces(text: str, version: int = FORMAT_VERSION) -> list[str]:
    """Pre-tokenize ``text`` into pieces (before the vocabulary lookup)."""
    return _split_rule(version).findall(text)


@dataclass(frozen=True)
class AliasKind:
    """One kind of entity id that an aliasing tokenizer numbers per conversation."""

    name: str
    pattern: str
    """Regular expression a whole split piece must match (first matching kind wins)."""
    count: int
    """Alias tokens ``<name1>`` … ``<name{count}>``; later ids of the kind keep their text."""

    def token(self, k: int) -> str:
        return f"<{self.name}{k}>"


ALIAS_ORDERS = ("appearance", "hashed")
"""How alias tokens are numbered within a text (see the module docstring)."""


def _hash_slot(piece: str, kind: str, count: int) -> int:
    """The 0-based slot a stable hash of ``piece`` points to (Python's ``hash`` is salted
    per process, so it would number a conversation differently in each run)."""
    digest = hashlib.blake2b(f"{kind}\x1f{piece}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


#: The id kinds that ``train_reference.py vocab --aliases`` always numbers (it adds the
#: kinds it is given: names, address words, phones, telecom's bill, line and customer ids,
#: numbers; ``add-aliases`` appends them to a trained model). Order matters: a payment id
#: would also match the user-id pattern.
DEFAULT_ALIASES: tuple[AliasKind, ...] = (
    AliasKind("order", r"#W[0-9]{7}", 8),
    AliasKind("pay", r"(?:credit_card|paypal|gift_card)_[0-9]{7}", 6),
    AliasKind("user", r"[a-z]+_[a-z]+_[0-9]+", 2),
    AliasKind("email", r"[A-Za-z0-9_.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+", 2),
    AliasKind("item", r"[0-9]{10}", 24),
    AliasKind("track", r"[0-9]{12}", 4),
    AliasKind("zip", r"[0-9]{5}", 6),
)
"""Counts: a retail training episode holds at most 4 order ids, 3 payment methods, 12 item
and product ids and 2 zips (2,000 sampled episodes), so every id of an episode has one."""


def _core(piece: str) -> str:
    """A piece without the one leading space of a word piece (what alias patterns match)."""
    return piece[1:] if piece.startswith(" ") else piece


def name_alias_kind(names: Iterable[str], count: int = 4, *, kind: str = "name") -> AliasKind:
    """An alias kind for a closed set of words (say, a domain's customers' first and last
    names): ``"My name is Maren Lindqvist"`` and the call's ``"first_name":"Maren"`` then
    hold the same ``<name1>``, where the prose word (`` Maren``) and the JSON value
    (``Maren``) would otherwise be two tokens that a model can only map by memory.
    ``kind`` names the alias tokens (``<place1>``, ... for the words of addresses)."""
    words = sorted({n for n in names if n}, key=lambda n: (-len(n), n))
    if not words:
        raise ValueError(f"name_alias_kind: no words given for kind {kind!r}")
    return AliasKind(kind, "(?:" + "|".join(re.escape(n) for n in words) + ")", count)


def is_id_like(piece: str) -> bool:
    """Whether a piece is an id-like run (contains a digit, no spaces)."""
    return _ID_FULL.fullmatch(piece) is not None and len(piece) > 1


class DomainTokenizer:
    """Encode/decode with a fixed piece vocabulary and a lossless byte fallback."""

    def __init__(
        self,
        pieces: Sequence[str],
        version: int = FORMAT_VERSION,
        aliases: Sequence[AliasKind] = (),
        alias_order: str = "appearance",
    ) -> None:
        if alias_order not in ALIAS_ORDERS:
            raise ValueError(f"alias_order must be one of {', '.join(ALIAS_ORDERS)}, got {alias_order!r}")
        self.alias_order = alias_order
        """How aliases are numbered: by first appearance or by a hash of the id."""
        self._split = _split_rule(version)
        self.version = version
        """Split rule (see the module docstring); a model is only valid with its own."""
        self.aliases: tuple[AliasKind, ...] = tuple(aliases)
        """Entity kinds numbered per encoded text (see the module docstring); () for none."""
        for kind in self.aliases:
            if kind.count < 1 or not re.fullmatch(r"[a-z]+", kind.name):
                raise ValueError(f"alias kind {kind.name!r}: the name must be lower-case letters "
                                 f"and the count at least 1, got {kind.count}")
        self._alias_res = [re.compile(k.pattern) for k in self.aliases]
        self.pieces: list[str] = list(pieces)
        """Non-special, non-byte vocabulary entries (ids, words, JSON pieces); the alias
        tokens follow them."""
        self._id_to_bytes: list[bytes] = []
        self._id_to_text: list[str] = []
        for s in SPECIALS:
            self._id_to_text.append(s)
            self._id_to_bytes.append(s.encode())
        self.byte_offset = len(SPECIALS)
        for b in range(256):
            self._id_to_text.append(f"<0x{b:02X}>")
            self._id_to_bytes.append(bytes([b]))
        self.piece_offset = self.byte_offset + 256
        seen: set[str] = set()
        alias_tokens = [k.token(i) for k in self.aliases for i in range(1, k.count + 1)]
        for p in [*self.pieces, *alias_tokens]:
            if p in seen or p in SPECIALS:
                raise ValueError(f"tokenizer piece {p!r} is duplicated or a special token")
            seen.add(p)
            self._id_to_text.append(p)
            self._id_to_bytes.append(p.encode())
        self._piece_to_id: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
        for i, p in enumerate([*self.pieces, *alias_tokens]):
            self._piece_to_id[p] = self.piece_offset + i
        self.alias_offset = self.piece_offset + len(self.pieces)
        """Token id of the first alias token (``vocab_size`` when there are none)."""
        self._shadowed = frozenset(
            p for p in self.pieces if any(r.fullmatch(_core(p)) for r in self._alias_res)
        )
        """Pieces that an alias kind takes over: a kind added to a built vocabulary
        (:meth:`with_aliases`) wins over the pieces it matches, which stay unused."""
        self.pad_id = self._piece_to_id[PAD]
        self.bos_id = self._piece_to_id[BOS]
        self.eos_id = self._piece_to_id[EOS]
        self.end_id = self._piece_to_id[END]
        self.call_id = self._piece_to_id[CALL]
        self.assistant_id = self._piece_to_id[ASSISTANT]

    # -- vocabulary -------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of token ids (specials + 256 bytes + pieces)."""
        return len(self._id_to_text)

    def token_id(self, piece: str) -> int:
        """The id of a special token or vocabulary piece; ``KeyError`` if absent."""
        return self._piece_to_id[piece]

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id`` (bytes shown as ``<0xNN>``)."""
        return self._id_to_text[token_id]

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        pool: Iterable[str] = (),
        *,
        min_word_count: int = 20,
        min_id_count: int = 1,
        version: int = FORMAT_VERSION,
        aliases: Sequence[AliasKind] = (),
        alias_order: str = "appearance",
    ) -> DomainTokenizer:
        """Build a vocabulary from a corpus and the domains' id pools.

        Every pool string becomes one token; id-like pieces of the corpus seen at least
        ``min_id_count`` times too; words and JSON pieces seen ``min_word_count`` times.
        ``version`` picks the split rule (1 only to reproduce models built with it).
        ``aliases``: entity kinds numbered per text; ids of those kinds get no token of
        their own (a model never sees them).
        """
        rule = _split_rule(version)
        alias_res = [re.compile(k.pattern) for k in aliases]
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(rule.findall(t))
        chosen: dict[str, None] = {}
        for p in JSON_PIECES:
            chosen[p] = None
        for p in sorted(set(pool)):
            if p and p not in SPECIALS and not any(r.fullmatch(_core(p)) for r in alias_res):
                chosen[p] = None
        for p, c in sorted(counts.items()):
            if p in SPECIALS or len(p.encode()) < 2 or any(r.fullmatch(_core(p)) for r in alias_res):
                continue
            if is_id_like(p):
                if c >= min_id_count:
                    chosen[p] = None
            elif c >= min_word_count:
                chosen[p] = None
        return cls(list(chosen), version=version, aliases=aliases, alias_order=alias_order)

    def with_aliases(self, extra: Sequence[AliasKind]) -> DomainTokenizer:
        """This vocabulary with more alias kinds appended: every existing token keeps its
        id, the new alias tokens come last, and pieces the new kinds match are no longer
        produced (see :func:`pytest_quantagent.training.train.extend_embeddings`)."""
        return DomainTokenizer(self.pieces, version=self.version, aliases=[*self.aliases, *extra],
                               alias_order=self.alias_order)

    # -- encode / decode --------------------------------------------------------------
    def _may_alias(self, piece: str) -> bool:
        """Whether an alias kind may take ``piece``: it is no vocabulary piece, or one that
        a kind added later shadows."""
        return piece not in self._piece_to_id or piece in self._shadowed

    def _alias_of(self, piece: str, seen: dict[str, str], used: list[set[int]]) -> str | None:
        """The alias token of ``piece`` (without the one leading space a word piece may
        carry) in a text whose earlier ids are ``seen`` and whose taken slots (1-based, per
        kind) are ``used`` (both updated), or None when it is of no kind or its kind's
        aliases are used up."""
        piece = _core(piece)
        got = seen.get(piece)
        if got is not None:
            return got
        for j, (kind, rx) in enumerate(zip(self.aliases, self._alias_res, strict=True)):
            if rx.fullmatch(piece):
                taken = used[j]
                if len(taken) >= kind.count:
                    return None
                if self.alias_order == "hashed":
                    k = _hash_slot(piece, kind.name, kind.count)
                    while k + 1 in taken:
                        k = (k + 1) % kind.count
                    k += 1
                else:
                    k = len(taken) + 1
                taken.add(k)
                seen[piece] = alias = kind.token(k)
                return alias
        return None

    def alias_map(self, text: str) -> dict[str, str]:
        """Alias token → the id it stands for in ``text`` (what :meth:`encode` numbered);
        pass it to :meth:`decode` to read a model's output for that text."""
        if not self.aliases:
            return {}
        seen: dict[str, str] = {}
        used: list[set[int]] = [set() for _ in self.aliases]
        for piece in self._split.findall(text):
            if self._may_alias(piece):
                self._alias_of(piece, seen, used)
        return {alias: raw for raw, alias in seen.items()}

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token strings in the text become specials; with
        aliases, entity ids become alias tokens numbered within this text)."""
        out: list[int] = []
        lookup = self._piece_to_id
        seen: dict[str, str] = {}
        used: list[set[int]] = [set() for _ in self.aliases]
        for piece in self._split.findall(text):
            if self.aliases and self._may_alias(piece):
                alias = self._alias_of(piece, seen, used)
                if alias is not None:
                    if piece.startswith(" "):  # " Maren" in prose: the space, then the alias
                        out.append(self.byte_offset + 32)
                    out.append(lookup[alias])
                    continue
            tid = lookup.get(piece)
            if tid is not None:
                out.append(tid)
                continue
            for sub in _FALLBACK_WORD.findall(piece):
                tid = lookup.get(sub)
                if tid is not None:
                    out.append(tid)
                else:
                    out.extend(self.byte_offset + b for b in sub.encode())
        return out

    def decode(
        self, ids: Iterable[int], *, skip_special: bool = False, aliases: Mapping[str, str] | None = None
    ) -> str:
        """Text of ``ids``; invalid UTF-8 (a cut multi-byte char) becomes U+FFFD.

        ``aliases`` (from :meth:`alias_map` of the prompt): alias tokens become the ids they
        stand for; an alias it does not hold decodes as itself."""
        n_special = len(SPECIALS)
        start = self.alias_offset
        chunks = []
        for i in ids:
            if skip_special and 0 <= i < n_special:
                continue
            if aliases and i >= start:
                chunks.append(aliases.get(self._id_to_text[i], self._id_to_text[i]).encode())
            else:
                chunks.append(self._id_to_bytes[i])
        return b"".join(chunks).decode("utf-8", errors="replace")

    # -- persistence ------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``quantagent_tokenizer.json`` into ``folder``."""
        path = Path(folder) / TOKENIZER_FILE
        payload: dict[str, Any] = {
            "format": "quantagent-domain-tokenizer",
            "version": self.version,
            "specials": list(SPECIALS),
            "pieces": self.pieces,
        }
        if self.aliases:
            payload["aliases"] = [
                {"name": k.name, "pattern": k.pattern, "count": k.count} for k in self.aliases
            ]
        if self.alias_order != "appearance":  # files of earlier models stay byte-identical
            payload["alias_order"] = self.alias_order
        path.write_text(json.dumps(payload, ensure_ascii=False, indent=0))
        return path

    @classmethod
    def load(cls, folder: str | Path) -> DomainTokenizer:
        """Read the tokenizer saved in ``folder`` (or the file path itself)."""
        path = Path(folder)
        if path.is_dir():
            path = path / TOKENIZER_FILE
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise DataFileError(path, "", f"cannot read tokenizer: {e}") from e
        if payload.get("format") != "quantagent-domain-tokenizer":
            raise DataFileError(path, "format", f"not a quantagent tokenizer: {payload.get('format')!r}")
        if payload.get("version") not in SPLIT_VERSIONS or payload.get("specials") != list(SPECIALS):
            raise DataFileError(
                path, "version", f"unsupported tokenizer version {payload.get('version')!r}; "
                f"this package reads versions {', '.join(map(str, SPLIT_VERSIONS))}"
            )
        try:
            aliases = [AliasKind(a["name"], a["pattern"], int(a["count"])) for a in payload.get("aliases", [])]
        except (KeyError, TypeError, ValueError) as e:
            raise DataFileError(path, "aliases", f"each alias kind needs name, pattern and count: {e}") from e
        order = payload.get("alias_order", "appearance")
        if order not in ALIAS_ORDERS:
            raise DataFileError(path, "alias_order", f"unknown alias order {order!r}; "
                                f"allowed: {', '.join(ALIAS_ORDERS)}")
        return cls(payload["pieces"], version=payload["version"], aliases=aliases, alias_order=order)
