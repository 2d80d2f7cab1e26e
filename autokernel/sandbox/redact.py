"""Nothing a candidate wrote reaches the LLM provider or the run's files unfiltered: `scrub` takes out what looks
like a secret.

A kernel's error message is the candidate's own text: it can raise what it read (an API key from the environment,
the repository's .env, /etc/shadow where the loop runs as root) and the loop would send it to the provider in the
next request and save it in state.json. The sandbox keeps most of that out of its reach; this is the line behind it,
applied where a bench message enters the loop (runner.run_bench), where it is saved (the failure record in
state.json) and where it is written into a request (autokernel/agents/feedback.py). It removes:
  - the values of this process's environment variables (MIN_SECRET_CHARS or longer) and of those the loop
    withheld from it (child_env.secrets_withheld), but paths and lists of paths (PWD, PATH: in every traceback);
  - the values in files that hold secrets (SECRET_FILES: the repository's .env, ~/.netrc, ~/.aws/credentials...);
  - what looks like a key, a token, a private key or a password hash (PATTERNS), and long random-looking tokens.
and bounds what is left to MAX_CHARS, both ends kept.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path

from autokernel.sandbox.child_env import WITHHELD_VALUES

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8
MAX_CHARS = 16000
# Files whose values are secrets: relative to the repository (paths.ROOT), to the home folder ("~/...") or absolute.
SECRET_FILES = ("/etc/shadow", ".env", ".env.local", ".env.development", ".env.production", "~/.netrc",
                "~/.git-credentials", "~/.aws/credentials", "~/.pypirc", "~/.config/gh/hosts.yml",
                "~/.docker/config.json",
                "~/.anthropic/api_key", "~/.openai/api_key")
MAX_SECRET_FILE_BYTES = 1 << 16
PATTERNS = [re.compile(pattern, flags) for pattern, flags in (
    (r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    (r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}", 0),                      # Anthropic, OpenAI
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", 0),                                 # AWS access key ids
    (r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})", 0),  # GitHub
    (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", 0),                                # Slack
    (r"\bAIza[0-9A-Za-z_\-]{30,}", 0),                                     # Google
    (r"\bhf_[A-Za-z0-9]{20,}", 0),                                         # Hugging Face
    (r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0),  # JSON web tokens
    (r"\$(?:1|2[abxy]?|5|6|7|y|gy|argon2(?:i|d|id))\$[^\s:]{8,}", 0),      # crypt(3) password hashes (/etc/shadow)
    (r"\b[0-9a-fA-F]{32,}\b", 0),                                          # long hex: keys, tokens, digests
)]
# NAME=value, NAME: value where the name says what the value is (API_KEY, SECRET, TOKEN, PASSWORD...): the value.
_NAMED_SECRET = re.compile(r"(?i)\b([\w.-]*(?:api[_-]?key|secret|token|passw(?:or)?d|credential|auth)[\w.-]*)"
                           r"(\s*[=:]\s*['\"]?)([^\s'\",;]{4,})")
_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")
_TOKEN_BITS_PER_CHAR = 4.2          # a random base64 token has about 5-6; a long identifier or a path far fewer

def scrub(text: str | None, repository: str | Path | None = None, limit: int = MAX_CHARS) -> str | None:
    """text without anything that looks like a secret, at most `limit` characters (both ends kept); `repository`:
    the folder whose .env files hold secrets (default: the working folder)."""
    return Redactor(repository)(text, limit)


class Redactor:
    """scrub with the secret values read once: for many lines (bench.py's echo of the kernel's output)."""

    def __init__(self, repository: str | Path | None = None):
        self.values = sorted(secret_values(repository), key=len, reverse=True)

    def __call__(self, text: str | None, limit: int = MAX_CHARS) -> str | None:
        return _scrubbed(text, self.values, limit)


def _scrubbed(text: str | None, values: list[str], limit: int) -> str | None:
    if not text:
        return text
    for value in values:
        text = text.replace(value, REDACTED)
    for pattern in PATTERNS:
        text = pattern.sub(REDACTED, text)
    text = _NAMED_SECRET.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _TOKEN.sub(lambda m: REDACTED if _random_looking(m.group(0)) else m.group(0), text)
    if len(text) > limit:
        half = limit // 2
        text = f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"
    return text


def secret_values(repository: str | Path | None = None) -> set[str]:
    """Every value scrub takes out word for word: the environment's, the withheld ones, the secret files'."""

    values = {value for value in WITHHELD_VALUES if len(value) >= MIN_SECRET_CHARS}
    for value in os.environ.values():
        if len(value) >= MIN_SECRET_CHARS and not _paths(value):
            values.add(value)
    for path in _secret_files(Path(repository or os.getcwd())):
        values.update(_values_in(path))
    return values


def _paths(value: str) -> bool:
    """A path, or a list of them (PWD, OLDPWD, a search path): no secret, and in every traceback."""
    return all(part.startswith(("/", "~")) or not part for part in value.split(os.pathsep))


def _secret_files(repository: Path) -> list[Path]:
    found = []
    for name in SECRET_FILES:
        path = Path(name).expanduser() if name.startswith(("~", "/")) else repository / name
        if path.is_file():
            found.append(path)
    return found


def _values_in(path: Path) -> set[str]:
    """The lines of a secret file, and each value in them (after '=' or ':', or a netrc's 'password')."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_SECRET_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return set()
    values = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        values.add(line)
        for separator in ("=", ":"):
            if separator in line:
                values.add(line.split(separator, 1)[1].strip().strip("'\",").strip())
        words = line.split()
        values.update(after for before, after in zip(words, words[1:]) if before in ("password", "login", "account"))
    return {value for value in values if len(value) >= MIN_SECRET_CHARS}


def _random_looking(token: str) -> bool:
    """A long token of mixed letters and digits whose characters are spread like a key's, not a name's."""
    if not (re.search(r"[a-z]", token) and re.search(r"[A-Z]", token) and re.search(r"\d", token)):
        return False
    counts = Counter(token)
    bits = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return bits >= _TOKEN_BITS_PER_CHAR
