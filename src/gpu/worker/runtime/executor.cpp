// Contexts, modules, guarded buffers and plan execution with a deadline.
#include "executor.hpp"

#include <fmt/format.h>

#include <atomic>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

expected<void, runtime_error> context_state::require_usable() const {
  if (usable) return {};
  return unexpected(runtime_error{runtime_error::kind::fault,
                                  "the GPU context is unusable after an earlier fault or timeout; the worker must "
                                  "exit and be restarted",
                                  {}});
}

}  // namespace detail

// ---- gpu_context ----------------------------------------------------------------------

gpu_context::gpu_context(std::unique_ptr<detail::context_state> s) : state_(std::move(s)) {}

expected<std::unique_ptr<gpu_context>, runtime_error> gpu_context::create(int device) {
  auto info = query_device(device);
  if (!info) return unexpected(info.error());
  auto s = std::make_unique<detail::context_state>();
  s->api = *detail::load_driver();
  s->info = std::move(*info);
  const auto& api = *s->api;
  using k = runtime_error::kind;
  if (auto r = s->check(api.cuDeviceGet(&s->device, device), k::no_device, "cuDeviceGet"); !r) return unexpected(r.error());
  if (auto r = s->check(api.cuDevicePrimaryCtxRetain(&s->context, s->device), k::internal, "cuDevicePrimaryCtxRetain"); !r)
    return unexpected(r.error());
  // From here the destructor releases what was made.
  std::unique_ptr<gpu_context> ctx(new gpu_context(std::move(s)));
  auto& st = *ctx->state_;
  if (auto r = st.check(api.cuCtxSetCurrent(st.context), k::internal, "cuCtxSetCurrent"); !r) return unexpected(r.error());
  if (auto r = st.check(api.cuStreamCreate(&st.stream, CU_STREAM_NON_BLOCKING), k::internal, "cuStreamCreate"); !r)
    return unexpected(r.error());
  if (auto r = st.check(api.cuEventCreate(&st.start, CU_EVENT_DEFAULT), k::internal, "cuEventCreate"); !r)
    return unexpected(r.error());
  if (auto r = st.check(api.cuEventCreate(&st.stop, CU_EVENT_DEFAULT), k::internal, "cuEventCreate"); !r)
    return unexpected(r.error());
  // The launch gate's word. Any failure leaves the gate off (timing still
  // works, with the host's launch time inside the events).
  void* word = nullptr;
  CUdeviceptr word_device = 0;
  if (api.cuMemAllocHost(&word, sizeof(std::uint32_t)) == CUDA_SUCCESS) {
    *static_cast<std::uint32_t*>(word) = 0;
    if (api.cuMemHostGetDevicePointer(&word_device, word, 0) == CUDA_SUCCESS &&
        api.cuStreamWaitValue32(st.stream, word_device, 0, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS &&
        api.cuCtxSynchronize() == CUDA_SUCCESS) {
      st.gate_flag = static_cast<std::uint32_t*>(word);
      st.gate_device = word_device;
    } else {
      api.cuMemFreeHost(word);
    }
  }
  return ctx;
}

gpu_context::~gpu_context() {
  // After a fault or a timeout nothing is released: the calls may block on a
  // hung kernel, and the process is about to exit anyway.
  if (!state_ || !state_->usable) {
    if (state_) static_cast<void>(state_->blas.release());  // its handle lives in the abandoned context
    return;
  }
  state_->blas.reset();
  const auto& api = *state_->api;
  if (state_->poison) api.cuModuleUnload(state_->poison->module);
  if (state_->staging_data) api.cuMemFreeHost(state_->staging_data);
  if (state_->gate_flag) api.cuMemFreeHost(state_->gate_flag);
  if (state_->stop) api.cuEventDestroy(state_->stop);
  if (state_->start) api.cuEventDestroy(state_->start);
  if (state_->stream) api.cuStreamDestroy(state_->stream);
  if (state_->context) api.cuDevicePrimaryCtxRelease(state_->device);
}

const device_info& gpu_context::info() const noexcept { return state_->info; }
bool gpu_context::usable() const noexcept { return state_->usable; }

expected<module, runtime_error> gpu_context::load_module(std::span<const std::byte> cubin) {
  if (auto u = state_->require_usable(); !u) return unexpected(u.error());
  CUmodule m = nullptr;
  if (auto r = state_->check(state_->api->cuModuleLoadData(&m, cubin.data()), runtime_error::kind::load_failed,
                             fmt::format("loading a cubin of {} bytes on {} ({})", cubin.size(), state_->info.name,
                                         state_->info.arch));
      !r)
    return unexpected(r.error());
  return module(this, m);
}

expected<device_buffer, runtime_error> gpu_context::allocate(std::size_t bytes, buffer_options options) {
  if (auto u = state_->require_usable(); !u) return unexpected(u.error());
  CUdeviceptr p = 0;
  const std::size_t total = std::max<std::size_t>(1, bytes + 2 * options.guard_bytes);  // the driver refuses 0
  if (auto r = state_->check(state_->api->cuMemAlloc(&p, total), runtime_error::kind::out_of_memory,
                             fmt::format("cuMemAlloc of {} bytes", total));
      !r)
    return unexpected(r.error());
  return device_buffer(this, p, bytes, options.guard_bytes);
}

// ---- module ---------------------------------------------------------------------------

module::module(module&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)), handle_(std::exchange(o.handle_, nullptr)) {}
module& module::operator=(module&& o) noexcept {
  if (this != &o) {
    module gone(std::move(*this));
    ctx_ = std::exchange(o.ctx_, nullptr);
    handle_ = std::exchange(o.handle_, nullptr);
  }
  return *this;
}
module::~module() {
  if (handle_ && ctx_->usable()) ctx_->state_->api->cuModuleUnload(static_cast<CUmodule>(handle_));
}

