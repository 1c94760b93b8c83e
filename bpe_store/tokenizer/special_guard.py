"""Which special tokens a text may hold *as specials*: tiktoken's ``allowed_special`` /
``disallowed_special`` guard, for ``Tokenizer.encode`` and its batch and array forms.

Text from users may spell a special token (``<|endoftext|>`` typed into a prompt). The CS336 API
encodes every special's text as the special (``allowed_special="all"``, the ``Tokenizer`` default);
tiktoken refuses text holding one unless it is allowed (``allowed_special=set()``,
``disallowed_special="all"``, the ``tiktoken_compat`` default), a guard against prompt injection:

* ``allowed_special``: ``"all"`` or a set of specials whose text becomes the special's id; other
  specials' text is encoded as plain text;
* ``disallowed_special``: ``"all"`` (every special not allowed) or a set of strings whose presence
  in the text raises ``DisallowedSpecialError`` (a ``ValueError``, as tiktoken's), so a special's
  text is never silently encoded as plain text; ``()`` encodes it as plain text.

``allowed_set`` checks the arguments and the texts and says which specials stay specials.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from ..errors import ArgumentTypeError, ArgumentValueError
from ..text.pretokenize import special_splitter

#: ``allowed_special`` / ``disallowed_special``: ``"all"`` or a collection of special tokens' texts.
SpecialSet = str | AbstractSet[str] | Sequence[str]


class DisallowedSpecialError(ArgumentValueError):
    """The text holds a special token's text that ``disallowed_special`` forbids (a ``ValueError``,
    as tiktoken raises; exit 2 from the CLI)."""


@functools.lru_cache(maxsize=64)
def _finder(tokens: frozenset[str], keep: bool = False):
    """The compiled search for any of ``tokens`` (longest first; ``keep``: as one group), cached
    per set: a guard is usually the same set call after call."""
    return special_splitter(sorted(tokens), keep=keep)


def _as_set(value: SpecialSet, specials: frozenset[str], name: str) -> frozenset[str]:
    if value == "all":
        return specials
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"{name} must be 'all' or a set of special tokens, not {value!r:.60}")
    out = frozenset(value)
    bad = next((s for s in out if not isinstance(s, str)), None)
    if bad is not None:
        raise ArgumentTypeError(f"{name} must hold str, not {type(bad).__name__}")
    return out


def allowed_set(specials: Sequence[str], texts: Iterable[str], allowed_special: SpecialSet,
                disallowed_special: SpecialSet) -> frozenset[str]:
    """The specials whose text stays the special in ``texts``; ``DisallowedSpecialError`` if a
    text holds a disallowed one (the first found, named)."""
    known = frozenset(specials)
    allowed = _as_set(allowed_special, known, "allowed_special")
    disallowed = (known - allowed if disallowed_special == "all"
                  else _as_set(disallowed_special, known, "disallowed_special"))
    if disallowed:
        find = _finder(disallowed).search
        for text in texts:
            hit = find(text) if isinstance(text, str) else None
            if hit is not None:
                raise DisallowedSpecialError(
                    f"the text holds {hit.group()!r}, a special token not allowed here: pass allowed_special="
                    f"{{{hit.group()!r}}} (or 'all') to encode it as the special token, or disallowed_special=() "
                    "to encode it as plain text")
    return allowed & known


def split_allowed(text: str, allowed: frozenset[str]) -> list[str]:
    """``text`` cut at the ``allowed`` specials (longest first): plain text at even places, a
    special at odd ones (``regex.split`` with a group)."""
    return _finder(allowed, True).split(text)
