"""The settings a search runs with, in layers: the command line over a `--config FILE` (TOML)
over the run stored in the archive (on resume) over the built-in defaults; and what a resumed
run may not change. Plain values only: run.py describes the options (`OptionSpec`) and turns
the result into frozen configs; nothing here sees argparse."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from suites.registry import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

# a resumed run must keep these: its kernels, populations and random draws depend on them, and
# baseline and seeds make the speedups and correctness of its sessions compare
FIXED = ("suite", "suite_path", "islands", "population", "seed", "migration_interval", "operators",
         "baseline", "seeds", "setting")
# these may grow on resume, but only when asked (--extend): a typo must not quietly add work
EXTENDABLE = ("generations", "tasks", "difficulty", "category")
# the command's own switches: not settings of the run, so never stored or inherited
PER_COMMAND = ("config", "fresh", "extend", "archive", "retime")


@dataclass(frozen=True)
class OptionSpec:
    """One search option as a config file may set it."""

    name: str  # its dest: migration_interval for --migration-interval
    kind: type  # int, float, str or bool (a switch)
    choices: tuple[str, ...] | None = None  # the values it takes, where it names them


def read_file(path: str, specs: Mapping[str, OptionSpec], problems: list[str]) -> dict[str, Any]:
    """The options a TOML file sets, by dest. Tables only group keys (`[llm]` then `model = ...`);
    keys are option names, with dashes or underscores. What is wrong goes into `problems`."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as e:
        problems.append(f"cannot read --config {path}: {e.strerror}")
        return {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        problems.append(f"--config {path} is not valid TOML: {e}")
        return {}
    values: dict[str, Any] = {}
    for key, value in _flat(data):
        name = key.replace("-", "_")
        spec = specs.get(name)
        if spec is None:
            known = [s.replace("_", "-") for s in specs]
            problems.append(f"{path}: unknown key {key!r}{did_you_mean(key.replace('_', '-'), known)}")
            continue
        typed, problem = _typed(value, spec)
        if problem:
            problems.append(f"{path}: {key} {problem}")
        else:
            values[name] = typed
    return values


def _flat(data: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        out += list(value.items()) if isinstance(value, dict) else [(key, value)]
    return out


def _typed(value: Any, spec: OptionSpec) -> tuple[Any, str]:
    """(the value as the option takes it, '') or (None, what is wrong with it)."""
    if spec.kind is str and isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        value = ",".join(str(v) for v in value)  # tasks = ["softmax", "matmul"]: a comma list
    if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, spec.kind) or (spec.kind is int and isinstance(value, bool)):
        return None, f"must be {_KIND_NAMES[spec.kind]}, not {value!r}"
    if spec.choices and value not in spec.choices:
        return None, f"must be one of {', '.join(spec.choices)}, not {value!r}"
    return value, ""


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def layered(defaults: Mapping[str, Any], given: Mapping[str, Any], file: Mapping[str, Any],
            stored: Mapping[str, Any]) -> dict[str, Any]:
    """Every option's value: the command line's (`given`) over the file's over the stored run's
    over the default. A stored key that is no option (an older version's) is left out."""
    kept = {k: v for k, v in stored.items() if k in defaults and k not in PER_COMMAND}
    return {**defaults, **kept, **file, **given}


def resume_conflicts(old: Mapping[str, Any], new: Mapping[str, Any], extend: bool) -> list[str]:
    """What `new` changes of a stored run that a resume must keep, one phrase each; an archive
    from before a key was kept lacks it and is not held to it."""
    out = []
    for key in (*FIXED, *EXTENDABLE):
        if key not in old or _same(key, old[key], new.get(key)):
            continue
        flag = "--" + key.replace("_", "-")
        if key in FIXED:
            out.append(f"{flag} {old[key]} (this command: {new.get(key)})")
        elif not extend:
            out.append(f"{flag} {old[key]} (this command: {new.get(key)}; add --extend to grow it)")
        elif not _grows(key, old[key], new.get(key)):
            out.append(f"{flag} {old[key]} (this command: {new.get(key)}; --extend only grows it)")
    return out


def _same(key: str, old: Any, new: Any) -> bool:
    if key in ("tasks", "difficulty", "category"):
        return _items(old) == _items(new)  # the same filter, in any order
    return old == new


def _items(value: Any) -> frozenset[str] | None:
    """A comma-separated filter as a set; None (no filter) is everything."""
    if value is None or not str(value).strip():
        return None
    return frozenset(v.strip() for v in str(value).split(",") if v.strip())


def _grows(key: str, old: Any, new: Any) -> bool:
    if key == "generations":
        return isinstance(new, int) and isinstance(old, int) and new >= old
    was, now = _items(old), _items(new)
    return now is None or (was is not None and now >= was)
