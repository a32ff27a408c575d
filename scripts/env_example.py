"""Print .env.example from the Settings model, so the two never disagree.

Usage: python scripts/env_example.py > .env.example"""

from __future__ import annotations

from pydantic import BaseModel

from service.settings import Settings


def _lines(model: type[BaseModel], prefix: str) -> list[str]:
    lines: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            doc = (annotation.__doc__ or "").strip().splitlines()[0]
            lines += ["", f"# --- {doc}"]
            lines += _lines(annotation, f"{prefix}{name.upper()}__")
            continue
        default = field.get_default(call_default_factory=True)
        value = "" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        if field.description:
            lines.append(f"# {field.description}")
        lines.append(f"#{prefix}{name.upper()}={value}")
    return lines


if __name__ == "__main__":
    print("# Toolscout settings. Every variable is optional; the values shown are the defaults.")
    print("# Nested sections use `__`. Copy to .env and uncomment what you change.")
    print("\n".join(_lines(Settings, "TOOLSCOUT_")))
