"""One rule for configuration values: the engine (native/engine/config_value.h,
read through ``_native.parse_config``) and the Python side
(ring_strategy/_config_values.py, which the launcher uses without the
engine) accept and refuse the same spellings, and errors name the variable
the user set, ``RING_`` or ``HOROVOD_``.
"""

from __future__ import annotations

import pytest

from ring_strategy import _config_values as values
from ring_strategy import _native
from ring_strategy.environments.elastic import elastic_timeout
from ring_strategy.environments.external import read_int

BOOLEANS = ["1", "0", "true", "FALSE", "Yes", "no", "ON", "off", " true ", "2", "-1", "maybe", "tru", "y", "n",
            "t", "f", "", " ", "1.0", "0x1", "oN\n", "\u0131", "yes please"]
INTEGERS = ["0", "42", "-1", "+7", " 12 ", "1e3", "1.0", "0x10", "1_000", "", "-", "+", "12a", "\u0663",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
            "007", "1 2"]
NUMBERS = ["0", "1", "-1", "2.5", ".5", "5.", "1e-3", "1E+2", " 3.25 ", "inf", "-inf", "nan", "infinity",
           "0x1p3", "1_0", "", ".", "e3", "1e", "1e+", "1.2.3", "1e999", "-1e999", "1e-999", "\u0663", "1,5",
           "++1"]
WORDS = ["tcp", "TCP", " Tcp ", "shm", "auto", "udp", "", "t cp"]


def engine(variable: str, value: str):
    """The engine's parse of ``variable=value``: the config dict, or the error."""
    try:
        return _native.parse_config({variable: value})
    except _native.BadArgumentError as e:
        return e


@pytest.mark.parametrize("text", BOOLEANS)
def test_booleans_agree(text: str) -> None:
    mine = values.parse_bool(text)
    theirs = engine("RING_AUTOTUNE", text)
    if text == "":  # an empty variable is unset
        assert theirs["autotune"] is False
        return
    if mine is None:
        assert isinstance(theirs, _native.BadArgumentError), (text, theirs)
    else:
        assert theirs["autotune"] is mine, (text, theirs)


@pytest.mark.parametrize("text", INTEGERS)
def test_integers_agree(text: str) -> None:
    # RING_AUTOTUNE_WARMUP_SAMPLES is a plain integer of the engine, from 0.
    mine = values.integer("x", 0, 2**31 - 1).accepts(text)
    theirs = engine("RING_AUTOTUNE_WARMUP_SAMPLES", text)
    if text == "":
        return
    assert mine == (not isinstance(theirs, Exception)), (text, theirs)
    if mine:
        assert theirs["autotune_warmup_samples"] == values.parse_integer(text)
    # The full 64-bit range: RING_FUSION_THRESHOLD from 0.
    big = engine("RING_FUSION_THRESHOLD", text)
    assert values.integer("x", 0).accepts(text) == (not isinstance(big, Exception)), (text, big)


@pytest.mark.parametrize("text", NUMBERS)
def test_numbers_agree(text: str) -> None:
    mine = values.number("x", 0).accepts(text)
    theirs = engine("RING_CYCLE_TIME", text)
    if text == "":
        return
    assert mine == (not isinstance(theirs, Exception)), (text, theirs)
    if mine:
        assert theirs["cycle_time_ms"] == values.parse_number(text)


@pytest.mark.parametrize("text", WORDS)
def test_words_agree(text: str) -> None:
    mine = values.parse_word(text, ("shm", "auto", "tcp"))
    theirs = engine("RING_TRANSPORT", text)
    if text == "":
        return
    if mine is None:
        assert isinstance(theirs, _native.BadArgumentError), (text, theirs)
    else:
        assert theirs["transport"] == ("tcp" if mine == 2 else "shm"), (text, theirs)


@pytest.mark.parametrize("variable, value, message", [
    ("HOROVOD_FUSION_THRESHOLD", "abc", "HOROVOD_FUSION_THRESHOLD should be a non-negative integer number of bytes. "
                                        "Got: 'abc'"),
    ("HOROVOD_CACHE_CAPACITY", "1e3", "HOROVOD_CACHE_CAPACITY should be a non-negative integer. Got: '1e3'"),
    ("HOROVOD_AUTOTUNE", "maybe", "HOROVOD_AUTOTUNE should be 0 or 1. Got: 'maybe' (true, yes, on"),
    ("HOROVOD_HIERARCHICAL_ALLREDUCE", "2", "HOROVOD_HIERARCHICAL_ALLREDUCE should be 0, 1 or auto. Got: '2'"),
    ("HOROVOD_LOG_LEVEL", "loud", "HOROVOD_LOG_LEVEL should be one of trace"),
    ("HOROVOD_GLOO_TIMEOUT_SECONDS", "0", "HOROVOD_GLOO_TIMEOUT_SECONDS should be a positive number of seconds"),
    ("HOROVOD_STALL_CHECK_DISABLE", "2", "HOROVOD_STALL_CHECK_DISABLE should be 0 or 1. Got: '2'"),
    ("RING_CACHE_CAPACITY", "1e3", "RING_CACHE_CAPACITY should be a non-negative integer. Got: '1e3'"),
])
def test_engine_errors_name_the_variable_set(variable: str, value: str, message: str) -> None:
    with pytest.raises(_native.BadArgumentError) as info:
        _native.parse_config({variable: value})
    assert message in str(info.value)


def test_the_ring_name_wins_and_an_unused_alias_is_not_read() -> None:
    config = _native.parse_config({"RING_CACHE_CAPACITY": "5", "HOROVOD_CACHE_CAPACITY": "not read"})
    assert config["cache_capacity"] == 5
    assert _native.parse_config({"HOROVOD_CACHE_CAPACITY": "6"})["cache_capacity"] == 6


def test_documented_spellings_are_accepted() -> None:
    config = _native.parse_config({
        "RING_AUTOTUNE": "true", "HOROVOD_TIMELINE_MARK_CYCLES": "Yes", "RING_ENCRYPT": "off",
        "RING_HIERARCHICAL_ALLREDUCE": "AUTO", "RING_LOG_LEVEL": "FATAL", "HOROVOD_STALL_CHECK_DISABLE": "on",
    })
    assert config["autotune"] and config["timeline_mark_cycles"] and not config["encrypt"]
    assert config["hierarchical_allreduce"] == -1
    assert config["log_level"] == 4  # error
    assert config["stall_check_seconds"] == 0 and config["stall_shutdown_seconds"] == 0


def test_the_bool_note_is_the_engines() -> None:
    with pytest.raises(_native.BadArgumentError) as info:
        _native.parse_config({"RING_ENCRYPT": "maybe"})
    assert str(info.value).endswith(f"({values.BOOL_SPELLINGS})")


@pytest.mark.parametrize("reader, variable, value", [
    (elastic_timeout, "HOROVOD_ELASTIC_TIMEOUT", "inf"),
    (lambda env: read_int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK"), "PMI_RANK", "1e3"),
])
def test_python_readers_name_the_variable_set(reader, variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{variable} should be .*Got: '{value}'"):
        reader({variable: value})
