"""Parses MLIR's generic op syntax back into IR, and the pretty forms of
`module`, `func.func` and `return` as mlir-opt prints them. A character-level scanner with
precompiled regexes (no token list) keeps 50k-op modules fast; types are
cached by their text. Errors carry file:line:col."""
from __future__ import annotations

import os
import re
import struct
import weakref

import numpy as np

from . import attributes as A
from .core import Block, Location, Operation, Region, UNKNOWN_LOC
from .errors import ParseError
from .module import Module
from .resources import SUFFIX, ResourceTable
from .types import (ComplexType, DialectType, FloatType, FunctionType, MemRefType, SCALARS,
                    STRING, TensorType, to_numpy_dtype, i64, f64)

_WS = re.compile(r"(?:\s+|//[^\n]*)*")
_VALUE_DEF = re.compile(r"%([\w.$-]+)(?::(\d+))?")
_VALUE_USE = re.compile(r"%([\w.$-]+)(?:#(\d+))?")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_IDENT = re.compile(r"[A-Za-z_][\w.$-]*")
_BARE_KEY = re.compile(r"[A-Za-z_][\w.$-]*")
_NUMBER = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|(?:\d+\.?\d*(?:[eE][-+]?\d+)?)|inf|nan)")
_SIMPLE_SHAPED = re.compile(r"(tensor|memref)<((?:\*x)|(?:(?:\d+|\?)x)*)([a-z][a-zA-Z0-9]*|!onnx\.String)>")
_SCALAR = re.compile(r"[a-z][a-zA-Z0-9]*")
_BLOCK_LABEL = re.compile(r"\^[\w.$-]+")
# An op signature without nested parentheses: `(t, t) -> t` or `(t) -> (t, t)`.
_SIMPLE_SIG = re.compile(r"\([^()]*\) -> (?:\([^()]*\)|[^\s(),]+)")
_ESCAPE = re.compile(r"\\([0-9A-Fa-f]{2}|.)")


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s

    def rep(m):
        g = m.group(1)
        if len(g) == 2:
            return chr(int(g, 16))
        return {"n": "\n", "t": "\t"}.get(g, g)
    raw = _ESCAPE.sub(rep, s)
    # \XX escapes denote bytes; reassemble multi-byte UTF-8 sequences.
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


