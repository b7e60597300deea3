#!/usr/bin/env python3
"""Import KernelBench problems as specgen tasks with stored references.

    import_kernelbench.py PROBLEM.py... --out DIR [--device cpu|cuda] [--seeds N]
        [--max-store-mb MB] [--no-timing] [--json-summary FILE]

For each problem: DIR/<task>.json (a specgen task file) and DIR/<task>.specref (the stored
reference), or a one-line reason why the problem cannot be imported. Exit status 1 if any
problem failed, 0 otherwise. See docs/kernelbench.md.
"""

import argparse
import ast
import copy
import hashlib
import inspect
import itertools
import json
import math
import os
import re
import statistics
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import specref  # noqa: E402

import torch  # noqa: E402

TOOL = "import_kernelbench.py"

DTYPE_NAMES = {
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
    torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64",
}
TORCH_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}
FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")
ELEMENT_BYTES = {name: size for name, (_, size) in specref.DTYPES.items()}
# specgen's default tolerances (include/specgen: default_tolerance).
DEFAULT_TOLERANCE = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-5, "f64": 1e-10}
DEFAULT_TERMS = 16
RESERVED = ("cdiv", "min", "max")


class ImportFailure(Exception):
    """A problem that cannot be imported; the message is the one-line reason."""


class ProbeError(Exception):
    """The module failed to run at some shape (the message lists the ways tried)."""


# --------------------------------------------------------------------------------------------
# Size expressions (docs/plan-language.md, "Size expressions"): a small evaluator, so that every
# expression written is checked in the very language the task loader reads.

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def _tokens(text):
    out = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            break
        pos = m.end()
        if m.group(1) is not None:
            out.append(("int", int(m.group(1))))
        elif m.group(2) is not None:
            out.append(("name", m.group(2)))
        elif m.group(3).strip():
            out.append(("op", m.group(3)))
    return out


def _tdiv(a, b):
    if b == 0:
        raise ValueError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def eval_size_expr(text, binding):
    """Evaluates a size expression (int or string) with symbol values from binding."""
    if isinstance(text, int):
        return text
    toks = _tokens(text)
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else (None, None)

    def take():
        t = peek()
        pos[0] += 1
        return t

    def expr():
        v = term()
        while peek() in (("op", "+"), ("op", "-")):
            op = take()[1]
            r = term()
            v = v + r if op == "+" else v - r
        return v

    def term():
        v = unary()
        while peek() in (("op", "*"), ("op", "/")):
            op = take()[1]
            r = unary()
            v = v * r if op == "*" else _tdiv(v, r)
        return v

    def unary():
        if peek() == ("op", "-"):
            take()
            return -unary()
        return primary()

    def primary():
        kind, val = take()
        if kind == "int":
            return val
        if kind == "name":
            if val in RESERVED:
                if take() != ("op", "("):
                    raise ValueError("expected ( after " + val)
                a = expr()
                if take() != ("op", ","):
                    raise ValueError("expected ,")
                b = expr()
                if take() != ("op", ")"):
                    raise ValueError("expected )")
                if val == "cdiv":
                    if b == 0:
                        raise ValueError("division by zero")
                    return -((-a) // b) if b > 0 else -(a // -b)
                return min(a, b) if val == "min" else max(a, b)
            if val not in binding:
                raise ValueError("unknown name " + val)
            return binding[val]
        if (kind, val) == ("op", "("):
            v = expr()
            if take() != ("op", ")"):
                raise ValueError("expected )")
            return v
        raise ValueError("unexpected %r in %r" % (val, text))

    v = expr()
    if pos[0] != len(toks):
        raise ValueError("trailing text in %r" % text)
    return v


# --------------------------------------------------------------------------------------------
# Loading a problem and running it at other sizes.

class Problem:
    def __init__(self, path, sets=None):
        self.path = path
        self.sets = dict(sets or {})  # --set NAME=VALUE: size constants replaced from the start
        stem = os.path.splitext(os.path.basename(path))[0]
        parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
        m = re.fullmatch(r"level(\d+)", parent)
        name = ("L%s_%s" % (m.group(1), stem)) if m else stem
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise ImportFailure("cannot read the problem file: %s" % e.strerror)
        self.sha256 = hashlib.sha256(raw).hexdigest()
        try:
            self.source = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ImportFailure("the problem file is not UTF-8: %s" % e)
        try:
            tree = ast.parse(self.source, filename=path)
        except SyntaxError as e:
            raise ImportFailure("syntax error in the problem file, line %s: %s" % (e.lineno, e.msg))
        self.statements = [compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec") for stmt in tree.body]
        self._namespaces = {}
        own = self.namespace({}, with_sets=False)
        self.file_constants = {k: v for k, v in own.items() if not k.startswith("_") and type(v) is int}
        for k in self.sets:
            if k not in self.file_constants:
                raise ImportFailure("--set %s: the problem has no int constant '%s' (its int constants: %s)"
                                    % (k, k, ", ".join(sorted(self.file_constants)) or "none"))
        ns = self.namespace({})
        for needed in ("Model", "get_inputs", "get_init_inputs"):
            if not callable(ns.get(needed)):
                raise ImportFailure("the problem file defines no %s (a KernelBench problem defines class Model, "
                                    "get_inputs() and get_init_inputs())" % ("class Model" if needed == "Model" else needed + "()"))
        self.constants = {k: v for k, v in ns.items()
                          if not k.startswith("_") and type(v) is int}

    def namespace(self, overrides, with_sets=True):
        """The problem module executed with some size constants replaced (over the --set ones).
        Each top-level statement runs in turn and a replaced constant is set again after every
        statement, so constants derived from it (`bias_shape = (out_channels, 1, 1)`) follow it."""
        if with_sets:
            overrides = {**self.sets, **overrides}
        key = (with_sets,) + tuple(sorted(overrides.items()))
        if key in self._namespaces:
            return self._namespaces[key]
        ns = {"__name__": "kernelbench_problem_" + re.sub(r"\W", "_", self.name), "__file__": self.path,
              "__builtins__": __builtins__}
        for code in self.statements:
            try:
                exec(code, ns)
            except Exception as e:
                raise ImportFailure("the problem file raised %s" % one_line(e))
            for k, v in overrides.items():
                if k in ns:
                    ns[k] = v
        if len(self._namespaces) > 64:
            self._namespaces.clear()
        self._namespaces[key] = ns
        return ns

    def instantiate(self, shape, seed):
        """(module, forward arguments) at a shape, built on the CPU with the seed set before the
        module and before the inputs."""
        ns = self.namespace(shape)
        torch.manual_seed(seed)
        init = ns["get_init_inputs"]()
        model = ns["Model"](*list(init))
        torch.manual_seed(seed)
        args = ns["get_inputs"]()
        if isinstance(args, torch.Tensor):
            args = [args]
        return model, list(args)


def one_line(e):
    text = str(e).strip().splitlines()
    if isinstance(e, ProbeError):
        return text[0] if text else ""
    return "%s: %s" % (type(e).__name__, text[0] if text else "")


def forward_names(model, count):
    try:
        params = [p for p in inspect.signature(type(model).forward).parameters.values()][1:]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) >= count and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names[:count]):
        return names[:count]
    return ["in%d" % i for i in range(count)]


