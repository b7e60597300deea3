// A racy block reduction that faults on shared memory holding inf, NaN or huge
// floats, outside specgen: the worker's shared-memory poison kernel (its PTX,
// taken from src/gpu/worker/runtime/smem_poison.cpp by run.sh), then one kernel of
// a cubin (run.sh builds them), on one stream, as the worker's checked runs do.
//
//   repro KERNEL CUBIN WORDS ITERS [--rows N] [--cols D] [--no-poison] [--no-carveout] [--split]
//
// WORDS is a comma list of 32-bit poison words, used in turn, one per
// iteration. --split synchronises after the poison kernel too, to tell which
// kernel faulted. Prints "OK ..." or "FAULT ..." and exits 0 or 1.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(CUresult r, const char* what) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("ERROR %s: %s\n", what, name ? name : "?");
  std::exit(2);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(r, what);
}

std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<unsigned> words(const std::string& list) {
  std::vector<unsigned> out;
  for (std::size_t p = 0; p < list.size();) {
    std::size_t c = list.find(',', p);
    if (c == std::string::npos) c = list.size();
    out.push_back(static_cast<unsigned>(std::strtoul(list.substr(p, c - p).c_str(), nullptr, 0)));
    p = c + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::printf("usage: repro KERNEL CUBIN WORDS ITERS [--rows N] [--cols D] [--no-poison] [--no-carveout] [--split]\n");
    return 2;
  }
  const char* kernel = argv[1];
  const std::vector<unsigned> patterns = words(argv[3]);
  const int iters = std::atoi(argv[4]);
  int rows = 7, cols = 1000;
  bool poison = true, carveout = true, split = false;
  for (int i = 5; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) rows = std::atoi(argv[++i]);
    else if (a == "--cols" && i + 1 < argc) cols = std::atoi(argv[++i]);
    else if (a == "--no-poison") poison = false;
    else if (a == "--no-carveout") carveout = false;
    else if (a == "--split") split = true;
  }
  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  int sms = 0, optin = 0;
  check(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "SM count");
  check(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev), "opt-in smem");

  // The poison kernel exactly as the worker loads and launches it: 4 blocks
  // per SM of 1024 threads, each with all opt-in shared memory, carveout max.
  const std::string ptx = slurp("poison.ptx");
  CUmodule pm;
  check(cuModuleLoadData(&pm, ptx.c_str()), "loading poison.ptx");
  CUfunction pf;
  check(cuModuleGetFunction(&pf, pm, "specgen_smem_poison"), "poison entry");
  unsigned bytes = static_cast<unsigned>(optin) / 16 * 16;
  check(cuFuncSetAttribute(pf, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes)), "poison smem");
  check(cuFuncSetAttribute(pf, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100), "poison carveout");

  const std::string cubin = slurp(argv[2]);
  CUmodule cm;
  check(cuModuleLoadData(&cm, cubin.data()), "loading the cubin");
  CUfunction cf;
  check(cuModuleGetFunction(&cf, cm, kernel), "kernel entry");
  if (carveout) check(cuFuncSetAttribute(cf, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100), "carveout");

  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  CUdeviceptr x, g, b, y;
  check(cuMemAlloc(&x, n * 4), "x");
  check(cuMemAlloc(&g, cols * 4), "gamma");
  check(cuMemAlloc(&b, cols * 4), "beta");
  check(cuMemAlloc(&y, n * 4), "y");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> hx(n), hg(cols), hb(cols);
  for (auto* v : {&hx, &hg, &hb})
    for (float& e : *v) e = normal(rng);
  check(cuMemcpyHtoD(x, hx.data(), n * 4), "upload x");
  check(cuMemcpyHtoD(g, hg.data(), cols * 4), "upload gamma");
  check(cuMemcpyHtoD(b, hb.data(), cols * 4), "upload beta");
  CUstream st;
  check(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "stream");

  std::printf("%s, %d SMs, rows %d cols %d, poison %s, carveout %s%s: ", kernel, sms, rows, cols,
              poison ? argv[3] : "off", carveout ? "max" : "default", split ? ", split" : "");
  for (int it = 0; it < iters; ++it) {
    unsigned pattern = patterns[it % patterns.size()];
    if (poison) {
      void* pp[] = {&pattern, &bytes};
      check(cuLaunchKernel(pf, 4 * sms, 1, 1, 1024, 1, 1, bytes, st, pp, nullptr), "poison launch");
      if (split)
        if (CUresult r = cuStreamSynchronize(st); r != CUDA_SUCCESS) {
          const char* name = nullptr;
          cuGetErrorName(r, &name);
          std::printf("FAULT in the poison kernel, iteration %d, word 0x%08x: %s\n", it, pattern, name);
          return 1;
        }
    }
    void* cp[] = {&x, &g, &b, &y, &cols};
    check(cuLaunchKernel(cf, rows, 1, 1, 256, 1, 1, 0, st, cp, nullptr), "kernel launch");
    if (CUresult r = cuStreamSynchronize(st); r != CUDA_SUCCESS) {
      const char* name = nullptr;
      cuGetErrorName(r, &name);
      std::printf("FAULT%s, iteration %d, word 0x%08x: %s\n", split ? " in the kernel" : "", it, pattern, name);
      return 1;
    }
  }
  std::vector<float> hy(n);
  check(cuMemcpyDtoH(hy.data(), y, n * 4), "download y");
  std::printf("OK, %d iterations; y[0] = %g\n", iters, hy[0]);
  return 0;
}