class Parser:
    _type_cache = {}
    _sig_cache = {}

    def __init__(self, text: str, filename="<input>", resources: ResourceTable = None, context=None):
        self.s, self.p, self.filename = text, 0, filename
        self.resources = resources if resources is not None else ResourceTable()
        self.context = context
        self.scopes = [{}]   # name -> Value, one dict per isolated scope
        self.defined = [[]]  # names defined per open region, to forget on exit
        self.known_ops = set()
        self.starts = None   # op -> offset of its name, when positions are recorded

    # -- scanner helpers ---------------------------------------------------------------
    def error(self, msg, pos=None):
        pos = self.p if pos is None else pos
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        raise ParseError(msg, self.filename, line, col)

    def ws(self):
        s, p = self.s, self.p
        c = s[p:p + 1]
        if c == " " or c == "\n" or c == "/" or c == "\t" or c == "\r":
            self.p = _WS.match(s, p).end()

    def peek(self, lit):
        self.ws()
        return self.s.startswith(lit, self.p)

    def accept(self, lit):
        s, p = self.s, self.p
        c = s[p:p + 1]
        if c == " " or c == "\n" or c == "/" or c == "\t" or c == "\r":
            p = self.p = _WS.match(s, p).end()
        if s.startswith(lit, p):
            self.p += len(lit)
            return True
        return False

    def expect(self, lit, what=None):
        if not self.accept(lit):
            self.error(f"expected '{lit}'" + (f" {what}" if what else "") + f", found {self.found()}")

    def found(self):
        if self.p >= len(self.s):
            return "end of input"
        frag = self.s[self.p:self.p + 12].split("\n")[0]
        return f"'{frag}'"

    def match(self, rx):
        self.ws()
        m = rx.match(self.s, self.p)
        if m:
            self.p = m.end()
        return m

    def string(self):
        m = self.match(_STRING)
        if not m:
            self.error(f"expected a string literal, found {self.found()}")
        return _unescape(m.group(1))

    # -- types -----------------------------------------------------------------------
    def type(self):
        self.ws()
        s, p = self.s, self.p
        m = _SIMPLE_SHAPED.match(s, p)
        if m:
            text = m.group(0)
            t = self._type_cache.get(text)
            if t is None:
                if m.group(3) != "!onnx.String" and m.group(3) not in SCALARS:
                    self.error(f"malformed type '{text}' (unknown element type '{m.group(3)}')", p)
                t = self._shaped(m.group(1), m.group(2), self._element(m.group(3), p))
                self._type_cache[text] = t
            self.p = m.end()
            return t
        c = s[p:p + 1]
        if c == "(":
            self.p += 1
            ins = self.type_list(")")
            self.expect("->")
            if self.accept("("):
                outs = self.type_list(")")
            else:
                outs = [self.type()]
            return FunctionType(ins, outs)
        if c == "!":
            m = re.compile(r"![\w.]+").match(s, p)
            self.p = m.end()
            name = m.group(0)[1:]
            params = []
            if self.s.startswith("<", self.p):
                self.p += 1
                params = self.type_list(">")
            return DialectType(name, params)
        m = _SCALAR.match(s, p)
        if not m:
            self.error(f"expected a type, found {self.found()}")
        word = m.group(0)
        if word in ("tensor", "memref"):
            self.p = m.end()
            self.expect("<")
            shape = []
            if self.accept("*"):
                self.expect("x")
                shape = None
            else:
                while True:
                    self.ws()
                    dm = re.compile(r"(\d+|\?)x").match(self.s, self.p)
                    if not dm:
                        break
                    shape.append(None if dm.group(1) == "?" else int(dm.group(1)))
                    self.p = dm.end()
            try:
                el = self.type()
                self.expect(">")
            except ParseError as e:
                self.error(f"malformed type '{self._type_text(p)}' ({e.message})", p)
            return (TensorType if word == "tensor" else MemRefType)(shape, el)
        if word == "complex":
            self.p = m.end()
            self.expect("<")
            el = self.type()
            self.expect(">")
            return ComplexType(el)
        t = SCALARS.get(word)
        if t is None:
            self.error(f"unknown type '{word}'")
        self.p = m.end()
        return t

    def _type_text(self, start):
        """The text of a (malformed) type starting at `start`, for errors: up
        to its closing '>' on the same line."""
        s, depth, i = self.s, 0, start
        while i < len(s) and i - start < 80 and s[i] != "\n":
            depth += (s[i] == "<") - (s[i] == ">")
            i += 1
            if depth == 0 and s[i - 1] == ">":
                break
        return s[start:i]

    def _shaped(self, kw, dims, el):
        if dims == "*x":
            shape = None
        else:
            shape = [None if d == "?" else int(d) for d in dims.split("x")[:-1]]
        return (TensorType if kw == "tensor" else MemRefType)(shape, el)

    def _element(self, word, pos):
        if word == "!onnx.String":
            return STRING
        t = SCALARS.get(word)
        if t is None:
            self.error(f"unknown element type '{word}'", pos)
        return t

    def type_list(self, close):
        out = []
        if self.accept(close):
            return out
        while True:
            out.append(self.type())
            if self.accept(close):
                return out
            self.expect(",", "or '" + close + "' in type list")

    # -- attributes ------------------------------------------------------------------
    def attr_dict(self):
        d = {}
        self.expect("{")
        if self.accept("}"):
            return d
        while True:
            self.ws()
            m = _BARE_KEY.match(self.s, self.p)
            if m:
                key = m.group(0)
                self.p = m.end()
            elif self.s.startswith('"', self.p):
                key = self.string()
            else:
                self.error(f"expected an attribute name, found {self.found()}")
            d[key] = self.attribute() if self.accept("=") else A.UnitAttr()
            if self.accept("}"):
                return d
            self.expect(",", "or '}' in attribute dictionary")

    def attribute(self):
        self.ws()
        s, p = self.s, self.p
        c = s[p:p + 1]
        if c == '"':
            return A.StringAttr(self.string())
        if c == "[":
            self.p += 1
            elems = []
            if not self.accept("]"):
                while True:
                    elems.append(self.attribute())
                    if self.accept("]"):
                        break
                    self.expect(",", "or ']' in array")
            return A.ArrayAttr(elems)
        if c == "{":
            return A.DictAttr(self.attr_dict())
        if c == "@":
            self.p += 1
            if s.startswith('"', self.p):
                return A.SymbolRefAttr(self.string())
            m = self.match(_IDENT)
            if not m:
                self.error("expected a symbol name after '@'")
            return A.SymbolRefAttr(m.group(0))
        if c == "-" or c == "+" or c.isdigit():
            return self.number_attr()
        m = _IDENT.match(s, p)
        if m:
            w = m.group(0)
            if w in ("true", "false"):
                self.p = m.end()
                return A.BoolAttr(w == "true")
            if w == "unit":
                self.p = m.end()
                return A.UnitAttr()
            if w == "array":
                return self.dense_array()
            if w == "dense":
                return self.dense()
            if w == "dense_resource":
                return self.dense_resource()
            if w in ("inf", "nan"):
                return self.number_attr()
        if c in "(!" or m:
            return A.TypeAttr(self.type())
        self.error(f"expected an attribute value, found {self.found()}")

    def number_attr(self):
        start = self.p
        m = self.match(_NUMBER)
        if not m:
            self.error(f"expected a number, found {self.found()}")
        text = m.group(0)
        t = self.type() if self.accept(":") else None
        if t is None:
            t = f64 if _looks_float(text) else i64
        try:
            if isinstance(t, FloatType):
                return A.FloatAttr(_float_from_text(text, t), t)
            if _looks_float(text):
                self.error(f"float literal {text} for integer type {t}", start)
            return A.IntegerAttr(int(text, 0), t)
        except ValueError:
            self.error(f"bad number '{text}'", start)

    def dense_array(self):
        self.p += len("array")
        self.expect("<")
        t = self.type()
        vals = []
        if self.accept(":"):
            while True:
                start = self.p
                m = self.match(_NUMBER)
                if not m:
                    m = self.match(re.compile(r"true|false"))
                    if not m:
                        self.error(f"expected a number in array<>, found {self.found()}")
                    vals.append(1 if m.group(0) == "true" else 0)
                else:
                    try:
                        vals.append(_float_from_text(m.group(0), t) if isinstance(t, FloatType) else int(m.group(0), 0))
                    except ValueError:
                        self.error(f"bad number '{m.group(0)}'", start)
                if not self.accept(","):
                    break
        self.expect(">")
        return A.DenseArrayAttr(vals, t)

    def dense(self):
        self.p += len("dense")
        self.expect("<")
        start = self.p
        self.ws()
        if self.s.startswith('"0x', self.p):
            raw = bytes.fromhex(self.string()[2:])
            body = ("hex", raw)
        else:
            body = ("lit", self.dense_literal())
        self.expect(">")
        self.expect(":", "and a type after dense<...>")
        t = self.type()
        if not isinstance(t, TensorType) or not t.has_static_shape:
            self.error(f"dense elements need a static tensor type, got {t}", start)
        try:
            dt = to_numpy_dtype(t.element)
            n = t.num_elements
            if body[0] == "hex":
                arr = np.frombuffer(body[1], dtype=dt)
                if arr.size == 1 and n != 1:
                    arr = np.full(n, arr[0], dtype=dt)
            else:
                flat = np.array(_flatten(body[1]), dtype=object)
                if dt == object:
                    arr = flat
                elif isinstance(t.element, FloatType):
                    arr = np.array([_float_from_text(x, t.element) if isinstance(x, str) else float(x)
                                    for x in flat], dtype=np.float64).astype(dt)
                else:
                    ints = [int(x) for x in flat]
                    try:
                        arr = np.array(ints, dtype=dt)
                    except (TypeError, ValueError, OverflowError):
                        arr = np.array(ints, dtype=np.int64).astype(dt)
                if arr.size == 1 and n != 1:
                    arr = np.full(n, arr[0], dtype=dt)
            if arr.size != n:
                self.error(f"dense<> has {arr.size} elements but {t} needs {n}", start)
            return A.DenseElementsAttr(arr.reshape(t.shape), t)
        except (TypeError, ValueError) as e:
            self.error(f"bad dense<> value for {t}: {e}", start)

    def dense_literal(self):
        self.ws()
        if self.accept("["):
            items = []
            if self.accept("]"):
                return items
            while True:
                items.append(self.dense_literal())
                if self.accept("]"):
                    return items
                self.expect(",", "or ']' in dense<>")
        if self.s.startswith('"', self.p):
            return self.string()
        m = self.match(re.compile(r"true|false"))
        if m:
            return m.group(0) == "true"
        m = self.match(_NUMBER)
        if not m:
            self.error(f"expected an element in dense<>, found {self.found()}")
        text = m.group(0)
        return text if (_looks_float(text) or text.lower().startswith(("0x", "-0x"))) else int(text)

    def dense_resource(self):
        self.p += len("dense_resource")
        self.expect("<")
        self.ws()
        if self.s.startswith('"', self.p):
            name = self.string()
        else:
            m = self.match(_IDENT)
            if not m:
                self.error("expected a resource name")
            name = m.group(0)
        self.expect(">")
        self.expect(":")
        t = self.type()
        return A.DenseResourceAttr(name, t, self.resources)

    # -- operations --------------------------------------------------------------------
    def define(self, name, value, pos):
        scope = self.scopes[-1]
        if name in scope:
            self.error(f"redefinition of SSA value '%{name}'", pos)
        scope[name] = value
        self.defined[-1].append(name)

    def use(self):
        pos = self.p
        m = self.match(_VALUE_USE)
        if not m:
            self.error(f"expected an SSA value, found {self.found()}")
        name, idx = m.group(1), m.group(2)
        v = self.scopes[-1].get(name)
        if v is None:
            self.error(f"use of undefined value '%{name}'", pos)
        if idx is not None:
            if not isinstance(v, list) or int(idx) >= len(v):
                self.error(f"'%{name}' has no result #{idx}", pos)
            return v[int(idx)]
        if isinstance(v, list):
            return v[0]
        return v

    def operation(self):
        self.ws()
        start = self.p
        defs = []
        if self.s.startswith("%", self.p):
            while True:
                pos = self.p
                m = self.match(_VALUE_DEF)
                if not m:
                    self.error(f"expected a result name, found {self.found()}")
                defs.append((m.group(1), int(m.group(2) or 1), pos))
                if not self.accept(","):
                    break
            self.expect("=")
        self.ws()
        name_pos = self.p
        if not self.s.startswith('"', self.p):
            m = _IDENT.match(self.s, self.p)
            custom = _CUSTOM_FORMS.get(m.group(0)) if m else None
            if custom is None or (defs and custom != "return"):
                self.error("expected an operation (generic form \"dialect.op\"(...), or module, func.func, "
                           f"return), found {self.found()}")
            if defs:
                self.error("'return' has no results", start)
            self.p = m.end()
            op = getattr(self, custom)()
            if self.starts is not None:
                self.starts[op] = name_pos
            return op
        name = self.string()
        if "." not in name:
            self.error(f"operation name '{name}' has no dialect prefix", name_pos)
        ctx = self.context
        if ctx is not None and not ctx.allow_unregistered and name not in self.known_ops:
            if ctx.lookup(name) is None and name != "builtin.module":
                dialect = name.split(".", 1)[0]
                if dialect not in ctx.dialects:
                    self.error(f"unknown dialect '{dialect}' (in operation '{name}')", name_pos)
                self.error(f"unknown operation '{name}'", name_pos)
            self.known_ops.add(name)
        self.expect("(")
        operands = []
        if not self.accept(")"):
            while True:
                operands.append(self.use())
                if self.accept(")"):
                    break
                self.expect(",", "or ')' after operand")
        regions = []
        isolated = name in ("func.func", "builtin.module")
        if self.accept("("):
            if isolated:
                self.scopes.append({})
            while True:
                regions.append(self.region())
                if self.accept(")"):
                    break
                self.expect(",", "or ')' after region")
            if isolated:
                self.scopes.pop()
        attrs = self.attr_dict() if self.peek("{") else {}
        self.expect(":", "and the op's function type")
        self.ws()
        sig_pos = self.p
        m = _SIMPLE_SIG.match(self.s, sig_pos)
        ft = self._sig_cache.get(m.group(0)) if m else None
        if ft is None:
            ft = self.type()
            if m and self.p == m.end():
                self._sig_cache[m.group(0)] = ft
        else:
            self.p = m.end()
        if not isinstance(ft, FunctionType):
            self.error(f"expected a function type (operands) -> results, got {ft}", sig_pos)
        if len(ft.inputs) != len(operands):
            self.error(f"'{name}' has {len(operands)} operands but its type lists {len(ft.inputs)}", sig_pos)
        for i, (v, t) in enumerate(zip(operands, ft.inputs)):
            if v.type != t:
                self.error(f"operand #{i} of '{name}' has type {v.type} but the signature says {t}", sig_pos)
        nres = sum(d[1] for d in defs)
        if nres != len(ft.results):
            self.error(f"'{name}' defines {nres} result names but its type has {len(ft.results)} results",
                       start)
        loc = self.location()
        op = Operation(name, operands, ft.results, attrs, regions, loc)
        if self.starts is not None:
            self.starts[op] = name_pos
        k = 0
        for rname, count, pos in defs:
            self.define(rname, op.results[k] if count == 1 else op.results[k:k + count], pos)
            k += count
        return op

    # -- MLIR's pretty (custom) forms of the builtin ops, as mlir-opt prints them --------
    def _pretty_module(self):
        attrs = {}
        if self.peek("@"):
            self.p += 1
            attrs["sym_name"] = A.StringAttr(self._symbol_name())
        if self.accept("attributes"):
            attrs.update(self.attr_dict())
        self.scopes.append({})
        region = self.region()
        self.scopes.pop()
        return Operation("builtin.module", [], [], attrs, [region], self.location())

    def _symbol_name(self):
        if self.s.startswith('"', self.p):
            return self.string()
        m = self.match(_IDENT)
        if not m:
            self.error(f"expected a symbol name after '@', found {self.found()}")
        return m.group(0)

    def _pretty_func(self):
        """`func.func [private] @name(%a: type {attrs}, ...) -> (type {attrs}, ...)
        [attributes {...}] { body }`: the same op the generic form spells out."""
        attrs = {}
        self.ws()
        m = re.compile(r"(private|public|nested)\b").match(self.s, self.p)
        if m:
            self.p = m.end()
            attrs["sym_visibility"] = A.StringAttr(m.group(1))
        self.expect("@", "and the function's name")
        attrs["sym_name"] = A.StringAttr(self._symbol_name())
        self.expect("(", "and the argument list")
        args = self._typed_args("an argument", "the argument list")
        names = [(n, pos) for n, pos, _, _ in args]
        arg_types = [t for _, _, t, _ in args]
        arg_attrs = [a for _, _, _, a in args]
        res_types, res_attrs = [], []
        if self.accept("->"):
            if self.accept("("):
                if not self.accept(")"):
                    while True:
                        res_types.append(self.type())
                        res_attrs.append(self.attr_dict() if self.peek("{") else {})
                        if self.accept(")"):
                            break
                        self.expect(",", "or ')' in the result list")
            else:
                res_types.append(self.type())
                res_attrs.append({})
        if self.accept("attributes"):
            attrs.update(self.attr_dict())
        attrs["function_type"] = A.TypeAttr(FunctionType(arg_types, res_types))
        if any(arg_attrs):
            attrs["arg_attrs"] = A.ArrayAttr([A.DictAttr(d) for d in arg_attrs])
        if any(res_attrs):
            attrs["res_attrs"] = A.ArrayAttr([A.DictAttr(d) for d in res_attrs])
        regions = []
        if self.peek("{"):
            entry = Block()
            scope = {}
            for (n, pos), t in zip(names, arg_types):
                if n in scope:
                    self.error(f"redefinition of SSA value '%{n}'", pos)
                scope[n] = entry.add_arg(t)
            self.scopes.append(scope)
            regions.append(self.region(entry))
            self.scopes.pop()
        return Operation("func.func", [], [], attrs, regions, self.location())

    def _typed_args(self, what, where):
        """`%name: type [{attrs}] [loc(...)], ...)` after an open '(' (block
        and function arguments): [(name, offset, type, attrs)]."""
        out = []
        if self.accept(")"):
            return out
        while True:
            pos = self.p
            m = self.match(_VALUE_DEF)
            if not m:
                self.error(f"expected {what} '%name: type', found {self.found()}")
            self.expect(":", f"and the type of {what}")
            t = self.type()
            attrs = self.attr_dict() if self.peek("{") else {}
            self.location()
            out.append((m.group(1), pos, t, attrs))
            if self.accept(")"):
                return out
            self.expect(",", f"or ')' in {where}")

    def _pretty_return(self):
        """`return %a, %b : type, type` (func.return)."""
        operands = []
        self.ws()
        if self.s.startswith("%", self.p):
            while True:
                operands.append(self.use())
                if not self.accept(","):
                    break
            self.expect(":", "and the returned values' types")
            sig_pos = self.p
            types = [self.type()]
            while self.accept(","):
                types.append(self.type())
            if len(types) != len(operands):
                self.error(f"'return' has {len(operands)} operands but lists {len(types)} types", sig_pos)
            for i, (v, t) in enumerate(zip(operands, types)):
                if v.type != t:
                    self.error(f"operand #{i} of 'return' has type {v.type} but the listed type is {t}", sig_pos)
        return Operation("func.return", operands, [], {}, [], self.location())

    def location(self):
        if not self.peek("loc("):
            return UNKNOWN_LOC
        self.p += 4
        self.ws()
        if self.accept("unknown"):
            self.expect(")")
            return UNKNOWN_LOC
        s = self.string()
        if self.accept(":"):
            m = self.match(re.compile(r"(\d+):(\d+)"))
            if not m:
                self.error("expected line:col in loc(\"file\":line:col)")
            self.expect(")")
            return Location(file=s, line=int(m.group(1)), col=int(m.group(2)))
        self.expect(")")
        return Location(name=s)

    def region(self, entry=None):
        """A region; `entry`, a block whose arguments the caller defined (a
        pretty-form function's), receives the ops before any block label."""
        self.expect("{")
        region = Region()
        self.defined.append([])
        block = entry
        if entry is not None:
            region.add_block(entry)
        while True:
            self.ws()
            if self.accept("}"):
                break
            if self.p >= len(self.s):
                self.error("unterminated region: expected '}'")
            if self.s.startswith("^", self.p):
                self.match(_BLOCK_LABEL)
                block = region.add_block(Block())
                if self.accept("("):
                    for name, pos, t, _ in self._typed_args("a block argument", "block arguments"):
                        self.define(name, block.add_arg(t), pos)
                self.expect(":", "after block label")
                continue
            if block is None:
                block = region.add_block(Block())
            block.append(self.operation())
        scope = self.scopes[-1]
        for n in self.defined.pop():
            scope.pop(n, None)
        return region

    def module(self) -> Module:
        self.ws()
        ops = []
        while self.p < len(self.s):
            ops.append(self.operation())
            self.ws()
        if len(ops) == 1 and ops[0].name == "builtin.module":
            return Module(ops[0], self.resources)
        m = Module(resources=self.resources)
        for op in ops:
            m.body.append(op)
        return m