def as_outputs(result):
    if isinstance(result, torch.Tensor):
        return [("out", result)]
    if isinstance(result, (tuple, list)):
        outs = []
        for i, r in enumerate(result):
            if not isinstance(r, torch.Tensor):
                raise ImportFailure("output %d of forward is a %s, not a tensor" % (i, type(r).__name__))
            outs.append(("out%d" % i, r))
        if not outs:
            raise ImportFailure("forward returns an empty %s" % type(result).__name__)
        return outs
    raise ImportFailure("forward returns a %s, not a tensor or a tuple of tensors" % type(result).__name__)


def module_tensors(model):
    out = []
    for n, p in model.named_parameters():
        out.append((n.replace(".", "_"), p))
    for n, b in model.named_buffers():
        out.append((n.replace(".", "_"), b))
    return out


def dtype_name(t, what):
    name = DTYPE_NAMES.get(t.dtype)
    if name is None:
        raise ImportFailure("unsupported dtype %s for %s" % (t.dtype, what))
    return name


class Probe:
    """Shapes and dtypes at one shape: forward arguments, module tensors and outputs."""

    def __init__(self, args, arg_names, tensors, outputs):
        self.args = args            # [(name, tensor or python value)]
        self.arg_names = arg_names
        self.tensors = tensors      # [(name, dtype str, shape tuple)] parameters and buffers
        self.outputs = outputs      # [(name, dtype str, shape tuple)]

    def shape_signature(self):
        sig = []
        for n, a in self.args:
            sig.append((n, tuple(a.shape) if isinstance(a, torch.Tensor) else ("value", a)))
        sig += [(n, s) for n, _, s in self.tensors]
        sig += [(n, s) for n, _, s in self.outputs]
        return sig


def run_forward(model, args, device):
    with torch.no_grad():
        return model(*args)


def meta_probe(problem, shape):
    """The probe without memory: the module and its inputs built on the meta device (PyTorch
    2.x's default-device context), so that a problem whose inputs take gigabytes at its
    benchmark shape is sized, and refused by --max-store-mb, before any buffer exists. None
    where PyTorch has no such context or the problem does not build or run there."""
    if not hasattr(torch.device("meta"), "__enter__"):
        return None
    try:
        with torch.device("meta"):
            model, args = problem.instantiate(shape, 1)
            names = forward_names(model, len(args))
            tensors = [(n, t.dtype, tuple(t.shape)) for n, t in module_tensors(model)]
            outs = as_outputs(run_forward(model, args, "meta"))
        if not all(x.device.type == "meta" for x in args if isinstance(x, torch.Tensor)):
            return None  # built on another device explicitly: probe it the ordinary way
        outputs = [(n, o.dtype, tuple(o.shape)) for n, o in outs]
    except ImportFailure:
        raise
    except Exception:
        return None
    return Probe(list(zip(names, args)), names, tensors, outputs)


def probe(problem, shape, device):
    """Runs the module once at a shape to learn its shapes and native dtypes: on the meta device
    (no arithmetic) where the module's operations support it, else natively on the device, else
    in float64 on the CPU with outputs taken to have the inputs' float dtype."""
    found = meta_probe(problem, shape)
    if found is not None:
        return found
    model, args = problem.instantiate(shape, 1)
    names = forward_names(model, len(args))
    tensors = [(n, t.dtype, tuple(t.shape)) for n, t in module_tensors(model)]
    result = None
    errors = []
    for how in ("meta", "native", "float64"):
        try:
            if how == "meta":
                m = copy.deepcopy(model).to("meta")
                a = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in args]
            elif how == "native":
                m = copy.deepcopy(model).to(device)
                a = [x.to(device) if isinstance(x, torch.Tensor) else x for x in args]
            else:
                m = copy.deepcopy(model).double()
                a = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in args]
            result = run_forward(m, a, device)
            outs = as_outputs(result)
            if how == "float64":
                floats = {t.dtype for t in list(args) + [p for _, p in module_tensors(model)]
                          if isinstance(t, torch.Tensor) and t.is_floating_point()}
                native = floats.pop() if len(floats) == 1 else torch.float32
                outs = [(n, o.to(native) if o.is_floating_point() else o) for n, o in outs]
            outputs = [(n, o.dtype, tuple(o.shape)) for n, o in outs]
            break
        except ImportFailure:
            raise
        except Exception as e:
            errors.append(one_line(e))
    else:
        raise ProbeError("; ".join(dict.fromkeys(errors)))
    return Probe(list(zip(names, args)), names, tensors, outputs)


# --------------------------------------------------------------------------------------------
# Shape inference.

