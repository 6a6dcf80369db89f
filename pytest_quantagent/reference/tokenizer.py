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
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

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


def is_id_like(piece: str) -> bool:
    """Whether a piece is an id-like run (contains a digit, no spaces)."""
    return _ID_FULL.fullmatch(piece) is not None and len(piece) > 1


class DomainTokenizer:
    """Encode/decode with a fixed piece vocabulary and a lossless byte fallback."""

    def __init__(self, pieces: Sequence[str], version: int = FORMAT_VERSION) -> None:
        self._split = _split_rule(version)
        self.version = version
        """Split rule (see the module docstring); a model is only valid with its own."""
        self.pieces: list[str] = list(pieces)
        """Non-special, non-byte vocabulary entries (ids, words, JSON pieces)."""
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
        for p in self.pieces:
            if p in seen or p in SPECIALS:
                raise ValueError(f"tokenizer piece {p!r} is duplicated or a special token")
            seen.add(p)
            self._id_to_text.append(p)
            self._id_to_bytes.append(p.encode())
        self._piece_to_id: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
        for i, p in enumerate(self.pieces):
            self._piece_to_id[p] = self.piece_offset + i
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
    ) -> DomainTokenizer:
        """Build a vocabulary from a corpus and the domains' id pools.

        Every pool string becomes one token; id-like pieces of the corpus seen at least
        ``min_id_count`` times too; words and JSON pieces seen ``min_word_count`` times.
        ``version`` picks the split rule (1 only to reproduce models built with it).
        """
        rule = _split_rule(version)
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(rule.findall(t))
        chosen: dict[str, None] = {}
        for p in JSON_PIECES:
            chosen[p] = None
        for p in sorted(set(pool)):
            if p and p not in SPECIALS:
                chosen[p] = None
        for p, c in sorted(counts.items()):
            if p in SPECIALS or len(p.encode()) < 2:
                continue
            if is_id_like(p):
                if c >= min_id_count:
                    chosen[p] = None
            elif c >= min_word_count:
                chosen[p] = None
        return cls(list(chosen), version=version)

    # -- encode / decode --------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token strings in the text become specials)."""
        out: list[int] = []
        lookup = self._piece_to_id
        for piece in self._split.findall(text):
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

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 (a cut multi-byte char) becomes U+FFFD."""
        n_special = len(SPECIALS)
        chunks = [
            self._id_to_bytes[i] for i in ids if not (skip_special and 0 <= i < n_special)
        ]
        return b"".join(chunks).decode("utf-8", errors="replace")

    # -- persistence ------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``quantagent_tokenizer.json`` into ``folder``."""
        path = Path(folder) / TOKENIZER_FILE
        payload = {
            "format": "quantagent-domain-tokenizer",
            "version": self.version,
            "specials": list(SPECIALS),
            "pieces": self.pieces,
        }
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
        return cls(payload["pieces"], version=payload["version"])
