"""A check shared by the tests of frozen dataclasses: a table's or a result's parts cannot be
changed after they are made, and hash as values."""

from __future__ import annotations

import dataclasses

import pytest


def assert_frozen(value: object) -> None:
    """Setting ``value``'s first field raises FrozenInstanceError, and it hashes."""
    name = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, None)
    assert hash(value) == hash(value)
