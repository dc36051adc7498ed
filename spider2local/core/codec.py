"""The one codec of the run folder's records: frozen stdlib dataclasses to JSON and back.

Why pydantic v2 over the records as they are, not ``BaseModel``s, nor a codec of our own: the
records stay plain frozen dataclasses (equality, ``replace``, no validation on construction in
the hot paths of the runner), and pydantic's ``TypeAdapter`` reads their annotations, nested
records, enums, tuples and optionals included, with one well-kept implementation instead of the
26 hand-written ``to_json``/``from_json`` pairs this replaced (each with its own idea of what a
wrong type is). A hand-written reflective codec would re-implement exactly that walk.

Reading is *strict JSON* (``validate_json(..., strict=True)``): what a writer of ours writes is
accepted (arrays for tuples, strings for enums, integers for floats), and nothing is coerced
(``"5"`` is not an int, ``1`` is not ``true``): a hand-edited or damaged file is refused with
one phrase naming the field (:class:`RecordError`), which the callers' "problem" checks turn
into "unfinished" (a result) or a one-line error (a run.json).

Each record keeps its own version-upgrade step: data of an older schema is rewritten into the
current shape *before* :func:`load`, so the codec only ever sees the current layout.

Derived values (a task score's ``tables_passed``, a table's ``lenient``) are properties of
the record, written beside the fields for readers of the file (:func:`derived`) and ignored
when read (recomputed from the fields).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from functools import cache
from typing import Any, TypeVar, cast

from pydantic import ConfigDict, GetCoreSchemaHandler, TypeAdapter, ValidationError, with_config
from pydantic_core import core_schema

T = TypeVar("T")

closed = with_config(ConfigDict(extra="forbid"))
"""Class decorator: a key the record does not have is refused. For records whose every key was
always known to the reader (result.json). Nested records without a decorator of their own
inherit it (pydantic applies the enclosing record's config to a plain dataclass)."""

tolerant = with_config(ConfigDict(extra="ignore"))
"""Class decorator: keys the record does not have are ignored (its derived values, keys an older
writer wrote), also when it is nested in a :data:`closed` record."""


class RecordError(ValueError):
    """Data that is not the record asked for; the message is one phrase naming the field."""


@cache
def _adapter(tp: Hashable) -> TypeAdapter[Any]:
    """One adapter per type, built once: building walks the annotations (milliseconds), and a
    report reads thousands of results."""
    return TypeAdapter(cast(Any, tp))


def dump(record: Any) -> dict[str, Any]:
    """The record as plain JSON values: enums as their values, tuples as lists, nested records
    as objects, derived properties beside the fields (:func:`derived`)."""
    data = _adapter(cast(Hashable, type(record))).dump_python(record, mode="json")
    if not isinstance(data, dict):
        raise TypeError(f"{type(record).__name__} is not a record")
    return data


def load(cls: type[T], data: Any) -> T:
    """``data`` (parsed JSON) as a ``cls``; raises :class:`RecordError` with one phrase
    (``usage.turns: Input should be a valid integer``) for data of other types.

    The data goes through JSON text once so that pydantic's strict *JSON* rules apply (see the
    module docstring); it came from JSON, so nothing is lost."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise RecordError(f"not JSON: {err}") from None
    try:
        return cast(T, _adapter(cast(Hashable, cls)).validate_json(text, strict=True))
    except ValidationError as err:
        raise RecordError(phrase(err)) from None


def phrase(err: ValidationError) -> str:
    """The first problem of a validation error in one phrase: where, then what."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def derived(*names: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: :func:`dump` also writes these properties of the record (after its
    fields, in this order); :func:`load` ignores them, since the fields determine them."""

    def decorate(cls: type[T]) -> type[T]:
        def schema(_cls: type[Any], source: Any,
                   handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
            base = dict(handler(source))

            def serialize(record: Any, nxt: core_schema.SerializerFunctionWrapHandler,
                          info: core_schema.SerializationInfo) -> Any:
                data = nxt(record)
                if isinstance(data, dict):
                    data.update({name: getattr(record, name) for name in names})
                return data

            base["serialization"] = core_schema.wrap_serializer_function_ser_schema(
                serialize, info_arg=True)
            return cast(core_schema.CoreSchema, base)

        cls.__get_pydantic_core_schema__ = classmethod(schema)  # type: ignore[attr-defined]
        return cls

    return decorate
