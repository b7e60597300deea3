#!/usr/bin/env python3
"""Tests of tools/kernelbench/import_kernelbench.py on the problems in tests/kernelbench/problems.

Exit status 77 (a skip for ctest) where PyTorch is not installed.
"""

import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL_DIR = os.path.join(ROOT, "tools", "kernelbench")
IMPORTER = os.path.join(TOOL_DIR, "import_kernelbench.py")
PROBLEMS = os.path.join(HERE, "problems")

try:
    import torch
except ImportError:
    print("SKIP: PyTorch (python3-torch) is not installed")
    sys.exit(77)

sys.path.insert(0, TOOL_DIR)
import import_kernelbench as kb  # noqa: E402
import specref  # noqa: E402

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
         "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32, "i64": torch.int64}


def run_importer(args):
    p = subprocess.run([sys.executable, IMPORTER] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    return p.returncode, p.stdout


# What each problem must import as: symbols, benchmark shape, and inputs/outputs as
# (name, dtype, shape expressions).
EXPECTED = {
    "L1_19_ReLU": {
        "symbols": ["batch_size", "dim"], "bench": {"batch_size": 16, "dim": 16384},
        "inputs": [("x", "f32", ["batch_size", "dim"])],
        "outputs": [("out", "f32", ["batch_size", "dim"])],
    },
    "L1_2_Matmul_fp16": {
        "symbols": ["M", "K", "N"], "bench": {"M": 1024, "K": 2048, "N": 512},
        "inputs": [("A", "f16", ["M", "K"]), ("B", "f16", ["K", "N"])],
        "outputs": [("out", "f16", ["M", "N"])],
    },
    "L1_47_Sum_reduction_over_a_dimension": {
        "symbols": ["batch_size", "dim1", "dim2", "reduce_dim"],
        "bench": {"batch_size": 16, "dim1": 256, "dim2": 256, "reduce_dim": 1},
        "inputs": [("x", "f32", ["batch_size", "dim1", "dim2"])],
        "outputs": [("out", "f32", ["batch_size", "1", "dim2"])],
        "fixed": ["reduce_dim"],
    },
    "L1_51_Argmax_over_a_dimension": {
        "symbols": ["batch_size", "dim1", "dim2"], "bench": {"batch_size": 16, "dim1": 256, "dim2": 256},
        "inputs": [("x", "f32", ["batch_size", "dim1", "dim2"])],
        "outputs": [("out", "i64", ["batch_size", "dim2"])],
    },
    "L2_1_Conv2D_ReLU_BiasAdd": {
        "symbols": ["batch_size", "in_channels", "out_channels", "height", "width", "kernel_size"],
        "bench": {"batch_size": 16, "in_channels": 3, "out_channels": 16, "height": 32, "width": 32, "kernel_size": 3},
        "inputs": [("x", "f32", ["batch_size", "in_channels", "height", "width"]),
                   ("bias", "f32", ["out_channels", "1", "1"]),
                   ("conv_weight", "f32", ["out_channels", "in_channels", "kernel_size", "kernel_size"]),
                   ("conv_bias", "f32", ["out_channels"])],
        "outputs": [("out", "f32", ["batch_size", "out_channels", "height - kernel_size + 1", "width - kernel_size + 1"])],
    },
    "L2_9_Matmul_ReLU_Scale": {
        "symbols": ["batch_size", "in_features", "out_features"],
        "bench": {"batch_size": 128, "in_features": 1024, "out_features": 512},
        "inputs": [("x", "f32", ["batch_size", "in_features"]),
                   ("gemm_weight", "f32", ["out_features", "in_features"]),
                   ("gemm_bias", "f32", ["out_features"])],
        "outputs": [("out", "f32", ["batch_size", "out_features"])],
    },
    "L3_1_MLP": {
        "symbols": ["batch_size", "input_size", "output_size"],
        "bench": {"batch_size": 1, "input_size": 1000, "output_size": 500},
        "inputs": [("x", "f32", ["batch_size", "input_size"]),
                   ("network_0_weight", "f32", ["400", "input_size"]), ("network_0_bias", "f32", ["400"]),
                   ("network_2_weight", "f32", ["800", "400"]), ("network_2_bias", "f32", ["800"]),
                   ("network_4_weight", "f32", ["output_size", "800"]), ("network_4_bias", "f32", ["output_size"])],
        "outputs": [("out", "f32", ["batch_size", "output_size"])],
    },
}

DEFAULT_TOL = {"f16": 1e-3, "bf16": 1e-2, "f32": 1e-5, "f64": 1e-10}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kbimport-")
        cls.out = os.path.join(cls.tmp.name, "out")
        cls.problems = sorted(glob.glob(os.path.join(PROBLEMS, "level*", "*.py")))
        cls.summary_path = os.path.join(cls.tmp.name, "summary.json")
        cls.rc, cls.log = run_importer(cls.problems + ["--out", cls.out, "--device", "cpu", "--no-timing",
                                                       "--seeds", "2", "--json-summary", cls.summary_path])
        print(cls.log)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, name):
        with open(os.path.join(self.out, name + ".json")) as f:
            return json.load(f)

    def test_all_level_problems_import(self):
        self.assertEqual(self.rc, 0, self.log)
        self.assertEqual(sorted(EXPECTED), sorted(
            kb.Problem(p).name for p in self.problems))
        with open(self.summary_path) as f:
            summary = json.load(f)
        self.assertEqual(len(summary["problems"]), len(self.problems))
        for r in summary["problems"]:
            self.assertTrue(r["ok"], r)
            self.assertGreater(r["stored_bytes"], 0)
            self.assertIn("seconds", r)

    def test_task_fields(self):
        for name, want in EXPECTED.items():
            with self.subTest(task=name):
                t = self.load(name)
                self.assertEqual(t["name"], name)
                self.assertEqual(t["symbols"], want["symbols"])
                self.assertEqual(t["benchmark_shape"], want["bench"])
                self.assertEqual([(b["name"], b["dtype"], b["shape"]) for b in t["inputs"]], want["inputs"])
                self.assertEqual([(b["name"], b["dtype"], b["shape"]) for b in t["outputs"]], want["outputs"])
                self.assertEqual(t["reference"], {"stored": name + ".specref"})
                self.assertEqual(t["distributions"], [])
                self.assertNotIn("baseline", t)  # --no-timing
                allowed = {"name", "description", "symbols", "benchmark_shape", "validation_shapes",
                           "distributions", "inputs", "outputs", "reference", "baseline", "scalars",
                           "compile_options"}
                self.assertLessEqual(set(t), allowed)
                # Description: the sentence, then the source in a python fence.
                self.assertIsInstance(t["description"], list)
                self.assertTrue(t["description"][0].startswith("Implement the PyTorch module below as CUDA kernels."))
                self.assertIn("symbols", t["description"][0])
                self.assertIn("```python", t["description"])
                self.assertEqual(t["description"][-1], "```")
                self.assertIn("class Model(nn.Module):", t["description"])
                # Validation shapes: 2 smaller ones, then the benchmark; every symbol bound, every
                # dimension at least 1; fixed symbols at their benchmark value.
                shapes = t["validation_shapes"]
                self.assertGreaterEqual(len(shapes), 3)
                self.assertEqual(shapes[-1], want["bench"])
                for shp in shapes:
                    self.assertEqual(sorted(shp), sorted(t["symbols"]))
                    for s in want.get("fixed", []):
                        self.assertEqual(shp[s], want["bench"][s])
                    for b in t["inputs"] + t["outputs"]:
                        for e in b["shape"]:
                            self.assertIsInstance(e, str)
                            self.assertGreaterEqual(kb.eval_size_expr(e, shp), 1)
                for shp in shapes[:-1]:
                    self.assertTrue(any(shp[s] < want["bench"][s] for s in t["symbols"]), shp)
                # Tolerances written out, defaults for floats, exact for integers.
                for o in t["outputs"]:
                    if o["dtype"] in DEFAULT_TOL:
                        self.assertEqual(o["tolerance"], {"abs": DEFAULT_TOL[o["dtype"]], "rel": DEFAULT_TOL[o["dtype"]], "terms": 16})
                    else:
                        self.assertEqual(o["tolerance"], {"abs": 0, "rel": 0, "terms": 0})
                for s in t["symbols"]:
                    self.assertRegex(s, NAME)
                    self.assertNotIn(s, ("cdiv", "min", "max"))

    def test_conv_output_expression_evaluates(self):
        t = self.load("L2_1_Conv2D_ReLU_BiasAdd")
        shape = t["outputs"][0]["shape"]
        self.assertEqual([kb.eval_size_expr(e, t["benchmark_shape"]) for e in shape], [16, 16, 30, 30])
        for shp in t["validation_shapes"]:
            self.assertEqual(kb.eval_size_expr(shape[2], shp), shp["height"] - shp["kernel_size"] + 1)

    def test_size_expressions(self):
        b = {"N": 7, "M": 2}
        self.assertEqual(kb.eval_size_expr("N - 1", b), 6)
        self.assertEqual(kb.eval_size_expr("(N - 3) / 2 + 1", b), 3)
        self.assertEqual(kb.eval_size_expr("cdiv(N, M)", b), 4)
        self.assertEqual(kb.eval_size_expr("cdiv(0 - N, M)", b), -3)
        self.assertEqual(kb.eval_size_expr("(0 - N) / M", b), -3)
        self.assertEqual(kb.eval_size_expr("min(N, M) * max(N, M)", b), 14)

    def test_stores(self):
        for name, want in EXPECTED.items():
            with self.subTest(task=name):
                self.check_store(name, want)

    def check_store(self, name, want):
        t = self.load(name)
        path = os.path.join(self.out, name + ".specref")
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"SPECREF1")
        h = specref.read_header(path)
        self.assertEqual(h["task"], name)
        prod = h["producer"]
        self.assertEqual(prod["tool"], "import_kernelbench.py")
        self.assertEqual(prod["device"], "cpu")
        self.assertEqual(prod["reference_precision"], "float64")
        self.assertRegex(prod["problem_sha256"], r"^[0-9a-f]{64}$")
        size = os.path.getsize(path)
        cases = h["cases"]
        bench = t["benchmark_shape"]
        self.assertEqual([(c["shape"], c["seed"]) for c in cases[:2]], [(bench, 1), (bench, 2)])
        val_shapes = t["validation_shapes"][:-1]
        self.assertTrue(all(c["shape"] in val_shapes for c in cases[2:]))
        for shp in val_shapes:
            seeds = [c["seed"] for c in cases if c["shape"] == shp and "own inputs" in c["what"]]
            self.assertEqual(seeds, [1, 2])
            self.assertTrue(any("uniform(-1, 1)" in c["what"] and c["shape"] == shp for c in cases))
        problem = kb.Problem(self.problem_path(name))
        ends = []
        for ci, c in enumerate(cases):
            self.assertTrue(c["what"])
            self.assertEqual(sorted(c["inputs"]), sorted(b["name"] for b in t["inputs"]))
            self.assertEqual(sorted(c["outputs"]), sorted(b["name"] for b in t["outputs"]))
            ins = {}
            for b in t["inputs"]:
                e = c["inputs"][b["name"]]
                self.assertEqual(e["offset"] % 64, 0)
                self.assertLessEqual(e["offset"] + e["bytes"], size)
                self.assertRegex(e["xxh3"], r"^[0-9a-f]{16}$")
                ends.append((e["offset"], e["offset"] + e["bytes"]))
                ins[b["name"]] = specref.read_tensor(path, e, b["dtype"], self.dims(b, c["shape"]))
            outs, terms = {}, {}
            for b in t["outputs"]:
                e = c["outputs"][b["name"]]
                self.assertEqual(e["offset"] % 64, 0)
                ends.append((e["offset"], e["offset"] + e["bytes"]))
                outs[b["name"]] = specref.read_tensor(path, e, b["dtype"], self.dims(b, c["shape"]))
                if b["dtype"] in DEFAULT_TOL:
                    te = c["terms"][b["name"]]
                    terms[b["name"]] = specref.read_tensor(path, te, b["dtype"], self.dims(b, c["shape"]))
                    ends.append((te["offset"], te["offset"] + te["bytes"]))
            # Recompute in float64 from the stored inputs and parameters.
            got, got_terms = self.recompute(problem, t, c["shape"], ins)
            for b in t["outputs"]:
                self.assertTrue(torch.equal(got[b["name"]], outs[b["name"]]),
                                "%s case %d output %s differs from a fresh float64 run" % (name, ci, b["name"]))
                if b["name"] in terms:
                    self.assertTrue(torch.equal(got_terms[b["name"]], terms[b["name"]]))
            if ci == 0:
                # The stored seed 1 inputs are what get_inputs() gives after manual_seed(1).
                ns = problem.namespace({})
                torch.manual_seed(1)
                ns["get_init_inputs"]()
                torch.manual_seed(1)
                first = ns["get_inputs"]()[0]
                self.assertTrue(torch.equal(first, ins[t["inputs"][0]["name"]]))
        # Blobs do not overlap and start after the header.
        ends.sort()
        self.assertGreaterEqual(ends[0][0], 16)
        for (a0, a1), (b0, b1) in zip(ends, ends[1:]):
            self.assertLessEqual(a1, b0)

    def problem_path(self, name):
        for p in self.problems:
            if kb.Problem(p).name == name:
                return p
        raise KeyError(name)

    @staticmethod
    def dims(b, shape):
        return [kb.eval_size_expr(e, shape) for e in b["shape"]]

    @staticmethod
    def recompute(problem, t, shape, ins):
        ns = problem.namespace(shape)
        model = ns["Model"](*ns["get_init_inputs"]())
        names = [b["name"] for b in t["inputs"]]
        params = dict(list(model.named_parameters()) + list(model.named_buffers()))
        with torch.no_grad():
            for full, p in params.items():
                p.copy_(ins[full.replace(".", "_")])
        fwd = [n for n in names if n not in {k.replace(".", "_") for k in params}]
        m64 = copy.deepcopy(model).double()
        args = [ins[n].double() if ins[n].is_floating_point() else ins[n] for n in fwd]
        dtypes = {b["name"]: TORCH[b["dtype"]] for b in t["outputs"]}
        with torch.no_grad():
            out = m64(*args)
            mabs = copy.deepcopy(m64)
            for p in list(mabs.parameters()) + list(mabs.buffers()):
                if p.is_floating_point():
                    p.abs_()
            outabs = mabs(*[a.abs() if a.is_floating_point() else a for a in args])
        if isinstance(out, torch.Tensor):
            out, outabs = {"out": out}, {"out": outabs}
        else:
            out = {"out%d" % i: o for i, o in enumerate(out)}
            outabs = {"out%d" % i: o for i, o in enumerate(outabs)}
        return ({k: v.to(dtypes[k]) for k, v in out.items()},
                {k: v.to(dtypes[k]) for k, v in outabs.items() if v.is_floating_point()})


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kbimport-")

    def tearDown(self):
        self.tmp.cleanup()


