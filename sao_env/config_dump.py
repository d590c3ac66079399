"""Configuration models whose dumps leave out keys added after configurations were first hashed.

A run's configuration hash, a warm start's cache key and a source's key are sha256 of a model's dump
(``model_dump``), so a key added later would change every earlier hash even where it holds its default.
A model that derives from ``OmitDefaults`` names such keys in ``omit_at_default``: they are left out of its
dump while they equal their defaults, and a configuration written before they existed keeps its hash.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, model_serializer


class OmitDefaults(BaseModel):
    """Base of a configuration model whose ``omit_at_default`` keys are dropped from its dump at their defaults."""

    omit_at_default: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for key in self.omit_at_default:
                field = type(self).model_fields.get(key)
                if field is not None and key in data and getattr(self, key) == field.default:
                    data.pop(key)
        return data