bool module::has_kernel(std::string_view name) const {
  CUfunction f = nullptr;
  return ctx_->state_->api->cuModuleGetFunction(&f, static_cast<CUmodule>(handle_), std::string(name).c_str()) ==
         CUDA_SUCCESS;
}

// ---- device_buffer --------------------------------------------------------------------

device_buffer::device_buffer(device_buffer&& o) noexcept
    : ctx_(std::exchange(o.ctx_, nullptr)), base_(std::exchange(o.base_, 0)), size_(o.size_), guard_(o.guard_) {}
device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    device_buffer gone(std::move(*this));
    ctx_ = std::exchange(o.ctx_, nullptr);
    base_ = std::exchange(o.base_, 0);
    size_ = o.size_;
    guard_ = o.guard_;
  }
  return *this;
}
device_buffer::~device_buffer() {
  // Freeing memory a hung kernel still uses would wait for it.
  if (base_ && ctx_->usable()) ctx_->state_->api->cuMemFree(base_);
}

expected<void, runtime_error> device_buffer::upload(std::span<const std::byte> bytes) {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return u;
  if (bytes.size() > size_)
    throw std::length_error(fmt::format("upload of {} bytes into a buffer of {}", bytes.size(), size_));
  if (bytes.empty()) return {};
  return s.check(s.api->cuMemcpyHtoD(pointer(), bytes.data(), bytes.size()), runtime_error::kind::internal,
                 fmt::format("copying {} bytes to the GPU", bytes.size()));
}

expected<std::vector<std::byte>, runtime_error> device_buffer::download() const {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return unexpected(u.error());
  std::vector<std::byte> out(size_);
  if (size_ == 0) return out;
  if (auto r = s.check(s.api->cuMemcpyDtoH(out.data(), pointer(), size_), runtime_error::kind::internal,
                       fmt::format("copying {} bytes from the GPU", size_));
      !r)
    return unexpected(r.error());
  return out;
}