class FailureTest(TempDirTest):

    def expect_failure(self, problem, reason, extra=()):
        rc, log = run_importer([problem, "--out", self.tmp.name, "--device", "cpu", "--no-timing", "--seeds", "1"]
                               + list(extra))
        self.assertEqual(rc, 1, log)
        lines = [l for l in log.splitlines() if "FAILED" in l]
        self.assertEqual(len(lines), 1, log)
        self.assertIn(reason, lines[0])
        return lines[0]

    def test_unsupported_problems(self):
        u = os.path.join(PROBLEMS, "unsupported")
        self.expect_failure(os.path.join(u, "bool_mask.py"), "unsupported dtype torch.bool for input 'mask'")
        self.expect_failure(os.path.join(u, "complex_output.py"), "unsupported dtype torch.complex64 for output 'out'")
        self.expect_failure(os.path.join(u, "random_forward.py"), "forward is not deterministic (two runs at seed 1 differ)")

    def test_bad_problem_files(self):
        bad = os.path.join(self.tmp.name, "syntax_error.py")
        with open(bad, "w") as f:
            f.write("import torch\nclass Model(:\n    pass\n")
        self.expect_failure(bad, "syntax error in the problem file, line 2")
        nomodel = os.path.join(self.tmp.name, "no_model.py")
        with open(nomodel, "w") as f:
            f.write("import torch\nn = 4\ndef get_inputs():\n    return [torch.randn(n)]\n"
                    "def get_init_inputs():\n    return []\n")
        self.expect_failure(nomodel, "defines no class Model")

    def test_store_size_limit(self):
        line = self.expect_failure(os.path.join(PROBLEMS, "level1", "19_ReLU.py"), "over --max-store-mb 0.001",
                                   ["--max-store-mb", "0.001"])
        self.assertRegex(line, r"would take [0-9.]+ MB \([0-9]+ bytes\)")
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "L1_19_ReLU.specref")))

    def test_set_replaces_size_constants(self):
        relu = os.path.join(PROBLEMS, "level1", "19_ReLU.py")
        rc, log = run_importer([relu, "--out", self.tmp.name, "--device", "cpu", "--no-timing", "--seeds", "1",
                                "--set", "dim=1000", "--set", "batch_size=3"])
        self.assertEqual(rc, 0, log)
        with open(os.path.join(self.tmp.name, "L1_19_ReLU.json")) as f:
            t = json.load(f)
        self.assertEqual(t["benchmark_shape"], {"batch_size": 3, "dim": 1000})
        self.assertIn({"batch_size": 3, "dim": 1000}, t["validation_shapes"])
        self.assertTrue(all(v["dim"] <= 1000 for v in t["validation_shapes"]), t["validation_shapes"])
        self.assertIn("batch_size = 3 (the file: 16), dim = 1000 (the file: 16384)", t["description"][0])
        x = [c for c in specref.read_header(os.path.join(self.tmp.name, "L1_19_ReLU.specref"))["cases"]
             if c["shape"] == {"batch_size": 3, "dim": 1000}][0]["inputs"]["x"]
        self.assertEqual(x["bytes"], 3 * 1000 * 4)
        self.expect_failure(relu, "--set dimm: the problem has no int constant 'dimm' (its int constants: batch_size, dim)",
                            ["--set", "dimm=5"])
        rc, log = run_importer([relu, "--out", self.tmp.name, "--set", "dim=0"])
        self.assertEqual(rc, 2, log)
        self.assertIn("--set dim=0: give NAME=VALUE with VALUE an integer >= 1", log)

    def test_others_go_on(self):
        rc, log = run_importer([os.path.join(PROBLEMS, "unsupported", "bool_mask.py"),
                                os.path.join(PROBLEMS, "level1", "19_ReLU.py"),
                                "--out", self.tmp.name, "--device", "cpu", "--no-timing", "--seeds", "1"])
        self.assertEqual(rc, 1, log)
        self.assertIn("L1_19_ReLU: ok", log)
        self.assertTrue(os.path.exists(os.path.join(self.tmp.name, "L1_19_ReLU.json")))

    def test_checksum_mismatch_detected(self):
        rc, log = run_importer([os.path.join(PROBLEMS, "level1", "19_ReLU.py"), "--out", self.tmp.name,
                                "--device", "cpu", "--no-timing", "--seeds", "1"])
        self.assertEqual(rc, 0, log)
        path = os.path.join(self.tmp.name, "L1_19_ReLU.specref")
        h = specref.read_header(path)
        e = h["cases"][0]["outputs"]["out"]
        with open(path, "r+b") as f:
            f.seek(e["offset"] + 5)
            byte = f.read(1)
            f.seek(e["offset"] + 5)
            f.write(bytes([byte[0] ^ 1]))
        with self.assertRaisesRegex(specref.SpecrefError, "checksum"):
            specref.read_blob(path, e, "f32", [16, 16384])