def alternatives(v):
    out = []
    for c in (v + 1, v + 3, max(1, v // 2), 2 * v + 1):
        if c != v and c >= 1 and c not in out:
            out.append(c)
    return out[:3]


def fit_single(points, sym):
    """Expression of one symbol fitting [(binding, value)]: literal, S, a*S + b, (S + b) / c + d."""
    xs = [(b[sym], v) for b, v in points]
    for cand in single_candidates(sym, xs):
        text, f = cand
        if all(f(x) == v for x, v in xs):
            return text
    return None


def lin_text(coefs, const):
    parts = []
    for s, a in coefs:
        if a == 0:
            continue
        mag = abs(a)
        body = s if mag == 1 else "%d * %s" % (mag, s)
        if not parts:
            parts.append(("-" if a < 0 else "") + body)
        else:
            parts.append(("- " if a < 0 else "+ ") + body)
    if not parts:
        return str(const)
    if const:
        parts.append(("- " if const < 0 else "+ ") + str(abs(const)))
    return " ".join(parts)


def single_candidates(sym, xs):
    x0, v0 = xs[0]
    yield str(v0), (lambda x, v0=v0: v0)
    yield sym, (lambda x: x)
    for a in (1, -1, 2, -2, 3, -3, 4, -4, 5, 6, 7, 8):
        b = v0 - a * x0
        yield lin_text([(sym, a)], b), (lambda x, a=a, b=b: a * x + b)
    for c in range(2, 9):
        # The simplest first: the smallest |b| + |d|.
        forms = [(b, v0 - _tdiv(x0 + b, c)) for b in range(-4 * c, 4 * c + 1) if x0 + b >= 0]
        forms.sort(key=lambda bd: (abs(bd[0]) + abs(bd[1]), -bd[0]))
        for b, d in forms:
            num = lin_text([(sym, 1)], b)
            text = ("(%s) / %d" % (num, c)) if b else "%s / %d" % (sym, c)
            if d:
                text += (" + %d" % d) if d > 0 else (" - %d" % -d)
            yield text, (lambda x, b=b, c=c, d=d: _tdiv(x + b, c) + d)


def fit_dimension(points, variable, singles):
    """An expression over the variable symbols giving value in every (binding, value) point."""
    def check(text):
        try:
            return all(eval_size_expr(text, b) == v for b, v in points)
        except (ValueError, OverflowError):
            return False

    b0, v0 = points[0]
    if check(str(v0)):
        return str(v0)
    for s in variable:
        if check(s):
            return s
    # One symbol: a*S + b, (S + b) / c + d.
    for s in variable:
        text = fit_single(points, s)
        if text is not None and check(text):
            return text
    # Linear over several symbols, coefficients from the one-symbol variants.
    coefs = []
    ok = True
    for s in variable:
        a = None
        for b, v in singles.get(s, []):
            dx = b[s] - b0[s]
            if dx and (v - v0) % dx == 0:
                a = (v - v0) // dx
                break
            if dx:
                ok = False
        if a is None:
            a = 0
        coefs.append((s, a))
    if ok:
        const = v0 - sum(a * b0[s] for s, a in coefs)
        text = lin_text(coefs, const)
        if check(text):
            return text
    # Products of two or three symbols, times or divided by an integer.
    for k in (2, 3):
        for combo in itertools.combinations(variable, k):
            prod = 1
            for s in combo:
                prod *= b0[s]
            base = " * ".join(combo)
            cands = []
            if prod and v0 % prod == 0:
                c = v0 // prod
                cands.append(base if c == 1 else "%d * %s" % (c, base))
            if v0 and prod % v0 == 0:
                cands.append("%s / %d" % (base, prod // v0))
            for text in cands:
                if check(text):
                    return text
    return None


def infer(problem, device, log):
    """Symbols (variable and fixed) and the shape expressions of every buffer."""
    consts = problem.constants
    base_shape = dict(consts)
    base = probe(problem, {}, device)
    base_sig = base.shape_signature()
    variable, fixed = [], []
    singles = {}   # symbol -> [(binding, probe)]
    for s, v in consts.items():
        results = []
        raised = None
        for alt in alternatives(v):
            try:
                p = probe(problem, {s: alt}, device)
            except ImportFailure:
                raise
            except Exception as e:
                raised = "%s=%d: %s" % (s, alt, one_line(e))
                break
            if len(p.shape_signature()) != len(base_sig) or [n for n, _ in p.shape_signature()] != [n for n, _ in base_sig]:
                raised = "%s=%d changes the buffers" % (s, alt)
                break
            results.append((dict(base_shape, **{s: alt}), p))
        if raised:
            fixed.append(s)
            log.append("symbol %s is fixed (%s)" % (s, raised))
            continue
        changed = any(p.shape_signature() != base_sig for _, p in results)
        if not changed:
            continue  # no shape depends on it: not a symbol
        # Consistent: every dimension a function of this symbol alone, of a known form.
        consistent = True
        for idx, (name, dims) in enumerate(base_sig):
            if isinstance(dims, tuple) and dims[:1] == ("value",):
                continue
            for j in range(len(dims)):
                pts = [(base_shape, dims[j])] + [(b, p.shape_signature()[idx][1][j]) for b, p in results]
                if any(len(p.shape_signature()[idx][1]) != len(dims) for _, p in results):
                    consistent = False
                    break
                if fit_single(pts, s) is None:
                    consistent = False
                    break
            if not consistent:
                break
        if not consistent:
            fixed.append(s)
            log.append("symbol %s is fixed (its variants give shapes no expression of it explains)" % s)
            continue
        variable.append(s)
        singles[s] = results
    symbols = [s for s in consts if s in variable or s in fixed]

    # Joint variants: the validation candidates and two more mixes.
    def scaled(f, small_too=True):
        out = dict(base_shape)
        for s in variable:
            if small_too or consts[s] > 8:
                out[s] = max(1, f(consts[s]))
        return out

    candidates = [
        ("quarter", lambda v: (v + 2) // 4),
        ("seventh", lambda v: v // 7 + 1),
        ("half", lambda v: v // 2 + 1),
        ("third", lambda v: v // 3 + 2),
    ]
    joint = []
    for i, (label, f) in enumerate(candidates):
        # Alternate whether the small constants (<= 8: kernel sizes, channels) shrink too.
        for small_too in ((True, False) if i % 2 == 0 else (False, True)):
            shp = scaled(f, small_too)
            if shp == base_shape:
                continue
            try:
                p = probe(problem, {k: shp[k] for k in variable}, device)
            except ImportFailure:
                raise
            except Exception as e:
                log.append("variant %s skipped: %s" % (label, one_line(e)))
                continue
            if [n for n, _ in p.shape_signature()] != [n for n, _ in base_sig]:
                continue
            joint.append((label, shp, p))
            break

    all_points = [(base_shape, base)] + [(b, p) for s in variable for b, p in singles[s]] + [(b, p) for _, b, p in joint]
    exprs = {}
    for idx, (name, dims) in enumerate(base_sig):
        if isinstance(dims, tuple) and dims[:1] == ("value",):
            continue
        out = []
        for j in range(len(dims)):
            pts = []
            for b, p in all_points:
                d = p.shape_signature()[idx][1]
                if len(d) != len(dims):
                    raise ImportFailure("%s has rank %d at %s but %d at the benchmark shape"
                                        % (name, len(d), fmt_shape(b, symbols), len(dims)))
                pts.append(({k: b[k] for k in symbols}, d[j]))
            sg = {s: [({k: b[k] for k in symbols}, p.shape_signature()[idx][1][j]) for b, p in singles[s]] for s in variable}
            text = fit_dimension(pts, variable, sg)
            if text is None:
                raise ImportFailure("no size expression fits dimension %d of '%s' (values %s at %s)"
                                    % (j, name, [v for _, v in pts],
                                       "; ".join(fmt_shape(b, variable) for b, _ in pts)))
            out.append(text)
        exprs[name] = out
    # Validation shapes: two joint variants (the smaller first) with every dimension >= 1 on
    # which the module really runs (a meta-device probe does not check everything an operator
    # does, e.g. an input smaller than a convolution's window).
    validation = []
    for label, shp, p in joint:
        if len(validation) == 2:
            break
        binding = {k: shp[k] for k in symbols}
        if not all(eval_size_expr(e, binding) >= 1 for es in exprs.values() for e in es):
            continue
        why = fails_for_real(problem, {k: shp[k] for k in variable}, device)
        if why:
            log.append("variant %s not used for validation: %s" % (label, why))
            continue
        validation.append(binding)
    return symbols, variable, fixed, exprs, base, validation


def fails_for_real(problem, overrides, device):
    """Why the module runs at these sizes neither natively nor in float64 (as the reference
    does where the native dtypes cannot run, e.g. half precision on the CPU), or None."""
    try:
        model, args = problem.instantiate(overrides, 1)
    except ImportFailure:
        raise
    except Exception as e:
        return one_line(e)
    errors = []
    for how in ("native", "float64"):
        try:
            m = copy.deepcopy(model).to(device)
            a = [x.to(device) if isinstance(x, torch.Tensor) else x for x in args]
            if how == "float64":
                m = m.double()
                a = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in a]
            run_forward(m, a, device)
            return None
        except ImportFailure:
            raise
        except Exception as e:
            errors.append(one_line(e))
    return "; ".join(dict.fromkeys(errors))


def fmt_shape(b, names):
    return ",".join("%s=%d" % (k, b[k]) for k in names) or "(no symbols)"


# --------------------------------------------------------------------------------------------
# Reference computation.

def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        return b""
    flat = t.reshape(-1)
    if flat.element_size() > 1:
        flat = flat.view(torch.uint8)
    try:
        return flat.numpy().tobytes()
    except Exception:  # no numpy
        return bytes(flat.tolist())


def same(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))
                    and torch.equal(torch.isnan(a), torch.isnan(b)))
    return bool(torch.equal(a, b))


class Case:
    def __init__(self, shape, seed, dist, what):
        self.shape, self.seed, self.dist, self.what = shape, seed, dist, what


def draw(dist, like, seed):
    g = torch.Generator().manual_seed(seed)
    shape = tuple(like.shape)
    if dist == "uniform":
        x = torch.rand(shape, generator=g, dtype=torch.float64)
    elif dist == "signed_uniform":
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    elif dist == "large":
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 1000
    else:
        raise ValueError(dist)
    return x.to(like.dtype)


DIST_WHAT = {"uniform": "float inputs uniform(0, 1)", "signed_uniform": "float inputs uniform(-1, 1)",
             "large": "float inputs normal * 1000 (large)"}


class Importer:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        self.timing = args.device == "cuda" and not args.no_timing

    def import_one(self, path):
        t0 = time.time()
        notes = []
        summary = {"problem": path, "name": None, "ok": False}
        try:
            problem = Problem(path, self.args.set)
            summary["name"] = problem.name
            self.run(problem, summary, notes)
            summary["ok"] = True
        except ImportFailure as e:
            summary["reason"] = str(e)
        except Exception as e:  # the problem's own code failed somewhere unexpected
            summary["reason"] = "the problem raised %s" % one_line(e)
        summary["seconds"] = round(time.time() - t0, 3)
        summary["notes"] = notes
        return summary

    # The whole import of one problem.
    def run(self, problem, summary, notes):
        args = self.args
        symbols, variable, fixed, exprs, base, validation = infer(problem, self.device, notes)
        consts = problem.constants
        bench = {s: consts[s] for s in symbols}

        # Forward arguments: tensors are inputs; ints tracking a symbol are that symbol; other
        # numbers are scalars.
        inputs, scalars, bound_args = [], [], {}
        for name, a in base.args:
            if isinstance(a, torch.Tensor):
                inputs.append({"name": name, "dtype": dtype_name(a, "input '%s'" % name), "shape": exprs[name]})
            elif isinstance(a, bool) or not isinstance(a, (int, float)):
                raise ImportFailure("forward argument '%s' is a %s; only tensors, ints and floats can be task inputs"
                                    % (name, type(a).__name__))
            elif isinstance(a, int) and any(consts[s] == a for s in symbols):
                s = next(s for s in symbols if consts[s] == a)
                bound_args[name] = s
            elif isinstance(a, int):
                scalars.append({"name": name, "type": "i64", "value": a})
            else:
                scalars.append({"name": name, "type": "f64", "value": a})
        for name, dt, _ in base.tensors:
            if name in [i["name"] for i in inputs]:
                raise ImportFailure("module tensor '%s' has the name of a forward argument" % name)
            dn = DTYPE_NAMES.get(dt)
            if dn is None:
                raise ImportFailure("unsupported dtype %s for input '%s'" % (dt, name))
            inputs.append({"name": name, "dtype": dn, "shape": exprs[name]})
        outputs = []
        for name, dt, _ in base.outputs:
            dn = DTYPE_NAMES.get(dt)
            if dn is None:
                raise ImportFailure("unsupported dtype %s for output '%s'" % (dt, name))
            out = {"name": name, "dtype": dn, "shape": exprs[name]}
            if dn in FLOAT_DTYPES:
                tol = DEFAULT_TOLERANCE[dn]
                out["tolerance"] = {"abs": tol, "rel": tol, "terms": DEFAULT_TERMS}
            else:
                out["tolerance"] = {"abs": 0, "rel": 0, "terms": 0}
            outputs.append(out)
        names = [b["name"] for b in inputs + outputs] + [s["name"] for s in scalars]
        for n in names:
            if n in symbols or n in RESERVED:
                raise ImportFailure("buffer or scalar '%s' has the name of a size symbol (or a reserved name)" % n)
        if len(set(names)) != len(names):
            raise ImportFailure("two inputs/outputs share a name: %s" % names)

        # Cases.
        cases = [Case(bench, 1, None, "seed 1, get_inputs()'s own inputs (benchmark shape, timing inputs)"),
                 Case(bench, 2, None, "seed 2, get_inputs()'s own inputs (benchmark shape, re-check after timing)")]
        for shp in validation:
            for seed in range(1, args.seeds + 1):
                cases.append(Case(shp, seed, None, "seed %d, get_inputs()'s own inputs" % seed))
            for dist in ("uniform", "signed_uniform", "large"):
                cases.append(Case(shp, 1, dist, "seed 1, " + DIST_WHAT[dist]))
        validation_shapes = list(validation) + [bench]

        # Size limit, before computing anything.
        def buf_bytes(b, shp):
            n = 1
            for e in b["shape"]:
                n *= eval_size_expr(e, shp)
            return n * ELEMENT_BYTES[b["dtype"]]
        estimate = 4096
        for c in cases:
            for b in inputs + outputs:
                estimate += buf_bytes(b, c.shape) + 64
            for b in outputs:
                if b["dtype"] in FLOAT_DTYPES:
                    estimate += buf_bytes(b, c.shape) + 64
        limit = args.max_store_mb * 1024 * 1024
        if estimate > limit:
            raise ImportFailure("the stored reference would take %.1f MB (%d bytes), over --max-store-mb %g"
                                % (estimate / 1048576.0, estimate, args.max_store_mb))

        precision = {"value": "float64"}
        out_dir = args.out
        spec_path = os.path.join(out_dir, problem.name + ".specref")
        blobs = tempfile.TemporaryFile(dir=out_dir)
        header_cases = []
        stored = 0
        eager = EagerCheck(self, outputs, notes)
        timing_result = None
        try:
            for ci, c in enumerate(cases):
                model, fargs = problem.instantiate(c.shape, c.seed)
                if c.dist:
                    g_seed = c.seed
                    fargs = [draw(c.dist, a, g_seed + 1000 * i) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                             for i, a in enumerate(fargs)]
                self.check_args(problem, base, c, fargs, bound_args, scalars)
                tensors = dict(module_tensors(model))
                # Inputs of the case.
                in_tensors = []
                for i, (name, a) in enumerate(zip(base.arg_names, fargs)):
                    if isinstance(a, torch.Tensor):
                        in_tensors.append((name, a))
                in_tensors += [(n, tensors[n]) for n, _, _ in base.tensors]
                for (name, t), spec in zip(in_tensors, inputs):
                    self.check_shape(spec, t, c.shape, "input")
                ref = self.reference(model, fargs, outputs, precision, notes)
                if ci == 0:
                    again = self.reference(model, fargs, outputs, precision, notes)
                    if not all(same(a, b) for a, b in zip(ref, again)):
                        raise ImportFailure("forward is not deterministic (two runs at seed 1 differ)")
                for spec, r in zip(outputs, ref):
                    self.check_shape(spec, r, c.shape, "output")
                finite = all(bool(torch.isfinite(r).all()) for r in ref if r.is_floating_point())
                if not finite:
                    if c.dist is None:
                        raise ImportFailure("the reference has non-finite outputs at %s, seed %d"
                                            % (fmt_shape(c.shape, symbols), c.seed))
                    notes.append("case dropped (non-finite outputs): %s, %s" % (fmt_shape(c.shape, symbols), c.what))
                    continue
                terms = None
                if any(o["dtype"] in FLOAT_DTYPES and o["tolerance"]["terms"] > 0 for o in outputs):
                    terms = self.terms(model, fargs, outputs, precision)
                if ci == 0 and self.timing:
                    timing_result = Timing(self, model, fargs, notes).run()
                if not eager.check(model, fargs, ref, terms, c, is_validation=ci >= 2):
                    continue  # eager itself fails this extra distribution: the case says nothing (noted)
                entry = {"shape": dict(c.shape), "seed": c.seed, "what": c.what, "inputs": {}, "outputs": {}}
                for name, t in in_tensors:
                    entry["inputs"][name], n = write_blob(blobs, t.detach())
                    stored += n
                for spec, r in zip(outputs, ref):
                    entry["outputs"][spec["name"]], n = write_blob(blobs, r)
                    stored += n
                if terms is not None:
                    entry["terms"] = {}
                    for spec, t in zip(outputs, terms):
                        if t is not None:
                            entry["terms"][spec["name"]], n = write_blob(blobs, t)
                            stored += n
                if stored > limit:
                    raise ImportFailure("the stored reference would take over %.1f MB (%d bytes so far), over --max-store-mb %g"
                                        % (stored / 1048576.0, stored, args.max_store_mb))
                header_cases.append(entry)
            eager.finish(outputs)
            producer = {"tool": TOOL, "torch": torch.__version__, "device": str(self.device),
                        "reference_precision": precision["value"], "problem_sha256": problem.sha256}
            if self.device.type == "cuda":
                producer["device_name"] = torch.cuda.get_device_name(self.device)
            if eager.widened:
                producer["tolerance_widened"] = eager.widened
            header = {"format": "specgen-stored-reference", "version": 1, "task": problem.name,
                      "producer": producer, "cases": header_cases}
            total = write_store(spec_path, header, blobs)
        finally:
            blobs.close()
        if total > limit:
            os.unlink(spec_path)
            raise ImportFailure("the stored reference takes %.1f MB (%d bytes), over --max-store-mb %g"
                                % (total / 1048576.0, total, args.max_store_mb))

        task = {
            "name": problem.name,
            "description": describe(problem, symbols, inputs, outputs, scalars, bound_args, base),
            "symbols": symbols,
            "benchmark_shape": bench,
            "validation_shapes": validation_shapes,
            "distributions": [],
            "inputs": inputs,
            "outputs": outputs,
        }
        if scalars:
            task["scalars"] = scalars
        task["reference"] = {"stored": problem.name + ".specref"}
        if timing_result is not None:
            task["baseline"] = {"recorded": timing_result["recorded"]}
            summary.update(timing_result["summary"])
        with open(os.path.join(out_dir, problem.name + ".json"), "w") as f:
            json.dump(task, f, indent=2)
            f.write("\n")
        summary["stored_bytes"] = total
        summary["cases"] = len(header_cases)
        summary["symbols"] = {"variable": variable, "fixed": fixed}

    def check_args(self, problem, base, c, fargs, bound_args, scalars):
        if len(fargs) != len(base.args):
            raise ImportFailure("get_inputs() gives %d arguments at %s but %d at the benchmark shape"
                                % (len(fargs), fmt_shape(c.shape, list(c.shape)), len(base.args)))
        sc = {s["name"]: s["value"] for s in scalars}
        for (name, _), a in zip(base.args, fargs):
            if name in bound_args and a != c.shape[bound_args[name]]:
                raise ImportFailure("forward argument '%s' is %r at %s, not the symbol %s"
                                    % (name, a, fmt_shape(c.shape, list(c.shape)), bound_args[name]))
            if name in sc and a != sc[name]:
                raise ImportFailure("forward argument '%s' changes with the shape or seed (%r, then %r)" % (name, sc[name], a))

    def check_shape(self, spec, t, shape, what):
        want = [eval_size_expr(e, shape) for e in spec["shape"]]
        if list(t.shape) != want or DTYPE_NAMES.get(t.dtype) != spec["dtype"]:
            raise ImportFailure("%s '%s' is %s%s at %s; the inferred shape says %s%s"
                                % (what, spec["name"], DTYPE_NAMES.get(t.dtype, t.dtype), list(t.shape),
                                   fmt_shape(shape, list(shape)), spec["dtype"], want))

    def reference(self, model, fargs, outputs, precision, notes, absolute=False):
        """The module's outputs computed in float64 (or natively, where float64 fails), cast to
        the outputs' dtypes, on the CPU."""
        dev = self.device
        if precision["value"] == "float64":
            try:
                m = copy.deepcopy(model).double().to(dev)
                a = [(x.detach().double() if x.is_floating_point() else x).to(dev) if isinstance(x, torch.Tensor) else x
                    for x in fargs]
                if absolute:
                    with torch.no_grad():
                        for p in list(m.parameters()) + list(m.buffers()):
                            if p.is_floating_point():
                                p.abs_()
                    a = [x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in a]
                res = as_outputs(run_forward(m, a, dev))
                return [r.detach().to(TORCH_DTYPES[o["dtype"]]).cpu() for (_, r), o in zip(res, outputs)]
            except ImportFailure:
                raise
            except Exception as e:
                precision["value"] = "native (float64 failed: %s)" % one_line(e)
                notes.append("reference computed in the native dtypes: float64 failed: %s" % one_line(e))
        m = copy.deepcopy(model).to(dev)
        a = [x.detach().to(dev) if isinstance(x, torch.Tensor) else x for x in fargs]
        if absolute:
            with torch.no_grad():
                for p in list(m.parameters()) + list(m.buffers()):
                    if p.is_floating_point():
                        p.abs_()
            a = [x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in a]
        try:
            res = as_outputs(run_forward(m, a, dev))
        except ImportFailure:
            raise
        except Exception as e:
            raise ImportFailure("the module fails on %s in its native dtypes too: %s" % (dev, one_line(e)))
        return [r.detach().to(TORCH_DTYPES[o["dtype"]]).cpu() for (_, r), o in zip(res, outputs)]

    def terms(self, model, fargs, outputs, precision):
        t = self.reference(model, fargs, outputs, precision, [], absolute=True)
        return [x if o["dtype"] in FLOAT_DTYPES and o["tolerance"]["terms"] > 0 else None for x, o in zip(t, outputs)]


def round_up_1sig(x):
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x))
    m = x / 10 ** e
    d = math.ceil(m - 1e-12)
    if d >= 10:
        d, e = 1, e + 1
    return float("%de%d" % (d, e))


class EagerCheck:
    """PyTorch eager (native dtypes) on each validation case, against the stored outputs with
    specgen's rule; widens an output's abs/rel where eager fails."""

    def __init__(self, importer, outputs, notes):
        self.importer = importer
        self.notes = notes
        self.need = {o["name"]: 0.0 for o in outputs}  # smallest passing factor on (abs, rel)
        self.skipped = None
        self.widened = []
        self.device = importer.device
        self._outputs = outputs

    def check(self, model, fargs, ref, terms, case, is_validation):
        """False when the case should be dropped: on an extra input distribution (not
        get_inputs()'s own), PyTorch eager itself is out of the tolerance the task will have,
        so the case would only reject correct kernels. The tolerance is widened for
        get_inputs()'s own cases only."""
        if not is_validation or self.skipped:
            return True
        dev = self.device
        try:
            m = copy.deepcopy(model).to(dev)
            a = [x.detach().to(dev) if isinstance(x, torch.Tensor) else x for x in fargs]
            got = [r.detach().cpu() for _, r in as_outputs(run_forward(m, a, dev))]
        except ImportFailure:
            raise
        except Exception as e:
            self.skipped = "eager self-check skipped: the native module does not run on %s (%s)" % (dev, one_line(e))
            self.notes.append(self.skipped)
            return True
        need = {}
        for i, (name, g) in enumerate(zip(self.need, got)):
            w = ref[i]
            if not w.is_floating_point():
                if not torch.equal(g.to(w.dtype), w):
                    raise ImportFailure("PyTorch eager disagrees with the reference on integer output '%s' (%s)"
                                        % (name, case.what))
                continue
            spec = self.spec(name)
            u = 2.0 ** -53 if spec["dtype"] == "f64" else 2.0 ** -24
            gd, wd = g.double(), w.double()
            td = terms[i].double().abs() if terms is not None and terms[i] is not None else torch.zeros_like(wd)
            nonfinite = ~torch.isfinite(wd)
            if bool(nonfinite.any()):
                gn, wn = gd[nonfinite], wd[nonfinite]
                match = (torch.isnan(gn) & torch.isnan(wn)) | (gn == wn)
                if not bool(match.all()):
                    raise ImportFailure("PyTorch eager disagrees with the reference on non-finite values of '%s' (%s)"
                                        % (name, case.what))
            fin = ~nonfinite
            if not bool(torch.isfinite(gd[fin]).all()):
                raise ImportFailure("PyTorch eager gives non-finite values of '%s' where the reference is finite (%s)"
                                    % (name, case.what))
            tol = spec["tolerance"]
            err = (gd[fin] - wd[fin]).abs() - tol["terms"] * u * td[fin]
            scale = tol["abs"] + tol["rel"] * wd[fin].abs()
            if err.numel():
                k = float((err / scale).max()) if bool((scale > 0).all()) else float("inf")
                need[name] = k
        # What the tolerance will allow: the default, or 4x what get_inputs()'s own cases needed
        # so far (they come first at every shape, so this bound only grows).
        def allowed(name):
            return 1.0 if self.need[name] <= 1.0 else 4.0 * self.need[name]
        if case.dist is not None and any(k > allowed(name) for name, k in need.items()):
            worst = max(need, key=lambda name: need[name] / allowed(name))
            self.notes.append("case dropped (PyTorch eager is %.3g x out of the tolerance on '%s'): %s"
                              % (need[worst], worst, case.what))
            return False
        for name, k in need.items():
            self.need[name] = max(self.need[name], k)
        return True

    def spec(self, name):
        for o in self._outputs:
            if o["name"] == name:
                return o
        raise KeyError(name)

    def finish(self, outputs):
        for o in outputs:
            k = self.need.get(o["name"], 0.0)
            if k > 1.0:
                tol = o["tolerance"]
                if not math.isfinite(k):
                    raise ImportFailure("PyTorch eager fails its own task on '%s' and no abs/rel widening helps" % o["name"])
                new_abs, new_rel = round_up_1sig(4 * k * tol["abs"]), round_up_1sig(4 * k * tol["rel"])
                msg = ("output '%s': PyTorch eager needs %.3g x the default abs/rel; widened to abs %g, rel %g"
                       % (o["name"], k, new_abs, new_rel))
                tol["abs"], tol["rel"] = new_abs, new_rel
                self.widened.append(msg)
                self.notes.append(msg)


def write_blob(f, t):
    data = tensor_bytes(t)
    pos = f.tell()
    pad = (-pos) % specref.ALIGN
    if pad:
        f.write(b"\0" * pad)
        pos += pad
    f.write(data)
    return {"offset": pos, "bytes": len(data), "xxh3": specref.xxh3_hex(data)}, len(data)


def write_store(path, header, blobs):
    """Writes the file: magic, header length, header, blobs at offsets (relative offsets in the
    header are shifted by the data start, a multiple of 64)."""
    rel = []
    for c in header["cases"]:
        for part in ("inputs", "outputs", "terms"):
            for e in c.get(part, {}).values():
                rel.append(e)
                e["_rel"] = e["offset"]
    start = 0
    while True:
        for e in rel:
            e["offset"] = start + e["_rel"]
        text = json.dumps(header, default=str, separators=(",", ":"), sort_keys=False)
        text = re.sub(r',"_rel":\d+', "", text)
        body = text.encode("utf-8")
        need = 16 + len(body)
        need += (-need) % specref.ALIGN
        if need == start:
            break
        start = need
    for e in rel:
        del e["_rel"]
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(specref.MAGIC)
        out.write(struct.pack("<Q", len(body)))
        out.write(body)
        out.write(b"\0" * (start - 16 - len(body)))
        blobs.seek(0)
        while True:
            chunk = blobs.read(1 << 24)
            if not chunk:
                break
            out.write(chunk)
        total = out.tell()
    os.replace(tmp, path)
    return total


def describe(problem, symbols, inputs, outputs, scalars, bound_args, base):
    def buf(b):
        return "%s (%s[%s])" % (b["name"], b["dtype"], ", ".join(str(e) for e in b["shape"]))
    fwd = [b for b in inputs if b["name"] in base.arg_names]
    params = [b for b in inputs if b["name"] not in base.arg_names]
    sentence = "Implement the PyTorch module below as CUDA kernels. Inputs: %s; outputs: %s" % (
        ", ".join(buf(b) for b in fwd) or "none", ", ".join(buf(b) for b in outputs))
    if params:
        sentence += "; the module's parameters are given as inputs named %s" % ", ".join(b["name"] for b in params)
    else:
        sentence += "; the module has no parameters"
    sentence += "."
    if symbols:
        sentence += (" The module-level size constants (%s) are the task's symbols; shapes are written over them."
                     % ", ".join(symbols))
    if bound_args:
        sentence += " Forward arguments given by a symbol: %s." % ", ".join("%s = %s" % kv for kv in bound_args.items())
    if scalars:
        sentence += " Forward arguments passed as scalars: %s." % ", ".join(
            "%s (%s %r)" % (s["name"], s["type"], s["value"]) for s in scalars)
    if problem.sets:
        sentence += (" The benchmark sizes differ from the file's: %s."
                     % ", ".join("%s = %d (the file: %d)" % (k, v, problem.file_constants[k])
                                 for k, v in sorted(problem.sets.items())))
    lines = [sentence, "", "```python"] + problem.source.rstrip("\n").split("\n") + ["```"]
    return lines


# --------------------------------------------------------------------------------------------
# Timing (CUDA only).

class Timing:
    def __init__(self, importer, model, fargs, notes):
        self.host_launch_ms = None
        self.dev = importer.device
        self.model = copy.deepcopy(model).to(self.dev)
        self.args = [x.detach().to(self.dev) if isinstance(x, torch.Tensor) else x for x in fargs]
        self.notes = notes

    def gate_cycles(self, fn):
        """GPU clock cycles for the launch gate: a spinning kernel (torch.cuda._sleep) queued
        after the L2 flush and before the start event, long enough (twice the host's time to
        queue one call, plus 20 us, at up to 2.5 GHz) that the whole call is queued before the
        start event runs. The events then bracket the GPU's work back to back, as specgen's
        worker times a candidate (its launch gate); without it, the host's time to launch
        eager's operators would count wherever it exceeds the flush. None where torch has no
        _sleep (then ungated, with a note)."""
        if not hasattr(torch.cuda, "_sleep"):
            self.notes.append("timing without the launch gate: torch.cuda._sleep is missing in PyTorch %s"
                              % torch.__version__)
            return None
        host = []
        with torch.no_grad():
            for _ in range(5):
                torch.cuda.synchronize(self.dev)
                t = time.perf_counter()
                fn()
                host.append(time.perf_counter() - t)
        torch.cuda.synchronize(self.dev)
        self.host_launch_ms = statistics.median(host) * 1e3
        return int((2 * statistics.median(host) + 20e-6) * 2.5e9)

    def specgen_method(self, fn, gate=True):
        """L2 flush per sample (memset of twice the L2), the launch gate, events around one
        call; 10 warm-up runs; stop when the relative standard error of the median is <= 0.5%
        after 20 samples, or at 200 samples or 10 s."""
        props = torch.cuda.get_device_properties(self.dev)
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 1024 * 1024)
        flush = torch.empty(2 * l2, dtype=torch.uint8, device=self.dev)
        cycles = self.gate_cycles(fn) if gate else None
        with torch.no_grad():
            for _ in range(10):
                fn()
            torch.cuda.synchronize(self.dev)
            samples = []
            t0 = time.time()
            while True:
                flush.zero_()
                if cycles:
                    torch.cuda._sleep(cycles)
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                samples.append(s.elapsed_time(e))
                n = len(samples)
                if n >= 20:
                    med = statistics.median(samples)
                    mad = statistics.median([abs(x - med) for x in samples])
                    rse = 1.2533 * 1.4826 * mad / math.sqrt(n) / med if med > 0 else 0.0
                    if rse <= 0.005:
                        break
                if n >= 200 or time.time() - t0 >= 10:
                    break
        return statistics.median(samples), len(samples), 2 * l2

    def kernelbench_method(self, fn):
        """KernelBench: 3 warm-up runs, then 100 trials, each thrashing L2 with a 256 MiB fill."""
        with torch.no_grad():
            for _ in range(3):
                fn()
            torch.cuda.synchronize(self.dev)
            times = []
            for _ in range(100):
                torch.cuda.synchronize(self.dev)
                thrash = torch.empty((32, 1024, 1024), dtype=torch.int64, device=self.dev)
                thrash.fill_(42)
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize(self.dev)
                times.append(s.elapsed_time(e))
                del thrash
        return statistics.mean(times), statistics.pstdev(times), len(times)

    def run(self):
        m, a = self.model, self.args
        eager_ms, n, flush_bytes = self.specgen_method(lambda: m(*a))
        kb_mean, kb_std, kb_n = self.kernelbench_method(lambda: m(*a))
        # The same without the gate: what the host's launches add where the flush does not hide them.
        ungated_ms, _, _ = self.specgen_method(lambda: m(*a), gate=False)
        compile_ms, compile_err = None, None
        if hasattr(torch, "compile"):
            try:
                cm = torch.compile(copy.deepcopy(m))
                compile_ms, _, _ = self.specgen_method(lambda: cm(*a))
            except Exception as e:
                compile_err = one_line(e)
        else:
            compile_err = "torch.compile is not available in PyTorch %s" % torch.__version__
        details = {
            "method": "specgen: L2 flush (memset of 2 x L2) and the launch gate per sample, events around "
                      "model(*inputs), 10 warm-up runs, 20..200 samples or 10 s, median",
            "samples": n, "l2_flush_bytes": flush_bytes, "host_launch_ms": self.host_launch_ms,
            "ungated_median_ms": ungated_ms,
            "kernelbench_mean_ms": kb_mean, "kernelbench_std_ms": kb_std, "kernelbench_trials": kb_n,
            "allow_tf32": {"cuda.matmul": torch.backends.cuda.matmul.allow_tf32,
                           "cudnn": torch.backends.cudnn.allow_tf32},
        }
        if compile_ms is not None:
            details["torch_compile_median_ms"] = compile_ms
        else:
            details["torch_compile_error"] = compile_err
        recorded = {"ms": eager_ms, "device": torch.cuda.get_device_name(self.dev),
                    "what": "PyTorch %s eager" % torch.__version__, "details": details}
        summary = {"eager_median_ms": eager_ms, "kernelbench_mean_ms": kb_mean, "host_launch_ms": self.host_launch_ms,
                   "ungated_median_ms": ungated_ms,
                   "kernelbench_over_eager": kb_mean / eager_ms if eager_ms else None,
                   "compile_median_ms": compile_ms}
        if compile_err:
            summary["compile_error"] = compile_err
        return {"recorded": recorded, "summary": summary}


# --------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description="Import KernelBench problems as specgen tasks with stored references.")
    ap.add_argument("problems", nargs="+", metavar="PROBLEM.py")
    ap.add_argument("--out", required=True, help="directory for <task>.json and <task>.specref")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per validation shape (default 3)")
    ap.add_argument("--max-store-mb", type=float, default=2048.0, help="largest store per problem, MB (default 2048)")
    ap.add_argument("--no-timing", action="store_true", help="record no baseline time")
    ap.add_argument("--json-summary", metavar="FILE", help="write a summary of every problem as JSON")
    ap.add_argument("--set", metavar="NAME=VALUE", action="append", default=[],
                    help="replace a size constant of the problems (an int >= 1), e.g. --set dim=65536; repeatable")
    args = ap.parse_args(argv)
    sets = {}
    for item in args.set:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not re.fullmatch(r"[0-9]+", value) \
                or int(value) < 1:
            ap.error("--set %s: give NAME=VALUE with VALUE an integer >= 1" % item)
        sets[name] = int(value)
    args.set = sets
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is available to PyTorch %s" % torch.__version__)
    try:
        specref.xxhash_library()
    except specref.SpecrefError as e:
        print("import_kernelbench: %s" % e, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    importer = Importer(args)
    results = []
    failed = 0
    for path in args.problems:
        r = importer.import_one(path)
        results.append(r)
        label = r["name"] or path
        if r["ok"]:
            extra = ""
            if r.get("eager_median_ms") is not None:
                extra = ", eager %.4f ms, KernelBench mean %.4f ms" % (r["eager_median_ms"], r["kernelbench_mean_ms"])
            print("%s: ok (%.1f s, %d cases, %.1f MB%s)" % (label, r["seconds"], r["cases"], r["stored_bytes"] / 1048576.0, extra))
            for n in r["notes"]:
                print("  note: %s" % n)
        else:
            failed += 1
            print("%s: FAILED: %s" % (label, r["reason"]))
    if args.json_summary:
        with open(args.json_summary, "w") as f:
            json.dump({"tool": TOOL, "torch": torch.__version__, "device": args.device, "problems": results}, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