expected<void, runtime_error> device_buffer::download_into(std::span<std::byte> out) const {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return u;
  if (out.size() < size_)
    throw std::length_error(fmt::format("download of {} bytes into {}", size_, out.size()));
  if (size_ == 0) return {};
  return s.check(s.api->cuMemcpyDtoH(out.data(), pointer(), size_), runtime_error::kind::internal,
                 fmt::format("copying {} bytes from the GPU", size_));
}

expected<void, runtime_error> device_buffer::fill(std::byte value) {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return u;
  if (size_ == 0) return {};
  return s.check(s.api->cuMemsetD8(pointer(), static_cast<unsigned char>(value), size_), runtime_error::kind::internal,
                 "cuMemsetD8");
}

expected<void, runtime_error> device_buffer::fill_guards(std::byte value) {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return u;
  if (guard_ == 0) return {};
  for (CUdeviceptr at : {base_, base_ + guard_ + size_})
    if (auto r = s.check(s.api->cuMemsetD8(at, static_cast<unsigned char>(value), guard_),
                         runtime_error::kind::internal, "cuMemsetD8 of a guard zone");
        !r)
      return r;
  return {};
}

expected<std::array<std::vector<std::byte>, 2>, runtime_error> device_buffer::read_guards() const {
  auto& s = *ctx_->state_;
  if (auto u = s.require_usable(); !u) return unexpected(u.error());
  std::array<std::vector<std::byte>, 2> out{std::vector<std::byte>(guard_), std::vector<std::byte>(guard_)};
  if (guard_ == 0) return out;
  const CUdeviceptr at[2] = {base_, base_ + guard_ + size_};
  for (int i = 0; i < 2; ++i)
    if (auto r = s.check(s.api->cuMemcpyDtoH(out[static_cast<std::size_t>(i)].data(), at[i], guard_),
                         runtime_error::kind::internal, "reading a guard zone");
        !r)
      return unexpected(r.error());
  return out;
}

// ---- prepared_plan and run_plan -----------------------------------------------------

namespace detail {

bool context_state::hold() {
  if (!gate_flag) return false;
  const std::uint32_t next = gate_value + 1;
  if (api->cuStreamWaitValue32(stream, gate_device, next, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS) return false;
  gate_value = next;
  return true;
}

void context_state::release() noexcept {
  if (gate_flag) std::atomic_ref<std::uint32_t>(*gate_flag).store(gate_value, std::memory_order_release);
}

expected<std::span<std::byte>, runtime_error> context_state::staging(std::size_t bytes) {
  if (auto u = require_usable(); !u) return unexpected(u.error());
  if (bytes > staging_bytes) {
    constexpr std::size_t step = std::size_t{64} << 20;
    const std::size_t want = (bytes + step - 1) / step * step;
    if (staging_data) api->cuMemFreeHost(staging_data);
    staging_data = nullptr;
    staging_bytes = 0;
    void* p = nullptr;
    if (auto r = check(api->cuMemAllocHost(&p, want), runtime_error::kind::internal,
                       fmt::format("cuMemAllocHost of {} bytes of staging", want));
        !r)
      return unexpected(r.error());
    staging_data = p;
    staging_bytes = want;
  }
  return std::span<std::byte>(static_cast<std::byte*>(staging_data), bytes);
}

expected<const smem_poison_kernel*, runtime_error> context_state::smem_poisoner() {
  if (poison) return &*poison;
  if (auto u = require_usable(); !u) return unexpected(u.error());
  using k = runtime_error::kind;
  const auto geometry = smem_poison_geometry_for(info.limits.max_dynamic_smem_bytes, info.multiprocessors,
                                                 info.limits.max_threads_per_block);
  if (geometry.blocks == 0)
    return unexpected(runtime_error{
        k::internal,
        fmt::format("cannot poison shared memory on {}: the device reports {} bytes of opt-in shared memory per "
                    "block and {} multiprocessors",
                    info.name, info.limits.max_dynamic_smem_bytes, info.multiprocessors),
        {}});
  // The JIT's own words, for a driver that refuses the PTX.
  char log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof log))};
  CUmodule m = nullptr;
  if (CUresult r = api->cuModuleLoadDataEx(&m, smem_poison_ptx().data(), 2, options, values); r != CUDA_SUCCESS) {
    log[sizeof log - 1] = '\0';
    return unexpected(check(r, k::internal,
                            fmt::format("JIT-compiling the shared-memory poison kernel (PTX ISA 7.0) for {} ({}){}{}",
                                        info.name, info.arch, *log ? ": " : "", log))
                          .error());
  }
  smem_poison_kernel loaded{.module = m, .geometry = geometry};
  auto fail = [&](CUresult r, std::string what) {
    auto e = check(r, k::internal, fmt::format("{} of the shared-memory poison kernel", what)).error();
    if (usable) api->cuModuleUnload(m);
    return unexpected(std::move(e));
  };
  if (CUresult r = api->cuModuleGetFunction(&loaded.function, m, smem_poison_entry); r != CUDA_SUCCESS)
    return fail(r, "looking up the entry point");
  if (CUresult r = api->cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           static_cast<int>(geometry.bytes));
      r != CUDA_SUCCESS)
    return fail(r, fmt::format("allowing {} bytes of dynamic shared memory", geometry.bytes));
  if (CUresult r = api->cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                           CU_SHAREDMEM_CARVEOUT_MAX_SHARED);
      r != CUDA_SUCCESS)
    return fail(r, "setting the shared memory carveout");
  poison = loaded;
  return &*poison;
}

