"""Moved to ``arch_zoo.coerce`` (a leaf beside the registry); kept so that code written against this
path, a plugin's or a notebook's, keeps importing. Nothing in the package imports it."""
from ..coerce import ComponentSpec, NoOptions, coerce, component_field, field_family, first_difference, to_dict  # noqa: F401
