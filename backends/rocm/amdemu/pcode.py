"""AMD's per-instruction pseudocode, translated once into vectorised Python over numpy.

The instruction tables of PyPI's `tinygrad==0.14.0` carry, for every opcode, the pseudocode
text of AMD's ISA documents (`D0.u32 = S0.u32 + S1.u32`, `SCC = D0.u64 != 0ULL`,
`D0.u64[laneId] = S0.f32 < S1.f32`, if/elsif chains, loops with `break`). `compile_pcode`
parses that text with C's operator precedence and emits the source of one Python function
per opcode, in which every value is a `T`: a numpy array (one element per wave, or per wave
and lane) tagged with its pseudocode type (u/i/f and a width). Operators follow the
pseudocode's C rules: integer results are at least 32 bits wide and wrap at their width,
unsigned wins a tie, floats compute in their own width (f32 in float32, so each operation
rounds as the hardware's does). The values and their operators are pcode_types.py, the
pseudocode's functions (isNAN, fma, conversions ...) pcode_functions.py; this module parses the
text and emits the function.

Control flow is predicated, not branched: an `if` on a per-lane condition runs both arms
under a lane mask and each assignment merges under it; a `break` retires the lanes that
took it. Writes of one bit per lane (`VCC.u64[laneId] = ...`, a compare's `D0`) come back
as a `Lanes` value that the executor packs into the 64-bit mask of each wave.

What the translator cannot express (bit concatenations on the left, memory, whole-wave
register reads like `VGPR[lane][...]`, lambdas) raises `Untranslatable`; the executor
implements those few opcodes itself (executor.py), and an opcode that is in neither place
raises an error naming it: never a silent misexecution.

Known approximations, each deliberate: `fma` on f32 rounds the exact product plus the
addend in f64 and then to f32 (double rounding can differ from one rounding by an ulp in
rare ties); on f64 it rounds twice (product, then sum). Transcendentals (exp, log, sqrt,
rcp, sin, cos) are numpy's correctly-rounded-or-close results, where the hardware is
documented to 1 ulp.
"""
from __future__ import annotations

import math
import re

import numpy as np

from . import pcode_functions, pcode_types
from .pcode_functions import FUNCTIONS
from .pcode_types import Untranslatable, parse_type