expected<void, runtime_error> context_state::memset_async(std::uint64_t at, std::uint8_t value, std::size_t bytes) {
  if (auto u = require_usable(); !u) return u;
  if (bytes == 0) return {};
  return check(api->cuMemsetD8Async(at, value, bytes, stream), runtime_error::kind::internal,
               fmt::format("cuMemsetD8Async of {} bytes", bytes));
}

expected<void, runtime_error> context_state::copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes) {
  if (auto u = require_usable(); !u) return u;
  if (bytes == 0) return {};
  return check(api->cuMemcpyDtoDAsync(dst, src, bytes, stream), runtime_error::kind::internal,
               fmt::format("cuMemcpyDtoDAsync of {} bytes", bytes));
}

expected<void, runtime_error> context_state::await(CUevent event, std::chrono::steady_clock::time_point until,
                                                   duration deadline) {
  auto pause = std::chrono::microseconds(10);
  while (true) {
    CUresult r = api->cuEventQuery(event);
    if (r == CUDA_SUCCESS) return {};
    if (r != CUDA_ERROR_NOT_READY) return check(r, runtime_error::kind::internal, "running the plan");
    if (std::chrono::steady_clock::now() >= until) {
      usable = false;
      return unexpected(runtime_error{
          runtime_error::kind::timeout,
          fmt::format("the plan's kernels did not finish within {:.3f} s (an endless loop, a deadlock at a barrier, "
                      "or far too much work); the GPU context is abandoned",
                      to_seconds(deadline)),
          {}});
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

expected<std::vector<CUfunction>, runtime_error> prepared_plan::resolve_functions(CUmodule m) const {
  using k = runtime_error::kind;
  auto& s = *state_;
  const auto& api = *s.api;
  std::vector<CUfunction> out;
  out.reserve(launches_.size());
  for (const auto& l : launches_) {
    CUfunction f = nullptr;
    if (CUresult r = api.cuModuleGetFunction(&f, m, l.kernel.c_str()); r != CUDA_SUCCESS)
      return unexpected(runtime_error{
          k::invalid_plan,
          fmt::format("line {}: the module has no kernel '{}' ({}); kernels must be declared extern \"C\" __global__",
                      l.line, l.kernel, error_name(api, r)),
          error_name(api, r)});
    if (l.smem_opt_in || l.smem_bytes > 48 * 1024)
      if (auto r = s.check(api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   static_cast<int>(l.smem_bytes)),
                           k::launch_failed,
                           fmt::format("line {}: allowing kernel '{}' {} bytes of dynamic shared memory", l.line,
                                       l.kernel, l.smem_bytes));
          !r)
        return unexpected(r.error());
    if (smem_poison_)
      if (auto r = s.check(api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                                   CU_SHAREDMEM_CARVEOUT_MAX_SHARED),
                           k::internal,
                           fmt::format("line {}: setting the shared memory carveout of kernel '{}' for the poison",
                                       l.line, l.kernel));
          !r)
        return unexpected(r.error());
    out.push_back(f);
  }
  return out;
}

expected<void, runtime_error> prepared_plan::set_carveout(int carveout) const {
  auto& s = *state_;
  for (std::size_t i = 0; i < functions_.size(); ++i)
    if (auto r = s.check(s.api->cuFuncSetAttribute(functions_[i], CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                                    carveout),
                         runtime_error::kind::internal,
                         fmt::format("line {}: setting the preferred shared memory carveout of kernel '{}' to {}",
                                     launches_[i].line, launches_[i].kernel, carveout));
        !r)
      return r;
  return {};
}

expected<void, runtime_error> prepared_plan::poison_shared_memory(std::optional<std::uint32_t> pattern) {
  auto& s = *state_;
  if (auto u = s.require_usable(); !u) return u;
  if (!pattern) {
    // Off even if a kernel keeps the carveout: the poison launches stop.
    const bool was = smem_poison_.has_value();
    smem_poison_.reset();
    return was ? set_carveout(CU_SHAREDMEM_CARVEOUT_DEFAULT) : expected<void, runtime_error>{};
  }
  if (auto k = s.smem_poisoner(); !k) return unexpected(k.error());
  if (!smem_poison_)
    if (auto c = set_carveout(CU_SHAREDMEM_CARVEOUT_MAX_SHARED); !c) return c;
  smem_poison_ = pattern;
  return {};
}

expected<prepared_plan, runtime_error> prepared_plan::prepare(
    gpu_context& ctx, const resolved_plan& plan, const module& mod, const buffer_pointers& buffers,
    std::shared_ptr<const std::vector<std::byte>> fresh_cubin) {
  using k = runtime_error::kind;
  auto& s = context_access::state(ctx);
  const auto& api = *s.api;
  if (auto u = s.require_usable(); !u) return unexpected(u.error());
  if (auto r = s.check(api.cuCtxSetCurrent(s.context), k::internal, "cuCtxSetCurrent"); !r) return unexpected(r.error());

  prepared_plan p;
  p.state_ = &s;
  p.launches_ = plan.launches;
  buffer_pointers& pointers = p.pointers_;
  pointers = buffers;
  for (const auto& sc : plan.scratch) {
    auto b = ctx.allocate(static_cast<std::size_t>(sc.bytes));
    if (!b) return unexpected(b.error());
    pointers[sc.name] = b->pointer();
    p.scratch_.push_back(std::move(*b));
    p.zero_.push_back(sc.zero);
  }
  for (const auto& l : plan.launches) {
    auto params = marshal_args(l, pointers);
    if (!params) return unexpected(params.error());
    p.params_.push_back(std::move(*params));
  }
  if (!plan.calls.empty() && !s.blas) {
    auto blas = cublas_session::open(s.stream);
    if (!blas) return unexpected(blas.error());
    s.blas = std::move(*blas);
  }
  p.calls_ = plan.calls;
  CUmodule from = context_access::handle(mod);
  if (fresh_cubin) {
    // The shared module may carry globals an earlier request wrote: the plan
    // launches from its own instance only.
    p.cubin_ = std::move(fresh_cubin);
    if (auto r = s.check(api.cuModuleLoadData(&p.own_, p.cubin_->data()), k::load_failed,
                         fmt::format("loading a fresh instance of a cubin of {} bytes", p.cubin_->size()));
        !r)
      return unexpected(r.error());
    from = p.own_;
  }
  auto functions = p.resolve_functions(from);
  if (!functions) return unexpected(functions.error());
  p.functions_ = std::move(*functions);
  return p;
}

prepared_plan::prepared_plan(prepared_plan&& o) noexcept
    : state_(o.state_),
      launches_(std::move(o.launches_)),
      calls_(std::move(o.calls_)),
      pointers_(std::move(o.pointers_)),
      scratch_(std::move(o.scratch_)),
      zero_(std::move(o.zero_)),
      functions_(std::move(o.functions_)),
      params_(std::move(o.params_)),
      cubin_(std::move(o.cubin_)),
      own_(std::exchange(o.own_, nullptr)),
      used_(o.used_),
      smem_poison_(std::exchange(o.smem_poison_, std::nullopt)) {}

prepared_plan& prepared_plan::operator=(prepared_plan&& o) noexcept {
  if (this != &o) {
    restore_carveout();
    unload_own();
    state_ = o.state_;
    launches_ = std::move(o.launches_);
    calls_ = std::move(o.calls_);
    pointers_ = std::move(o.pointers_);
    scratch_ = std::move(o.scratch_);
    zero_ = std::move(o.zero_);
    functions_ = std::move(o.functions_);
    params_ = std::move(o.params_);
    cubin_ = std::move(o.cubin_);
    own_ = std::exchange(o.own_, nullptr);
    used_ = o.used_;
    smem_poison_ = std::exchange(o.smem_poison_, std::nullopt);
  }
  return *this;
}

prepared_plan::~prepared_plan() {
  restore_carveout();
  unload_own();
}

void prepared_plan::restore_carveout() noexcept {
  // The kernels may belong to a module other plans launch from later: they
  // must not keep the poison's carveout. Best effort, as in any destructor.
  if (smem_poison_ && state_ && state_->usable)
    for (CUfunction f : functions_)
      state_->api->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                      CU_SHAREDMEM_CARVEOUT_DEFAULT);
  smem_poison_.reset();
}