# MLIR's pretty forms tcc reads (it prints the generic form).
_CUSTOM_FORMS = {"module": "_pretty_module", "builtin.module": "_pretty_module",
                 "func.func": "_pretty_func", "return": "_pretty_return", "func.return": "_pretty_return"}


class _Source:
    """Where a module's ops were written: the text and each op's offset,
    turned into line:col only when an error needs it."""
    __slots__ = ("filename", "text", "starts")

    def __init__(self, filename, text, starts):
        self.filename, self.text, self.starts = filename, text, starts


# module op -> _Source, for modules parsed with positions=True (tcc-opt); weak,
# so the table dies with the module. Off by default (run-time specialization,
# the IR benchmark): recording made a 50,000-op parse 1.0-1.1x slower here.
_SOURCE = weakref.WeakKeyDictionary()


def source_position(module, op):
    """'file:line:col' where `op` was written, when `module` was parsed with
    positions=True; else None (or an op a pass built)."""
    src = _SOURCE.get(module.op)
    pos = None if src is None else src.starts.get(op)
    if pos is None:
        return None
    line = src.text.count("\n", 0, pos) + 1
    col = pos - (src.text.rfind("\n", 0, pos) + 1) + 1
    return f"{src.filename}:{line}:{col}"


def decode_source(data: bytes, filename: str) -> str:
    """UTF-8 bytes -> text; invalid UTF-8 is a ParseError at its file:line:col
    (the column counts bytes)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ParseError(f"invalid UTF-8 ({e.reason}, byte 0x{data[e.start]:02x})", filename, line, col) from None


def _looks_float(text):
    t = text.lower()
    if t.startswith(("0x", "-0x", "+0x")):
        return False
    return "." in t or "e" in t or "inf" in t or "nan" in t


def _float_from_text(text, t):
    tl = text.lower()
    if tl.startswith(("0x", "-0x")):
        bits = int(text, 16)
        if t == f64:
            return struct.unpack("<d", struct.pack("<Q", bits))[0]
        dt = to_numpy_dtype(t)
        return float(np.array([bits], dtype=f"u{dt.itemsize}").view(dt)[0])
    return float(text)


def _flatten(x):
    if isinstance(x, list):
        out = []
        for e in x:
            out.extend(_flatten(e))
        return out
    return [x]


def parse_module(text: str, filename="<input>", context=None, resources_path=None, positions=False) -> Module:
    """Parses IR text. Constants referenced by `dense_resource<...>` are read
    from `resources_path`, or from `filename + '.resources'` when it exists.
    With `positions`, each op's file:line:col is kept (`source_position`) for
    errors found after parsing (the verifier's)."""
    table = ResourceTable()
    path = resources_path or (filename + SUFFIX if filename and not filename.startswith("<") else None)
    if path and not resources_path and not os.path.exists(path):
        path = os.path.realpath(filename) + SUFFIX  # a link to IR text: its constants are beside the target
    if path and os.path.exists(path):
        table.read(path)
    elif resources_path:
        raise ParseError(f"resource file {resources_path} not found", filename, 1, 1)
    p = Parser(text, filename, table, context)
    if positions:
        p.starts = {}
    module = p.module()
    if positions:
        _SOURCE[module.op] = _Source(filename, text, p.starts)
    return module


def parse_type(text: str):
    p = Parser(text, "<type>")
    t = p.type()
    p.ws()
    if p.p != len(text):
        p.error(f"unexpected text after type: {p.found()}")
    return t


def parse_attribute(text: str):
    p = Parser(text, "<attribute>")
    a = p.attribute()
    p.ws()
    if p.p != len(text):
        p.error(f"unexpected text after attribute: {p.found()}")
    return a


