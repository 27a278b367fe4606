"""How configuration values are spelled, for the Python side.

One rule for every value, whether the engine reads it
(native/engine/config_value.h, the same rule in C++) or Python does
(``ringrun``'s options and ``--config-file``, ``RING_START_TIMEOUT``,
``RING_ELASTIC_TIMEOUT``, the launchers' rank variables):

boolean
    ``1``, ``true``, ``yes``, ``on`` / ``0``, ``false``, ``no``, ``off``, in any case.
integer
    Decimal digits with an optional sign (``0``, ``42``, ``-1``); not ``1e3``,
    ``0x10``, ``1_000`` or ``1.0``. It must fit in 64 bits.
number
    A finite decimal with an optional fraction and exponent (``2``, ``0.5``,
    ``.5``, ``1e-3``); not ``inf``, ``nan`` or ``1_000``.
word
    One of a setting's words (``auto``, ``tcp``, ``warning``, ...), in any case.

Spaces around a value are ignored; an empty variable counts as unset.
Importable without the native engine (the launcher uses it);
tests/test_config_values.py checks that this module and the engine
(``ring_strategy._native.parse_config``) accept and refuse the same spellings.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Any, Callable, Mapping, Optional, Sequence, Type

__all__ = [
    "BOOL_SPELLINGS", "Kind", "POSITIVE_SECONDS", "boolean", "integer", "number", "parse_bool", "parse_integer", "parse_number",
    "IntegerOption", "NumberOption", "parse_word", "read", "word",
]

#: What an error adds after "should be 0 or 1" (the engine's kBoolSpellings).
BOOL_SPELLINGS = "true, yes, on and false, no, off are accepted too, in any case"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_INTEGER = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z", re.ASCII)
_INT64 = (-2**63, 2**63 - 1)
# What str.strip() removes here: the ASCII spaces C's isspace() knows.
_SPACES = " \t\n\r\f\v"


def parse_word(text: str, words: Sequence[str]) -> Optional[int]:
    """The index in ``words`` (lower case) of the word ``text`` spells, or None."""
    s = text.strip(_SPACES)
    if not s.isascii():  # only ASCII letters have a case here, as in C
        return None
    s = s.lower()
    return words.index(s) if s in words else None


def parse_bool(text: str) -> Optional[bool]:
    """The boolean ``text`` spells, or None."""
    i = parse_word(text, _TRUE + _FALSE)
    return None if i is None else i < len(_TRUE)


def parse_integer(text: str) -> Optional[int]:
    """The 64-bit integer ``text`` spells in decimal, or None."""
    s = text.strip(_SPACES)
    if not _INTEGER.match(s):
        return None
    value = int(s)
    return value if _INT64[0] <= value <= _INT64[1] else None


def parse_number(text: str) -> Optional[float]:
    """The finite number ``text`` spells in decimal, or None."""
    s = text.strip(_SPACES)
    if not _NUMBER.match(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


@dataclasses.dataclass(frozen=True)
class Kind:
    """The rule of one setting: how it is spelled and which values it allows.

    Attributes:
        what: What the value should be, as errors say it ("a non-negative integer").
        parse: The value ``text`` spells, or None when it is not spelled right.
        allowed: Whether a parsed value is in range.
        note: Added in parentheses after the quoted value in errors.
    """

    what: str
    parse: Callable[[str], Any]
    allowed: Callable[[Any], bool] = lambda value: True
    note: str = ""

    def value(self, name: str, text: str) -> Any:
        """The value of ``text``, set as ``name``.

        Raises:
            ValueError: "<name> should be <what>. Got: '<text>'".
        """
        value = self.parse(text)
        if value is None or not self.allowed(value):
            note = f" ({self.note})" if self.note else ""
            raise ValueError(f"{name} should be {self.what}. Got: {text!r}{note}")
        return value

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is a value of this kind."""
        value = self.parse(text)
        return value is not None and bool(self.allowed(value))


def boolean() -> Kind:
    """A boolean."""
    return Kind("0 or 1", parse_bool, note=BOOL_SPELLINGS)


def integer(what: str, minimum: int = _INT64[0], maximum: int = _INT64[1]) -> Kind:
    """An integer from ``minimum`` to ``maximum``."""
    return Kind(what, parse_integer, lambda v: minimum <= v <= maximum)


def number(what: str, minimum: float = -math.inf, *, above: bool = False) -> Kind:
    """A number of at least ``minimum`` (more than it, when ``above``)."""
    return Kind(what, parse_number, (lambda v: v > minimum) if above else (lambda v: v >= minimum))


def word(what: str, words: Sequence[str]) -> Kind:
    """One of ``words`` (lower case), in any case; the value is the word."""
    return Kind(what, lambda text: None if parse_word(text, words) is None else text.strip(_SPACES).lower())


def _option_action(parse: Callable[[str], Any], what: str) -> Type[argparse.Action]:
    class Checked(argparse.Action):
        """Stores the value(s) ``parse`` reads from the option's text; any
        other text ends the parse with "<option> should be <what>. Got: <text>"."""

        def __call__(self, parser, namespace, given, option_string=None):
            texts = given if isinstance(given, list) else [given]
            parsed = [parse(text) for text in texts]
            for text, value in zip(texts, parsed):
                if value is None:
                    parser.error(f"{option_string} should be {what}. Got: {text}")
            setattr(namespace, self.dest, parsed if isinstance(given, list) else parsed[0])

    return Checked


#: ``action=`` of an argparse option whose value is an integer, or a number
#: (the checks of its range come after).
IntegerOption = _option_action(parse_integer, "an integer")
NumberOption = _option_action(parse_number, "a finite number")

#: Seconds of a timeout: more than 0.
POSITIVE_SECONDS = number("a positive number of seconds", 0, above=True)


def read(environ: Mapping[str, str], kind: Kind, *names: str, default: Any = None) -> Any:
    """The value of the first of ``names`` set (non-empty) in ``environ``.

    Args:
        environ: The variables.
        kind: The value's rule.
        *names: The variable's names, the preferred first (``RING_X``, ``HOROVOD_X``).
        default: The value when none is set.

    Raises:
        ValueError: Naming the variable that was set, and quoting its value.
    """
    for name in names:
        raw = environ.get(name)
        if raw:
            return kind.value(name, raw)
    return default