void prepared_plan::unload_own() noexcept {
  // After a fault or a timeout nothing is released (a hung kernel may use it).
  if (own_ && state_ && state_->usable) state_->api->cuModuleUnload(own_);
  own_ = nullptr;
}

expected<void, runtime_error> prepared_plan::reload() {
  if (!cubin_ || !used_) return {};
  auto& s = *state_;
  if (auto u = s.require_usable(); !u) return u;
  CUmodule fresh = nullptr;
  if (auto r = s.check(s.api->cuModuleLoadData(&fresh, cubin_->data()), runtime_error::kind::load_failed,
                       fmt::format("reloading a cubin of {} bytes for a fresh instance of its globals",
                                   cubin_->size()));
      !r)
    return r;
  auto functions = resolve_functions(fresh);
  if (!functions) {
    s.api->cuModuleUnload(fresh);
    return unexpected(functions.error());
  }
  unload_own();
  own_ = fresh;
  functions_ = std::move(*functions);
  used_ = false;
  // Whatever the load queued to initialise the globals is done before the
  // run's start event; the stream is idle here, so this waits for little.
  return s.check(s.api->cuCtxSynchronize(), runtime_error::kind::internal, "cuCtxSynchronize after a module reload");
}

expected<void, runtime_error> prepared_plan::reset_scratch_async() {
  for (std::size_t i = 0; i < scratch_.size(); ++i)
    if (auto z = state_->memset_async(scratch_[i].pointer(), zero_[i] ? 0 : scratch_pattern, scratch_[i].size()); !z)
      return z;
  return {};
}

