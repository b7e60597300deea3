// CUPTI through dlopen: every function is declared by cupti_activity.h, so the
// types always match the header we compile against; only the leading fields
// common to every kernel record version are read.
#include "cupti.hpp"

#include "dynlib.hpp"

#include <cupti_activity.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

#define SPECGEN_CUPTI_STRINGIFY_(x) #x
#define SPECGEN_CUPTI_STRINGIFY(x) SPECGEN_CUPTI_STRINGIFY_(x)

#define SPECGEN_CUPTI_FUNCTIONS(X)                                                                             \
  X(cuptiGetResultString) X(cuptiActivityRegisterCallbacks) X(cuptiActivityEnable) X(cuptiActivityDisable)   \
  X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord) X(cuptiGetTimestamp)
// Optional: the deprecated cuptiGetStreamId is the fallback of the first.
#define SPECGEN_CUPTI_OPTIONAL(X) X(cuptiGetStreamIdEx) X(cuptiGetStreamId) X(cuptiActivityGetNumDroppedRecords)

struct cupti_api {
#define SPECGEN_CUPTI_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SPECGEN_CUPTI_FUNCTIONS(SPECGEN_CUPTI_MEMBER)
  SPECGEN_CUPTI_OPTIONAL(SPECGEN_CUPTI_MEMBER)
#undef SPECGEN_CUPTI_MEMBER
  std::string library;
};

expected<cupti_api> open_cupti(const std::vector<std::string>& candidates) {
  // Never closed: CUPTI keeps threads and callbacks for the process's life.
  const auto opened = open_first(candidates);
  if (!opened.handle)
    return unexpected(error{fmt::format("libcupti not found ({} could not be loaded: {}); set SPECGEN_CUPTI_LIBRARY "
                                        "to the path of libcupti.so.{}",
                                        opened.tried, opened.last_error, CUDA_VERSION / 1000)});
  cupti_api api;
  api.library = opened.loaded;
  std::string missing;
#define SPECGEN_CUPTI_RESOLVE(fn) \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(opened.handle, SPECGEN_CUPTI_STRINGIFY(fn)));
  SPECGEN_CUPTI_FUNCTIONS(SPECGEN_CUPTI_RESOLVE)
  SPECGEN_CUPTI_OPTIONAL(SPECGEN_CUPTI_RESOLVE)
#undef SPECGEN_CUPTI_RESOLVE
#define SPECGEN_CUPTI_CHECK(fn) \
  if (!api.fn) missing += missing.empty() ? SPECGEN_CUPTI_STRINGIFY(fn) : ", " SPECGEN_CUPTI_STRINGIFY(fn);
  SPECGEN_CUPTI_FUNCTIONS(SPECGEN_CUPTI_CHECK)
#undef SPECGEN_CUPTI_CHECK
  if (!api.cuptiGetStreamIdEx && !api.cuptiGetStreamId) missing += missing.empty() ? "cuptiGetStreamIdEx" : ", cuptiGetStreamIdEx";
  if (!missing.empty()) return unexpected(error{fmt::format("{} lacks {}", opened.loaded, missing)});
  return api;
}

std::string result_text(const cupti_api& api, CUptiResult r) {
  const char* text = nullptr;
  if (api.cuptiGetResultString(r, &text) != CUPTI_SUCCESS || !text) return fmt::format("CUptiResult {}", static_cast<int>(r));
  return text;
}

/// Where the buffer callbacks put what they find; CUPTI may call them from
/// its own thread.
struct collector {
  std::mutex mutex;
  const cupti_api* api = nullptr;
  std::vector<kernel_record> records;
};

collector& the_collector() {
  static collector c;
  return c;
}

constexpr std::size_t buffer_bytes = std::size_t{1} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI requires 8-byte alignment; a null buffer makes it drop records.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, buffer_bytes));
  *size = *buffer ? buffer_bytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  collector& c = the_collector();
  std::vector<kernel_record> found;
  if (buffer && c.api) {
    CUpti_Activity* record = nullptr;
    while (c.api->cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      // The leading fields are the same in every kernel record version.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      found.push_back({k->name ? std::string(k->name) : std::string(), k->start, k->end, k->streamId});
    }
  }
  std::free(buffer);
  std::lock_guard lock(c.mutex);
  for (auto& f : found) c.records.push_back(std::move(f));
}

