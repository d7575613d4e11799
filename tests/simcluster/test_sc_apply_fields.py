"""Server-side apply's field sets as properties: FieldsV1 encodes every set it is given
exactly (what is stored is what is read back), and every path an object's field set names
is found in that object — over generated objects with maps, keyed lists (containers by
name), set lists (finalizers) and atomic lists."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.apiserver.apply import applied_fields, decode, encode, value_at

_names = st.sampled_from(["a", "b", "c", "image", "value"])
_scalars = st.one_of(st.integers(-3, 3), st.text("xyz", max_size=3), st.booleans(), st.none())
_leaf_maps = st.dictionaries(_names, _scalars, max_size=3)
_containers = st.lists(
    st.builds(lambda n, rest: {"name": n, **rest}, st.sampled_from(["c1", "c2", "c3"]), _leaf_maps),
    max_size=3,
    unique_by=lambda c: c["name"],
)
_objects = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {"name": st.just("x")},
            optional={
                "labels": _leaf_maps,
                "finalizers": st.lists(
                    st.text("fgh", min_size=1, max_size=2), unique=True, max_size=3
                ),
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": _containers,
                "args": st.lists(_scalars, max_size=3),
                "nested": _leaf_maps,
            },
        ),
        "data": _leaf_maps,
    },
)


@settings(max_examples=100, deadline=None)
@given(obj=_objects)
def test_fields_v1_round_trips_and_every_path_is_in_the_object(obj: dict[str, Any]) -> None:
    fields = applied_fields(obj, has_status=True)
    assert decode(encode(fields)) == fields
    for path in fields:
        assert value_at(obj, path)[0], path
    assert not any(p[:2] == ("f:metadata", "f:name") for p in fields)  # server-owned