# ---- parsing -----------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<cast>\d+'[UIFB](?=\())
  | (?P<tdecl>\d+'[UIFB](?![0-9a-fA-Fx.(]))
  | (?P<sized>\d+'-?(?:0x[0-9a-fA-F]+|\d+\.\d+|\d+)[UIF]?)
  | (?P<float>\d+\.\d+(?:[eE][-+]?\d+)?F?)
  | (?P<hex>0x[0-9a-fA-F]+(?:ULL|LL|U|L)?)
  | (?P<int>\d+(?:ULL|LL|U|L)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|<<=|>>=|<<|>>|<=|>=|==|!=|<>|&&|\|\||\+=|-=|\*=|\|=|&=|\^=|[-+*/%&|^~!<>?:=()\[\]{},.;])
""", re.VERBOSE)


def _tokens(text):
    text = re.sub(r"//[^\n]*", "", text)
    out, pos, depth = [], 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Untranslatable(f"cannot tokenize at {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            if "\n" in m.group() and depth == 0:  # inside parentheses a line break continues the expression
                out.append(("nl", "\n"))
            continue
        if kind == "op" and m.group() in "()":
            depth += 1 if m.group() == "(" else -1
        out.append((kind, m.group()))
    out.append(("eof", ""))
    return out


def _int_literal(tok):
    t = tok.rstrip("UL")  # C's integer suffixes U, L, UL, LL, ULL (no hex digit is U or L)
    v = int(t, 16) if t.lower().startswith("0x") else int(t)
    if tok.endswith("ULL"):
        return f"R.lit({v}, 'u', 64)"
    if tok.endswith("LL"):
        return f"R.lit({v}, 'i', 64)"
    if tok.endswith("U"):
        return f"R.lit({v}, 'u', 32)"
    return f"R.lit({v}, 'i', 32)" if v < (1 << 31) else f"R.lit({v}, 'u', {32 if v < (1 << 32) else 64})"


_BINARY = {  # C precedence (higher binds tighter)
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<>": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
    "**": 11,
}
_SPECIAL = {  # named constants
    "INF": "R.lit(float('inf'), 'f', 64)", "NAN": "R.lit(float('nan'), 'f', 64)",
    "PI": f"R.lit({math.pi!r}, 'f', 64)",
    # results on under/overflow in round-to-nearest mode (the mode kernels run in)
    "UNDERFLOW_F32": "R.lit(0.0, 'f', 32)", "OVERFLOW_F32": "R.lit(float('inf'), 'f', 32)",
    "UNDERFLOW_F64": "R.lit(0.0, 'f', 64)", "OVERFLOW_F64": "R.lit(float('inf'), 'f', 64)",
    "MAX_FLOAT_F32": f"R.lit({float(np.finfo(np.float32).max)!r}, 'f', 32)",
}


class _Parser:
    def __init__(self, text, vector, regs):
        self.toks = _tokens(text)
        self.i = 0
        self.vector = vector
        self.regs = regs          # register names the executor provides
        self.used, self.assigned, self.locals = set(), set(), set()
        self.lines = []
        self.depth = 1
        self.loop = 0
        self.tmp = 0

    # -- token helpers -----------------------------------------------------------------
    def peek(self, k=0):
        return self.toks[self.i + k]

    def next(self):
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, value):
        if self.peek()[1] == value:
            self.i += 1
            return True
        return False

    def expect(self, value):
        t = self.next()
        if t[1] != value:
            raise Untranslatable(f"expected {value!r}, got {t[1]!r}")

    def skip_nl(self):
        while self.peek()[0] == "nl" or self.peek()[1] == ";":
            self.i += 1

    def emit(self, line):
        self.lines.append("    " * self.depth + line)

    def fresh(self, base):
        self.tmp += 1
        return f"_{base}{self.tmp}"

    # -- names ---------------------------------------------------------------------------
    def var(self, name):
        if name in self.regs:
            self.used.add(name)
            return name
        if name in _SPECIAL:
            return _SPECIAL[name]
        if name in ("DENORM",):
            return "R.DENORM"
        if name == "WAVE_MODE":
            self.used.add("WAVE_MODE")
            return "WAVE_MODE"
        if name in self.locals:
            return "l_" + name
        if name in FUNCTIONS or name in ("VGPR", "SGPR", "MEM", "HW_REGISTERS", "lambda", "LDS", "VSKIP"):
            raise Untranslatable(f"uses {name}")
        if re.fullmatch(r"[a-z][A-Za-z0-9_]*|[A-Z][a-z][A-Za-z0-9]*", name):  # a local first read
            raise Untranslatable(f"local {name!r} read before assignment")
        raise Untranslatable(f"unknown name {name!r}")

    # -- expressions ---------------------------------------------------------------------
    def expr(self, prec=0):
        left = self.unary()
        while True:
            t = self.peek()
            if t[1] == "?" and prec == 0:
                self.next()
                a = self.expr(0)
                self.expect(":")
                b = self.expr(0)
                left = f"R.select({left}, {a}, {b})"
                continue
            p = _BINARY.get(t[1])
            if t[0] != "op" or p is None or p <= prec:
                return left
            self.next()
            right = self.expr(p if t[1] != "**" else p - 1)  # ** is right-associative
            op = t[1]
            if op == "&&":
                left = f"R.land({left}, {right})"
            elif op == "||":
                left = f"R.lor({left}, {right})"
            elif op == "<>":
                left = f"R.compare({left}, {right}, '!=')"
            elif op in ("==", "!=", "<", "<=", ">", ">="):
                if "R.DENORM" in (left, right):
                    other = right if left == "R.DENORM" else left
                    left = f"R.is_denorm({other})" if op == "==" else f"R.lnot(R.is_denorm({other}))"
                elif {left, right} & {"R.PZERO", "R.NZERO"} and op in ("==", "!="):
                    # `x == +0.0` / `x == -0.0` in AMD's pseudocode tell the zeros apart
                    zero, other = (left, right) if left in ("R.PZERO", "R.NZERO") else (right, left)
                    test = f"R.is_zero({other}, {zero == 'R.NZERO'})"
                    left = test if op == "==" else f"R.lnot({test})"
                else:
                    left = f"R.compare({left}, {right}, {op!r})"
            else:
                left = f"({left} {op} {right})"

    def unary(self):
        t = self.peek()
        if t[1] == "-":
            self.next()
            e = self.unary()
            return "R.NZERO" if e.startswith("R.lit(0.0,") else f"R.neg({e})"
        if t[1] == "+":
            self.next()
            e = self.unary()
            return "R.PZERO" if e.startswith("R.lit(0.0,") else e
        if t[1] == "!":
            self.next()
            return f"R.lnot({self.unary()})"
        if t[1] == "~":
            self.next()
            return f"(~R.wrap({self.unary()}))"
        return self.postfix(self.primary())

    def postfix(self, e):
        while True:
            t = self.peek()
            if t[1] == "." and self.peek(1)[0] == "name":
                self.next()
                name = self.next()[1]
                if name in ("IEEE",) and e == "WAVE_MODE":
                    e = "WAVE_MODE_IEEE"
                    continue
                try:
                    parse_type(name)
                except (KeyError, ValueError, IndexError):
                    raise Untranslatable(f"field .{name}") from None
                if e.startswith("R.lit(float("):  # +INF.f32, NAN.f32
                    e = f"R.convert({e}, {parse_type(name)[0]!r}, {parse_type(name)[1]})"
                elif e == "R.DENORM":
                    pass
                else:
                    e = f"R.wrap({e}).{name}"
            elif t[1] == "[":
                self.next()
                a = self.expr()
                if self.accept(":"):
                    b = self.expr()
                    self.expect("]")
                    e = f"R.wrap({e})[{a}:{b}]"
                else:
                    self.expect("]")
                    e = f"R.wrap({e})[{a}]"
            else:
                return e

    def primary(self):
        kind, tok = self.next()
        if kind == "op" and tok == "(":
            e = self.expr()
            self.expect(")")
            return e
        if kind == "op" and tok == "{":  # { hi, lo }: bit concatenation
            parts = [self.expr()]
            while self.accept(","):
                parts.append(self.expr())
            self.expect("}")
            return f"R.concat({', '.join(parts)})"
        if kind == "cast":
            n, k = tok.split("'")
            self.expect("(")
            e = self.expr()
            self.expect(")")
            k = {"U": "u", "I": "i", "F": "f", "B": "u"}[k]
            return f"R.cast({e}, {k!r}, {int(n)})"
        if kind == "sized":
            n, v = tok.split("'")
            n = int(n)
            k = "u"
            if v.endswith(("U", "I", "F")):
                k = {"U": "u", "I": "i", "F": "f"}[v[-1]]
                v = v[:-1]
            if "." in v:
                return f"R.lit({float(v)!r}, 'f', {n})"
            iv = int(v, 16) if "0x" in v.lower() else int(v)
            return f"R.lit({iv}, {k!r}, {n})"
        if kind == "float":
            return f"R.lit({float(tok.rstrip('F'))!r}, 'f', {32 if tok.endswith('F') else 64})"
        if kind in ("hex", "int"):
            return _int_literal(tok)
        if kind == "name":
            if self.peek()[1] == "(" and tok not in self.regs:
                fn = FUNCTIONS.get(tok)
                if fn is None:
                    raise Untranslatable(f"function {tok}()")
                self.next()
                args = []
                if not self.accept(")"):
                    while True:
                        args.append(self.expr())
                        if self.accept(")"):
                            break
                        self.expect(",")
                return f"R.FUNCTIONS[{tok!r}]({', '.join(args)})"
            if tok == "laneId":
                self.used.add("laneId")
                return "laneId"
            if tok in ("i",) and self.loop:
                return "R.wrap(l_i)"
            return self.var(tok)
        raise Untranslatable(f"unexpected {tok!r}")

    # -- statements ----------------------------------------------------------------------
    def block(self, enders):
        while True:
            self.skip_nl()
            t = self.peek()
            if t[0] == "eof" or t[1] in enders:
                return t[1]
            self.statement()

    def statement(self):
        t = self.peek()
        if t[1] == "if":
            return self.if_stmt()
        if t[1] == "for":
            return self.for_stmt()
        if t[1] == "declare":
            self.next()
            name = self.next()[1]
            self.expect(":")
            kind, tok = self.next()
            if kind != "tdecl":
                raise Untranslatable("declare")
            n, k = tok.split("'")
            if self.peek()[1] == "[":
                raise Untranslatable("declared array")
            self.locals.add(name)
            k = {"B": "u", "U": "u", "I": "i", "F": "f"}.get(k, "u")
            if k == "f":
                self.emit(f"l_{name} = R.lit(0.0, 'f', {int(n)})")
            else:
                self.emit(f"l_{name} = R.lit(0, {k!r}, {int(n)})")
            return
        if t[1] == "break":
            self.next()
            if not self.loop:
                raise Untranslatable("break outside a loop")
            self.emit("_brk = R.mor(_brk, _m if _m is not None else True)")
            self.emit("_m = R.mand(_m, False)")
            return
        if t[0] == "name" and self.peek(1)[1] == "(":  # a call statement: nop()
            self.expr()
            return
        self.assignment()

    def if_stmt(self):
        saved = self.fresh("m")
        rem = self.fresh("r")
        self.emit(f"{saved} = _m")
        self.emit(f"{rem} = _m")
        while True:
            self.next()  # if / elsif
            cond = self.expr()
            self.expect("then")
            c = self.fresh("c")
            self.emit(f"{c} = R.truth({cond})")
            self.emit(f"_m = R.mand({rem}, {c})")
            self.emit(f"{rem} = R.mandnot({rem}, {c})")
            self.emit("if R.any_set(_m):")
            self.depth += 1
            self.emit("pass")
            end = self.block(("elsif", "else", "endif"))
            self.depth -= 1
            if end == "elsif":
                continue
            if end == "else":
                self.next()
                self.emit(f"_m = {rem}")
                self.emit("if R.any_set(_m):")
                self.depth += 1
                self.emit("pass")
                self.block(("endif",))
                self.depth -= 1
            self.expect("endif")
            break
        self.emit(f"_m = {saved}" if not self.loop
                  else f"_m = R.mandnot({saved}, _brk) if _brk is not None else {saved}")

    def for_stmt(self):
        self.next()
        var = self.next()[1]
        if var != "i":
            raise Untranslatable("loop variable other than i")
        self.expect("in")
        lo = self.expr()
        self.expect(":")
        hi = self.expr()
        self.expect("do")
        saved = self.fresh("m")
        self.emit(f"{saved} = _m")
        self.emit("_brk = None")
        self.emit(f"for l_i in range(R.as_int({lo}), R.as_int({hi}) + 1):")
        self.depth += 1
        self.emit(f"_m = R.mandnot({saved}, _brk) if _brk is not None else {saved}")
        self.emit("if not R.any_set(_m): break")
        self.loop += 1
        self.block(("endfor",))
        self.loop -= 1
        self.depth -= 1
        self.expect("endfor")
        self.emit(f"_m = {saved}")

    def assignment(self):
        kind, name = self.next()
        if kind != "name":
            raise Untranslatable(f"assignment to {name!r}")
        if name in ("MEM", "VGPR", "SGPR", "LDS", "HW_REGISTERS"):
            raise Untranslatable(f"writes {name}")
        ty = hi = lo = None
        lane = False
        while True:
            if self.peek()[1] == "." and self.peek(1)[0] == "name":
                self.next()
                ty = self.next()[1]
                continue
            if self.peek()[1] == "[":
                self.next()
                a = self.expr()
                if self.accept(":"):
                    b = self.expr()
                    hi, lo = a, b
                else:
                    if a != "laneId":
                        raise Untranslatable("indexed assignment other than [laneId]")
                    lane = True
                self.expect("]")
                continue
            break
        op = self.next()[1]
        if op not in ("=", "+=", "-=", "*=", "|=", "&=", "^="):
            raise Untranslatable(f"assignment operator {op!r}")
        value = self.expr()
        is_reg = name in self.regs
        if not is_reg and name not in self.locals:
            if op != "=" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise Untranslatable(f"compound assignment to new local {name}")
            self.locals.add(name)
            target, old = "l_" + name, "None"
        else:
            target = name if is_reg else "l_" + name
            old = target
            if is_reg:
                self.used.add(name)
                self.assigned.add(name)
        if op != "=":
            cur = target
            if ty:
                cur = f"R.wrap({cur}).{ty}"
            if hi is not None:
                cur = f"R.wrap({target})[{hi}:{lo}]" + (f".{ty}" if ty else "")
            value = f"({cur} {op[0]} {value})"
        lane_reg = (is_reg and name in ("VCC", "D0", "EXEC") and self.vector
                    and (lane or (name == "VCC" and ty is None and hi is None)))
        if lane or lane_reg:
            if not (lane_reg or lane):
                raise Untranslatable("lane write to a non-mask")
            self.emit(f"{target} = R.set_lane({old}, {value}, _m)")
            return
        self.emit(f"{target} = R.store({old}, {ty!r}, {value}, _m, {hi if hi is not None else 'None'}, "
                  f"{lo if lo is not None else 'None'})")


_LAMBDA = re.compile(r"^(\w+) = lambda\(([\w, ]*)\) \((.*?)\);[ \t]*$", re.M | re.S)


def _expand_lambdas(text: str) -> str:
    """RDNA3's `NAME = lambda(a, b) (expr);` definitions inlined at each `NAME(x, y)` call
    (a macro: the parameters replaced by the argument texts, parenthesised)."""
    while True:
        m = _LAMBDA.search(text)
        if m is None:
            return text
        fname, params, body = m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()], m.group(3)
        text = text[:m.start()] + text[m.end():]
        out, pos = [], 0
        for call in re.finditer(rf"\b{fname}\(", text):
            if call.start() < pos:
                continue
            depth, i, args, start = 1, call.end(), [], call.end()
            while depth:
                ch = text[i]
                depth += (ch == "(") - (ch == ")")
                if (ch == "," and depth == 1) or depth == 0:
                    args.append(text[start:i].strip())
                    start = i + 1
                i += 1
            if len(args) != len(params):
                raise Untranslatable(f"{fname} called with {len(args)} arguments, defined with {len(params)}")
            expr = body
            for p_, a in zip(params, args):
                expr = re.sub(rf"\b{p_}\b", lambda _m, a=a: f"({a})", expr)
            out.append(text[pos:call.start()] + "(" + " ".join(expr.split()) + ")")
            pos = i
        text = "".join(out) + text[pos:]


def translate(name: str, text: str, vector: bool, regs) -> str:
    """Python source of `def op(E)` for one opcode's pseudocode. E maps register names to
    values; the function updates E in place with what the pseudocode assigns. `vector`:
    a VALU opcode (VCC and compare results are per-lane bits)."""
    # `A = B = value` (V_CMPX: EXEC and D0 take one result) as two assignments of one value
    text = re.sub(r"^(\S+) = (\S+) = (.*?)(;?)$", r"_chain = \3;\n\1 = _chain;\n\2 = _chain\4", text, flags=re.M)
    text = _expand_lambdas(text)
    p = _Parser(text, vector, set(regs))
    p.emit("_m = None")
    p.emit("_brk = None")
    p.block(())
    body = p.lines
    head = [f"def op(E):  # {name}"]
    for r in sorted(p.used):
        if r == "WAVE_MODE":
            head.append("    WAVE_MODE_IEEE = E['WAVE_MODE_IEEE']")
        else:
            head.append(f"    {r} = E.get({r!r})")
    tail = [f"    E[{r!r}] = {r}" for r in sorted(p.assigned)]
    return "\n".join(head + body + tail + ["    return E"]), frozenset(p.assigned), frozenset(p.used)


# Where AMD's pseudocode leaves a result implicit, the statement that makes it explicit
# (V_DIV_SCALE passes its operand through unless a case scales it).
PRELUDE = {"V_DIV_SCALE_F32": "D0.f32 = S0.f32;\n", "V_DIV_SCALE_F64": "D0.f64 = S0.f64;\n"}
_CACHE = {}
REGS = ("S0", "S1", "S2", "S3", "D0", "D1", "SCC", "VCC", "EXEC", "PC", "SIMM16", "SIMM32", "M0", "laneId",
        "OPSEL", "OPSEL_HI", "SRC0", "VDST", "EXECZ", "VCCZ")


def compile_pcode(name: str, text: str, vector: bool):
    """The function for one opcode (cached by name and text); Untranslatable if the
    pseudocode uses what the translator does not implement."""
    key = (name, text, vector)
    fn = _CACHE.get(key)
    if fn is None:
        try:
            src, assigned, used = translate(name, PRELUDE.get(name, "") + text, vector, REGS)
            ns = {"R": _RUNTIME}
            exec(compile(src, f"<pcode {name}>", "exec"), ns)
            fn = ns["op"]
            fn.source, fn.assigned, fn.used = src, assigned, used
        except Untranslatable as e:
            fn = e
        _CACHE[key] = fn
    if isinstance(fn, Untranslatable):
        raise Untranslatable(f"{name}: {fn}")
    return fn


class _Runtime:
    """The namespace generated code calls (R.*)."""


_RUNTIME = _Runtime()
for _module, _names in ((pcode_types, ("lit", "wrap", "cast", "convert", "select", "land", "lor", "lnot", "compare",
                                       "truth", "store", "set_lane", "merge", "concat", "mand", "mandnot", "mor",
                                       "any_set", "as_int", "neg")),
                        (pcode_functions, ("is_denorm", "is_zero", "PZERO", "NZERO", "FUNCTIONS", "DENORM"))):
    for _n in _names:
        setattr(_RUNTIME, _n, getattr(_module, _n))