/// libcupti loaded and the callbacks registered, once per process.
const expected<const cupti_api*>& load_cupti() {
  static const expected<const cupti_api*> loaded =
      open_cupti(cupti_candidates()).and_then([](cupti_api api) -> expected<const cupti_api*> {
        static const cupti_api kept = std::move(api);
        the_collector().api = &kept;
        if (CUptiResult r = kept.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS)
          return unexpected(error{fmt::format("cuptiActivityRegisterCallbacks failed: {}", result_text(kept, r))});
        return &kept;
      });
  return loaded;
}

}  // namespace

std::vector<std::string> cupti_candidates() {
  if (const char* forced = std::getenv("SPECGEN_CUPTI_LIBRARY"); forced && *forced) return {forced};
  const std::string so = fmt::format("libcupti.so.{}", CUDA_VERSION / 1000);
  std::vector<std::string> out{so,
                               "libcupti.so",
                               "/usr/local/cuda/extras/CUPTI/lib64/" + so,
                               "/usr/local/cuda/lib64/" + so,
                               "/usr/local/cuda/lib/" + so};
#ifdef SPECGEN_CUPTI_FOUND_LIBRARY
  out.emplace_back(SPECGEN_CUPTI_FOUND_LIBRARY);
#endif
#ifdef SPECGEN_CUDA_TOOLKIT_LIBRARY_DIR
  out.push_back(std::string(SPECGEN_CUDA_TOOLKIT_LIBRARY_DIR) + "/" + so);
#endif
  return out;
}

expected<std::string> probe_cupti(const std::vector<std::string>& candidates) {
  return open_cupti(candidates).transform([](const cupti_api& api) { return api.library; });
}

expected<std::unique_ptr<cupti_activity>> cupti_activity::start(CUcontext context, CUstream stream) {
  const auto& loaded = load_cupti();
  if (!loaded) return unexpected(loaded.error());
  const cupti_api& api = **loaded;
  {
    std::lock_guard lock(the_collector().mutex);
    the_collector().records.clear();
  }
  if (CUptiResult r = api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS)
    return unexpected(error{fmt::format("cuptiActivityEnable(CONCURRENT_KERNEL) failed: {} (another profiler attached, "
                                        "or profiling not permitted to this user)",
                                        result_text(api, r))});
  std::unique_ptr<cupti_activity> a(new cupti_activity(context, 0));  // from here the destructor disables it
  std::uint32_t id = 0;
  CUptiResult r = api.cuptiGetStreamIdEx ? api.cuptiGetStreamIdEx(context, stream, 0, &id)
                                         : api.cuptiGetStreamId(context, stream, &id);
  if (r != CUPTI_SUCCESS) return unexpected(error{fmt::format("cuptiGetStreamIdEx failed: {}", result_text(api, r))});
  a->stream_id_ = id;
  return a;
}

cupti_activity::~cupti_activity() {
  const cupti_api& api = **load_cupti();
  api.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(the_collector().mutex);
  the_collector().records.clear();
}

expected<std::vector<kernel_record>> cupti_activity::collect() {
  const cupti_api& api = **load_cupti();
  // Not under the lock: the flush may call buffer_completed on this thread.
  if (CUptiResult r = api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); r != CUPTI_SUCCESS)
    return unexpected(error{fmt::format("cuptiActivityFlushAll failed: {}", result_text(api, r))});
  std::lock_guard lock(the_collector().mutex);
  return std::exchange(the_collector().records, {});
}

std::uint64_t cupti_activity::timestamp() const {
  std::uint64_t t = 0;
  if ((*load_cupti())->cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return 0;
  return t;
}

std::uint64_t cupti_activity::dropped() {
  const cupti_api& api = **load_cupti();
  if (!api.cuptiActivityGetNumDroppedRecords) return 0;
  std::uint64_t total = 0;
  for (CUcontext c : {context_, static_cast<CUcontext>(nullptr)}) {  // the context's queue, then the global one
    std::size_t n = 0;
    if (api.cuptiActivityGetNumDroppedRecords(c, stream_id_, &n) == CUPTI_SUCCESS) total += n;
  }
  return total;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
