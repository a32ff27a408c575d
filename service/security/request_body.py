"""What a JSON request body may hold: only the fields its route defines, and strings without NUL."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

from service.errors import MAX_REPORTED_ERRORS


class RequestBody(BaseModel):
    """A JSON request body: a field it does not define is a 422 naming that field, never ignored (a misspelt
    `arguments` would otherwise call the tool with none, a `top_k` search silently get the default k)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _few_unknown_keys(cls, data: Any) -> Any:
        """The body with one more unknown key than a 422 lists, the rest left out before they are validated:
        listing 100,000 of them cost pydantic and FastAPI 0.27 s, and only the first are shown."""
        if not isinstance(data, dict) or len(data) <= len(cls.model_fields) + MAX_REPORTED_ERRORS:
            return data
        known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        kept: dict[Any, Any] = {}
        unknown = 0
        for key, value in data.items():
            if key in known or unknown <= MAX_REPORTED_ERRORS:
                kept[key] = value
                unknown += key not in known
        return kept


NUL_REASON = "must not contain NUL (U+0000) characters"


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(NUL_REASON)
    return value


# A request string that is stored or looked up as SQL text, which cannot hold NUL on PostgreSQL (a 500 on lookups;
# a search or execution whose log row the database then refused).
Text = Annotated[str, AfterValidator(_without_nul)]