expected<void, runtime_error> prepared_plan::enqueue() {
  auto& s = *state_;
  if (auto u = s.require_usable(); !u) return u;
  const smem_poison_kernel* poison = nullptr;
  if (smem_poison_) {
    auto k = s.smem_poisoner();  // loaded when the poison was set: this only looks
    if (!k) return unexpected(k.error());
    poison = *k;
  }
  used_ = true;  // even a refused launch may follow launches that ran
  std::size_t next_call = 0;
  auto calls_before = [&](std::size_t launch) -> expected<void, runtime_error> {
    for (; next_call < calls_.size() && calls_[next_call].before_launch <= launch; ++next_call)
      if (auto c = s.blas->enqueue(calls_[next_call], pointers_); !c) return c;
    return {};
  };
  for (std::size_t i = 0; i <= functions_.size(); ++i) {
    if (auto c = calls_before(i); !c) return c;
    if (i == functions_.size()) break;
    const auto& l = launches_[i];
    if (poison)
      if (CUresult r = launch_smem_poison(*s.api, *poison, *smem_poison_, s.stream); r != CUDA_SUCCESS)
        return s.check(r, runtime_error::kind::internal,
                       fmt::format("line {}: launching the shared-memory poison kernel ({} blocks of {} bytes) "
                                   "before '{}'",
                                   l.line, poison->geometry.blocks, poison->geometry.bytes, l.kernel));
    CUresult r = s.api->cuLaunchKernel(functions_[i], l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                                       l.block[2], l.smem_bytes, s.stream, params_[i].data(), nullptr);
    if (r != CUDA_SUCCESS)
      return s.check(r, runtime_error::kind::launch_failed,
                     fmt::format("line {}: launching '{}' with grid ({}, {}, {}) block ({}, {}, {}) smem {}", l.line,
                                 l.kernel, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                 l.smem_bytes));
  }
  return {};
}