class OtherProblemsTest(TempDirTest):
    def test_scalars_symbol_arguments_and_tuple_outputs(self):
        problem = os.path.join(PROBLEMS, "other", "pool_scalar_args.py")
        rc, log = run_importer([problem, "--out", self.tmp.name, "--device", "cpu", "--no-timing", "--seeds", "1"])
        self.assertEqual(rc, 0, log)
        with open(os.path.join(self.tmp.name, "pool_scalar_args.json")) as f:
            t = json.load(f)
        self.assertEqual(t["symbols"], ["batch", "channels", "size"])
        self.assertEqual([(b["name"], b["shape"]) for b in t["inputs"]],
                         [("x", ["batch", "channels", "size", "size"]), ("scale", ["channels", "1", "1"])])
        self.assertEqual([(b["name"], b["shape"]) for b in t["outputs"]],
                         [("out0", ["batch", "size"]), ("out1", ["batch", "(size - 1) / 2", "(size - 1) / 2"])])
        self.assertEqual(t["scalars"], [{"name": "alpha", "type": "f64", "value": 0.5}])
        self.assertIn("n = size", t["description"][0])
        for shp in t["validation_shapes"]:
            self.assertEqual(kb.eval_size_expr(t["outputs"][1]["shape"][1], shp), (shp["size"] - 3) // 2 + 1)

    def test_eager_failure_widens_tolerance(self):
        # float32 sin(x * 10000) is far from the float64 reference, worst with the "large" inputs.
        problem = os.path.join(PROBLEMS, "other", "sin_large.py")
        summary = os.path.join(self.tmp.name, "summary.json")
        rc, log = run_importer([problem, "--out", self.tmp.name, "--device", "cpu", "--no-timing", "--seeds", "1",
                                "--json-summary", summary])
        self.assertEqual(rc, 0, log)
        with open(os.path.join(self.tmp.name, "sin_large.json")) as f:
            tol = json.load(f)["outputs"][0]["tolerance"]
        self.assertGreater(tol["abs"], 1e-5)
        self.assertGreater(tol["rel"], 1e-5)
        self.assertEqual(float("%.0e" % tol["abs"]), tol["abs"])  # one significant digit
        self.assertEqual(tol["terms"], 16)
        h = specref.read_header(os.path.join(self.tmp.name, "sin_large.specref"))
        self.assertIn("widened", h["producer"]["tolerance_widened"][0])
        with open(summary) as f:
            notes = json.load(f)["problems"][0]["notes"]
        self.assertTrue(any("widened to abs" in n for n in notes), notes)
        # The "large" inputs, where eager is far out of even the widened tolerance, are dropped
        # rather than widening the tolerance until it means nothing.
        self.assertLess(tol["abs"], 0.1)
        self.assertTrue(any(n.startswith("case dropped (PyTorch eager is") and "large" in n for n in notes), notes)
        self.assertFalse(any("large" in c["what"] for c in h["cases"]), [c["what"] for c in h["cases"]])


if __name__ == "__main__":
    unittest.main(verbosity=2)
