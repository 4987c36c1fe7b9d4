"""The onnx dialect: ops generated from onnx.defs, the importer and exporter."""
from .dialect import OPSET_ATTR, dialect, op_name, schema_for, split_op_name  # noqa: F401
