"""The command line's value checks: durations ("8h", "1h30m"), positive numbers, and a negative value kept with its
flag, so that each bad value is its flag's own one-line error (argparse's exit 2), never a traceback."""

from __future__ import annotations

import argparse
import re

DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")
SECONDS_PER_UNIT = {"h": 3600, "m": 60, "s": 1, "": 1}


def parse_duration(text: str) -> float:
    """"8h", "30m", "90s", "1h30m", "1.5h" or plain seconds -> seconds."""
    cleaned = text.strip().lower()
    if cleaned.startswith("-"):
        raise argparse.ArgumentTypeError(f"duration {text!r} must be more than zero")
    parts = DURATION_PART.findall(cleaned)
    if not cleaned or "".join(number + unit for number, unit in parts) != cleaned:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use forms like 8h, 30m, 90s or 1h30m")
    seconds = sum(float(number) * SECONDS_PER_UNIT[unit] for number, unit in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be more than zero")
    return seconds


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


NEGATIVE_VALUE = re.compile(r"^-\.?\d")


def joined_negative_values(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--budget -5m` as `--budget=-5m`. argparse reads a value that starts with '-' (but for a plain negative
    number) as another flag and answers "expected one argument"; joined, the flag's own check says what is wrong."""
    takes_value = _flags_with_a_value(parser)
    joined: list[str] = []
    for word in argv:
        if joined and joined[-1] in takes_value and NEGATIVE_VALUE.match(word):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def _flags_with_a_value(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= _flags_with_a_value(command)
        elif action.option_strings and action.nargs is None:
            flags.update(action.option_strings)
    return flags
