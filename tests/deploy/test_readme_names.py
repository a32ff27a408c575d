"""What README.md and docs/architecture.md name is there: every `TOOLSCOUT_` variable and `section.name` setting
(with the default they give it), every file of the repository and every test. A setting renamed, a default
changed or a test moved without the docs fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/architecture.md")
# Named on purpose as what is not a setting: misspellings the settings refuse or ignore (README, Configuration),
# and the variables of the scripts and tests.
NOT_SETTINGS = {"TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY", "TOOLSCOUT_POLCY__", "TOOLSCOUT_PROT"}
SCRIPT_VARIABLES = {"TOOLSCOUT_NODE_PREFIX", "TOOLSCOUT_SCREENSHOTS_DIR"}
# Dotted names of a settings section that are trace spans or modules, not settings.
SPANS_AND_MODULES = {"search.embed", "search.index", "search.rank", "policy.authorize", "policy.ratelimit"}


def settings_defaults() -> dict[str, Any]:
    """Each setting's default under its variable (TOOLSCOUT_SEARCH__MAX_K) and its dotted name (search.max_k)."""
    found: dict[str, Any] = {}

    def walk(model: type[BaseModel], variable: str, dotted: str) -> None:
        for name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                walk(field.annotation, f"{variable}{name.upper()}__", f"{dotted}{name}.")
                continue
            default = field.get_default(call_default_factory=True)
            found[variable + name.upper()] = found[dotted + name] = default

    walk(Settings, "TOOLSCOUT_", "")
    return found


def doc_lines() -> list[tuple[str, int, str]]:
    return [
        (doc, number, line)
        for doc in DOCS
        for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1)
    ]


def test_every_setting_the_docs_name_exists_with_the_default_they_give() -> None:
    defaults = settings_defaults()
    sections = {name.split(".")[0] for name in defaults if "." in name}
    wrong = []
    for doc, number, line in doc_lines():
        for variable in re.findall(r"TOOLSCOUT_[A-Z0-9_]+", line):
            section_prefix = variable.endswith("__") and any(name.startswith(variable) for name in defaults)
            if variable not in defaults and variable not in NOT_SETTINGS | SCRIPT_VARIABLES and not section_prefix:
                wrong.append(f"{doc}:{number}: no setting {variable}")
        for section, name in re.findall(r"`([a-z_]+)\.([a-z0-9_]+)`", line):
            dotted = f"{section}.{name}"
            if section in sections and dotted not in defaults and dotted not in SPANS_AND_MODULES:
                wrong.append(f"{doc}:{number}: no setting {dotted}")
        # `search.part_penalty` (0.5; ...) or `TOOLSCOUT_..._K` (5): a bare value, not one with a unit (64 MB)
        for setting, value in re.findall(r"`([a-z_]+\.[a-z0-9_]+|TOOLSCOUT_[A-Z0-9_]+)` \(([-0-9][0-9,.]*)[;)]", line):
            if setting in defaults and float(value.replace(",", "")) != defaults[setting]:
                wrong.append(f"{doc}:{number}: {setting} ({value}), default {defaults[setting]}")
    assert not wrong, "\n".join(wrong)


def test_every_file_and_test_the_docs_name_exists() -> None:
    top = ("service/", "indexer/", "tests/", "bench/", "scripts/", "docs/", "migrations/")
    missing = []
    for doc, number, line in doc_lines():
        named = re.findall(r"`([\w./-]+(?:::\w+)?)`", line) + re.findall(r"\]\(([\w./-]+)(?:#[\w-]*)?\)", line)
        for name in named:
            path, _, test = name.partition("::")
            if not path.startswith(top) or "*" in path:
                continue
            if not (ROOT / path).exists() and not (ROOT / "docs" / path).exists():
                missing.append(f"{doc}:{number}: {path}")
            elif test and not re.search(rf"^(async )?def {test}\b", (ROOT / path).read_text(), re.MULTILINE):
                missing.append(f"{doc}:{number}: {name}")
    assert not missing, "\n".join(missing)
