// tf_autopar native op tracer.
//
// WHY this design: TensorFlow's executors already wrap every kernel in a TraceMe
// ("node_name:OpType") that costs one branch when nobody records. The profiler
// (tf.profiler / ProfilerSession) turns those on, but also starts a thread-pool
// listener (3-4 extra events per Eigen task), memory-allocation events, and at
// stop converts everything to an XSpace proto and writes xplane.pb. We drive the
// recorder underneath directly (tsl::profiler::TraceMeRecorder, exported by
// libtensorflow_framework.so.2), keep the allocation events off with the filter
// mask, and hand the raw events to Python as flat arrays: no proto, no file.
//
// The process-wide profiler lock is taken while recording so that tf.profiler and
// this tracer never steal each other's events.
//
// C ABI only (loaded with ctypes): no Python headers needed to build.

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tsl/profiler/lib/profiler_lock.h"
// TF 2.16 and later ship the recorder under xla/tsl; TF 2.14 and 2.15 under tensorflow/tsl
// (the build adds that folder to the include path), one folder up.
#if __has_include("xla/tsl/profiler/backends/cpu/traceme_recorder.h")
#include "xla/tsl/profiler/backends/cpu/traceme_recorder.h"
#include "xla/tsl/profiler/utils/time_utils.h"
#else
#include "tsl/profiler/backends/cpu/traceme_recorder.h"
#include "tsl/profiler/utils/time_utils.h"
#define TFAP_RECORDER_HAS_NO_FILTER 1  // TF 2.14's recorder takes no filter mask: all events at the level
#endif

namespace {

using tsl::profiler::TraceMeRecorder;

constexpr int kAbiVersion = 1;

// Everything one Stop() returned, flattened.
struct Result {
  std::vector<std::string> names;           // interned event names, "#args#" stripped
  std::vector<std::string> thread_names;    // per thread index
  std::vector<int64_t> thread_ids;          // per thread index
  std::vector<int64_t> events;              // 4 per event: name_id, thread_idx, start_ns, end_ns
  std::string names_blob, threads_blob;     // the names joined by '\0' (one ctypes call each)
};

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    out.append(s);
    out.push_back('\0');
  }
  return out;
}

std::mutex g_mu;
std::optional<tsl::profiler::ProfilerLock> g_lock;
bool g_recording = false;

// "name#k=v,...#" -> "name" (TraceMeEncode puts arguments after the first '#').
std::string_view BaseName(const std::string& raw) {
  std::string_view s(raw);
  size_t p = s.find('#');
  return p == std::string_view::npos ? s : s.substr(0, p);
}

class Interner {
 public:
  explicit Interner(std::vector<std::string>* out) : out_(out) {}
  int64_t Id(std::string_view s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    out_->emplace_back(s);
    int64_t id = static_cast<int64_t>(out_->size()) - 1;
    // Key views point into the deque-like storage of `owned_` so they stay valid.
    owned_.emplace_back(s);
    ids_.emplace(std::string_view(owned_.back()), id);
    return id;
  }

 private:
  std::vector<std::string>* out_;
  std::deque<std::string> owned_;
  std::unordered_map<std::string_view, int64_t> ids_;
};

Result* Convert(TraceMeRecorder::Events&& all) {
  auto* r = new Result();
  Interner names(&r->names);
  size_t total = 0;
  for (const auto& t : all) total += t.events.size();
  r->events.reserve(4 * total);
  // Split activities (ActivityStart/ActivityEnd) may end on another thread: pair them by id.
  struct Open {
    int64_t thread_idx;
    int64_t name_id;
    int64_t start;
  };
  std::unordered_map<int64_t, Open> open;
  for (auto& t : all) {
    const int64_t ti = static_cast<int64_t>(r->thread_names.size());
    r->thread_names.push_back(t.thread.name);
    r->thread_ids.push_back(t.thread.tid);
    for (auto& e : t.events) {
      if (e.IsComplete()) {
        if (e.end_time < e.start_time) continue;
        r->events.push_back(names.Id(BaseName(e.name)));
        r->events.push_back(ti);
        r->events.push_back(e.start_time);
        r->events.push_back(e.end_time);
      } else if (e.IsStart()) {
        open[e.ActivityId()] = Open{ti, names.Id(BaseName(e.name)), e.start_time};
      } else if (e.IsEnd()) {
        auto it = open.find(e.ActivityId());
        if (it == open.end()) continue;  // its start predates Start(): dropped, as the profiler does
        if (e.end_time >= it->second.start) {
          r->events.push_back(it->second.name_id);
          r->events.push_back(it->second.thread_idx);
          r->events.push_back(it->second.start);
          r->events.push_back(e.end_time);
        }
        open.erase(it);
      }
    }
  }
  r->names_blob = Join(r->names);
  r->threads_blob = Join(r->thread_names);
  return r;
}

}  // namespace

extern "C" {

int tfap_abi_version() { return kAbiVersion; }

int64_t tfap_now_ns() { return tsl::profiler::GetCurrentTimeNanos(); }

int tfap_is_recording() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_recording ? 1 : 0;
}

// 0: recording; 1: this library is already recording; 2: another profiler session
// (tf.profiler) holds the process-wide lock; 3: the recorder refused to start.
int tfap_start(int level, uint64_t filter_mask) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_recording) return 1;
  auto lock = tsl::profiler::ProfilerLock::Acquire();
  if (!lock.ok()) return 2;
#ifdef TFAP_RECORDER_HAS_NO_FILTER
  (void)filter_mask;
  if (!TraceMeRecorder::Start(level)) return 3;  // lock released on return
#else
  if (!TraceMeRecorder::Start(level, filter_mask)) return 3;  // lock released on return
#endif
  g_lock.emplace(*std::move(lock));
  g_recording = true;
  return 0;
}

// Stops recording and returns the events (free with tfap_result_free), or null when
// not recording.
void* tfap_stop() {
  TraceMeRecorder::Events events;
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!g_recording) return nullptr;
    events = TraceMeRecorder::Stop();
    g_recording = false;
    g_lock.reset();
  }
  return Convert(std::move(events));
}

int64_t tfap_result_num_events(void* r) { return static_cast<int64_t>(static_cast<Result*>(r)->events.size() / 4); }
const int64_t* tfap_result_events(void* r) { return static_cast<Result*>(r)->events.data(); }
int64_t tfap_result_num_names(void* r) { return static_cast<int64_t>(static_cast<Result*>(r)->names.size()); }
// Names joined by '\0' (tfap_result_num_names of them); *size gets the byte length.
const char* tfap_result_names(void* r, int64_t* size) {
  auto* res = static_cast<Result*>(r);
  *size = static_cast<int64_t>(res->names_blob.size());
  return res->names_blob.data();
}
int64_t tfap_result_num_threads(void* r) { return static_cast<int64_t>(static_cast<Result*>(r)->thread_names.size()); }
const char* tfap_result_thread_names(void* r, int64_t* size) {
  auto* res = static_cast<Result*>(r);
  *size = static_cast<int64_t>(res->threads_blob.size());
  return res->threads_blob.data();
}
const int64_t* tfap_result_thread_ids(void* r) { return static_cast<Result*>(r)->thread_ids.data(); }
void tfap_result_free(void* r) { delete static_cast<Result*>(r); }

}  // extern "C"
