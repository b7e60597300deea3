// cuBLAS through dlopen. The function types are spelt out from cublas_api.h
// (its C++ overloads of cublasGemmEx make decltype(&::cublasGemmEx) ambiguous);
// the _v2 symbols are the ones cublas_v2.h maps the plain names to.
#include "cublas.hpp"

#include "dynlib.hpp"

#include <cublas_api.h>
#include <fmt/format.h>

#include <cstdlib>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

struct cublas_api {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t) = nullptr;
  const char* (*status_name)(cublasStatus_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*sgemv)(cublasHandle_t, cublasOperation_t, int, int, const float*, const float*, int,
                          const float*, int, const float*, float*, int) = nullptr;
  std::string library{};
};

expected<cublas_api> open_cublas() {
  const auto opened = open_first(cublas_candidates());
  if (!opened.handle)
    return unexpected(error{fmt::format("cuBLAS is not available (tried {}: {})", opened.tried, opened.last_error)});
  cublas_api api;
  api.library = opened.loaded;
  std::string missing;
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(opened.handle, symbol));
    if (!fn) missing += missing.empty() ? symbol : std::string(", ") + symbol;
  };
  bind(api.create, "cublasCreate_v2");
  bind(api.destroy, "cublasDestroy_v2");
  bind(api.set_stream, "cublasSetStream_v2");
  bind(api.set_math_mode, "cublasSetMathMode");
  bind(api.status_name, "cublasGetStatusName");
  bind(api.gemm_ex, "cublasGemmEx");
  bind(api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  bind(api.sgemv, "cublasSgemv_v2");
  if (!missing.empty()) return unexpected(error{fmt::format("{} lacks {}", opened.loaded, missing)});
  return api;
}

const expected<cublas_api>& load_cublas() {
  static const expected<cublas_api> loaded = open_cublas();
  return loaded;
}

cudaDataType data_type(dtype t) {
  switch (t) {
    case dtype::f16: return CUDA_R_16F;
    case dtype::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;  // resolve admits f32, f16 and bf16 only
  }
}

}  // namespace

std::vector<std::string> cublas_candidates() {
  if (const char* forced = std::getenv("SPECGEN_CUBLAS_LIBRARY"); forced && *forced) return {forced};
  const std::string so = fmt::format("libcublas.so.{}", CUDA_VERSION / 1000);
  std::vector<std::string> out{so, "libcublas.so", "/usr/local/cuda/lib64/" + so, "/usr/local/cuda/lib/" + so};
#ifdef SPECGEN_CUDA_TOOLKIT_LIBRARY_DIR
  out.push_back(std::string(SPECGEN_CUDA_TOOLKIT_LIBRARY_DIR) + "/" + so);
#endif
  return out;
}

struct cublas_session::impl {
  const cublas_api* api = nullptr;
  cublasHandle_t handle = nullptr;
};

cublas_session::cublas_session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

cublas_session::~cublas_session() {
  if (impl_ && impl_->handle) impl_->api->destroy(impl_->handle);
}

const std::string& cublas_session::library() const noexcept { return impl_->api->library; }

expected<std::unique_ptr<cublas_session>, runtime_error> cublas_session::open(CUstream stream) {
  using k = runtime_error::kind;
  const auto& loaded = load_cublas();
  if (!loaded) return unexpected(runtime_error{k::internal, loaded.error().message, {}});
  const cublas_api& api = *loaded;
  auto fail = [&](cublasStatus_t s, std::string_view what) {
    return unexpected(runtime_error{k::internal, fmt::format("{}: {}", what, api.status_name(s)), api.status_name(s)});
  };
  auto p = std::make_unique<impl>();
  p->api = &api;
  if (auto s = api.create(&p->handle); s != CUBLAS_STATUS_SUCCESS) return fail(s, "cublasCreate");
  std::unique_ptr<cublas_session> out(new cublas_session(std::move(p)));
  if (auto s = api.set_stream(out->impl_->handle, stream); s != CUBLAS_STATUS_SUCCESS) return fail(s, "cublasSetStream");
  // Default math with CUBLAS_COMPUTE_32F below: fp32 accumulation, and no TF32
  // for f32 operands (that takes CUBLAS_TF32_TENSOR_OP_MATH or a _FAST_TF32 compute type).
  if (auto s = api.set_math_mode(out->impl_->handle, CUBLAS_DEFAULT_MATH); s != CUBLAS_STATUS_SUCCESS)
    return fail(s, "cublasSetMathMode");
  return out;
}

expected<void, runtime_error> cublas_session::enqueue(const resolved_call& call,
                                                      const std::map<std::string, std::uint64_t>& pointers) {
  const cublas_api& api = *impl_->api;
  std::array<void*, 3> buf{};
  for (std::size_t i = 0; i < 3; ++i) {
    auto it = pointers.find(call.args[i].buffer);
    if (it == pointers.end())
      return unexpected(runtime_error{runtime_error::kind::invalid_plan,
                                      fmt::format("line {}: {} has no buffer '{}'", call.line, call.function,
                                                  call.args[i].buffer),
                                      {}});
    buf[i] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(it->second));
  }
  auto size = [&](std::size_t k) { return static_cast<int>(call.args[3 + k].value); };
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType t = data_type(call.type);
  const auto compute = CUBLAS_COMPUTE_32F;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  // Row-major X[r, c] is column-major X^T: C = A.B becomes C^T = B^T . A^T, so
  // every call passes B before A and swaps M and N.
  if (call.function == "gemm") {
    const int m = size(0), n = size(1), k = size(2);
    s = api.gemm_ex(impl_->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, buf[1], t, n, buf[0], t, k, &zero, buf[2],
                    t, n, compute, CUBLAS_GEMM_DEFAULT);
  } else if (call.function == "gemm_nt") {
    const int m = size(0), n = size(1), k = size(2);
    s = api.gemm_ex(impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, buf[1], t, k, buf[0], t, k, &zero, buf[2],
                    t, n, compute, CUBLAS_GEMM_DEFAULT);
  } else if (call.function == "gemm_batched") {
    const int batch = size(0), m = size(1), n = size(2), k = size(3);
    s = api.gemm_strided_batched_ex(impl_->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, buf[1], t, n,
                                    static_cast<long long>(k) * n, buf[0], t, k, static_cast<long long>(m) * k, &zero,
                                    buf[2], t, n, static_cast<long long>(m) * n, batch, compute, CUBLAS_GEMM_DEFAULT);
  } else if (call.function == "gemv") {
    // A[M, K] row-major is column-major K x M: y = (A_cm)^T . x.
    const int m = size(0), k = size(1);
    s = api.sgemv(impl_->handle, CUBLAS_OP_T, k, m, &one, static_cast<const float*>(buf[0]), k,
                  static_cast<const float*>(buf[1]), 1, &zero, static_cast<float*>(buf[2]), 1);
  } else {
    return unexpected(runtime_error{runtime_error::kind::invalid_plan,
                                    fmt::format("line {}: unknown library function '{}'", call.line, call.function),
                                    {}});
  }
  if (s != CUBLAS_STATUS_SUCCESS)
    return unexpected(runtime_error{runtime_error::kind::launch_failed,
                                    fmt::format("line {}: {} failed: {}", call.line, call.function, api.status_name(s)),
                                    api.status_name(s)});
  return {};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
