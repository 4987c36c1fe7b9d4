"""The IR core: types, attributes, ops/blocks/regions with use-lists, op
definitions and dialects, printer and parser (MLIR generic syntax), verifier,
pattern rewriter and pass manager. It knows no dialect: contexts holding
the in-tree dialects and passes come from `tcc.dialects.init_all`."""
from .attributes import *  # noqa: F401,F403
from .core import Block, BlockArgument, Builder, Location, OpResult, Operation, Region, Value, UNKNOWN_LOC
from .errors import IRError, ParseError, PassError, TccError, VerifyError
from .module import Module
from .opdef import (AttrDef, COMMUTATIVE, CONSTANT_LIKE, Context, Dialect, ISOLATED, OpDef, OperandDef,
                    PURE, SAME_ELEMENT_TYPE, SYMBOL, TERMINATOR)
from .parser import parse_attribute, parse_module, parse_type
from .passes import Pass, PassManager, make_pass, parse_pipeline
from .printer import print_module, print_op
from .resources import ResourceTable
from .rewriter import RewritePattern, Rewriter, apply_patterns_greedily
from .types import *  # noqa: F401,F403
from .verifier import verify