expected<double, runtime_error> prepared_plan::timed_run(std::chrono::steady_clock::time_point until,
                                                         duration deadline) {
  using k = runtime_error::kind;
  auto& s = *state_;
  const auto& api = *s.api;
  if (auto u = s.require_usable(); !u) return unexpected(u.error());
  // Released on every path out, before anything waits on the stream. Not
  // for plans that call a library: cuBLAS may wait on the stream inside a
  // call (workspace set-up), which would wait on the gate for ever.
  struct gate {
    context_state& s;
    bool held;
    gate(context_state& st, bool hold) : s(st), held(hold && st.hold()) {}
    ~gate() {
      if (held) s.release();
    }
    gate(const gate&) = delete;  // one hold, one release
    gate& operator=(const gate&) = delete;
  };
  expected<void, runtime_error> launched;
  {
    gate held(s, calls_.empty());
    if (auto r = s.check(api.cuEventRecord(s.start, s.stream), k::internal, "cuEventRecord"); !r)
      return unexpected(r.error());
    launched = enqueue();
    if (!launched && is_sticky(launched.error().what)) return unexpected(launched.error());
    // After a refused launch the ones already queued are still waited for.
    if (auto r = s.check(api.cuEventRecord(s.stop, s.stream), k::internal, "cuEventRecord"); !r)
      return unexpected(r.error());
  }
  if (auto w = s.await(s.stop, until, deadline); !w) return unexpected(w.error());
  if (!launched) return unexpected(launched.error());
  float ms = 0;
  if (auto r = s.check(api.cuEventElapsedTime(&ms, s.start, s.stop), k::internal, "cuEventElapsedTime"); !r)
    return unexpected(r.error());
  return static_cast<double>(ms);
}

}  // namespace detail

expected<run_result, runtime_error> gpu_context::run_plan(const resolved_plan& plan, const module& mod,
                                                          const buffer_pointers& buffers, duration deadline) {
  auto& s = *state_;
  const auto until = std::chrono::steady_clock::now() + deadline;
  auto p = detail::prepared_plan::prepare(*this, plan, mod, buffers);
  if (!p) return unexpected(p.error());
  if (auto z = p->reset_scratch_async(); !z) return unexpected(z.error());
  // The caller's uploads and fills went through the legacy stream, which a
  // non-blocking stream does not wait for.
  if (auto r = s.check(s.api->cuCtxSynchronize(), runtime_error::kind::internal, "cuCtxSynchronize before the plan");
      !r)
    return unexpected(r.error());
  return p->timed_run(until, deadline).transform([](double ms) { return run_result{.elapsed_ms = ms}; });
}

}  // namespace gpu
SPECGEN_END_NAMESPACE
