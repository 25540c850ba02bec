#include "tools/bench_vae_common.h"

#include <sys/resource.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <utility>

#include <chrono>
#include <memory>

#include "parallel/device_worker.h"
#include "parallel/sequence_parallel.h"
#include "src/base/error.h"
#include "src/exec/search_gate.h"
#include "src/models/bench_support.h"

namespace wm::bench {

std::vector<Planar> make_slices(const Planar& latents, int slice) {
  std::vector<Planar> slices;
  for (int t0 = 0; t0 < latents.frames; t0 += slice) {
    const int n = std::min(slice, latents.frames - t0);
    Planar s(latents.channels, n, latents.height, latents.width);
    for (int c = 0; c < latents.channels; ++c) {
      std::copy_n(latents.plane(c, t0), size_t(n) * latents.plane_size(), s.plane(c, 0));
    }
    slices.push_back(std::move(s));
  }
  return slices;
}

int64_t run_slices(const Device& device, ModelSession& session, std::vector<Planar> slices,
                   std::vector<Planar>* outputs, int depth) {
  const bool direct = dynamic_cast<parallel::SequenceParallelSession*>(&session) != nullptr;
  parallel::DeviceWorker& worker = parallel::device_worker(device, 0);
  int64_t frames = 0;
  // As the pipeline does: a slice's output is taken (deferred) after the next slice has been
  // started on the device, so its last copies to the host overlap the next slice's work.
  std::deque<std::function<Planar()>> previous;
  auto take = [&](Planar out) {
    frames += out.frames;
    if (outputs) outputs->push_back(std::move(out));
  };
  for (size_t i = 0; i < slices.size(); ++i) {
    RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.last_slice = i + 1 == slices.size();
    Planar out;
    std::function<Planar()> deferred;
    if (direct) {
      // It queues the slice on its ranks and returns; the output comes when taken.
      ctx.deferred = &deferred;
      out = session.run(std::move(slices[i]), ctx);
    } else {
      ctx.device = worker.context();
      ctx.deferred = &deferred;
      out = worker.call([&] { return session.run(std::move(slices[i]), ctx); });
    }
    while (!previous.empty() && int(previous.size()) >= std::max(1, depth)) {
      take(previous.front()());
      previous.pop_front();
    }
    if (deferred) {
      previous.push_back(std::move(deferred));
    } else {
      take(std::move(out));
    }
  }
  for (auto& later : previous) take(later());
  return frames;
}

std::vector<Device> parse_devices(const std::string& devices, const Device& fallback) {
  if (devices.empty()) return {fallback};
  if (devices == "cpu") return {Device{}};
  std::vector<Device> out;
  size_t at = 0;
  while (at <= devices.size()) {
    const size_t end = std::min(devices.find(',', at), devices.size());
    out.push_back(parse_device("cuda:" + devices.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

nlohmann::ordered_json run_parallel(const ParallelBench& b) {
  const int ranks = std::max(1, b.ranks);
  const size_t n = b.devices.size();
  std::vector<std::shared_ptr<const Model>> models;
  for (const Device& d : b.devices) models.push_back(b.model(d));
  std::vector<parallel::DeviceWorker*> workers;
  for (int r = 0; r < ranks; ++r) {
    // Lane 0 ran the one-device run; the ranks get lanes of their own.
    workers.push_back(&parallel::device_worker(b.devices[size_t(r) % n], 1 + r / int(n)));
  }
  auto open = [&](bool serial) {
    std::vector<std::unique_ptr<ModelSession>> sessions;
    for (int r = 0; r < ranks; ++r) {
      sessions.push_back(models[size_t(r) % n]->open_session(b.devices[size_t(r) % n]));
    }
    parallel::SequenceParallelOptions options;
    options.by = b.rows ? parallel::SplitBy::kRows : parallel::SplitBy::kTime;
    options.whole_slices = b.whole_slices && !b.rows;
    options.serial = serial;
    options.nccl = b.nccl;
    options.pin_cpu = b.pin_cpu;
    parallel::fit_to_model(options, models.front());
    return std::make_unique<parallel::SequenceParallelSession>(std::move(sessions), workers,
                                                               options);
  };
  auto session = open(false);
  // Whole slices: one queued per rank (each rank runs a slice of its own).
  const int depth = b.whole_slices ? std::max(1, ranks - 1) : 1;
  double total = 0, warm = 0;
  int64_t shapes_before = 0, solo_before = 0;
  std::vector<parallel::WorkerStats> before;
  parallel::ExchangeStats exchange_before;
  for (int it = 0; it < b.warmup + b.iters; ++it) {
    std::vector<Planar> slices = b.slices();
    if (it == b.warmup) {
      for (auto* w : workers) before.push_back(w->stats());
      exchange_before = session->exchange_stats();
      solo_before = session->solo_slices();
      for (const Device& d : b.devices) models::reset_peak_device_memory(d);
      shapes_before = exec::search_gate_alone_passes();
    }
    const auto start = std::chrono::steady_clock::now();
    const int64_t frames = run_slices(b.devices[0], *session, std::move(slices), nullptr, depth);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (frames != b.frames_out) {
      throw ModelError("bench: ranks made " + std::to_string(frames) + " frames, expected " +
                       std::to_string(b.frames_out));
    }
    (it >= b.warmup ? total : warm) += seconds;
  }
  const int64_t timed_new_shapes = exec::search_gate_alone_passes() - shapes_before;
  const int64_t solo_slices = session->solo_slices() - solo_before;
  const double iters = double(std::max(1, b.iters));
  const double seconds = total / iters;
  const parallel::ExchangeStats exchange = session->exchange_stats();
  const std::string exchange_kind = session->exchange_kind();
  std::vector<parallel::WorkerStats> after;
  for (auto* w : workers) after.push_back(w->stats());
  // Each device's allocator over the timed runs: retries and new segments there mean the ranks'
  // working sets do not fit side by side in its cache (each retry waits for the whole device).
  nlohmann::ordered_json allocator = nlohmann::ordered_json::array();
  for (const Device& d : b.devices) {
    if (d.kind != Device::Kind::kCuda) continue;
    const models::AllocatorCounts c = models::device_allocator_counts(d);
    nlohmann::ordered_json row;
    row["device"] = d.str();
    row["peak_gpu_gib"] = models::peak_device_memory_mib(d) / 1024.0;
    row["peak_reserved_gib"] = c.peak_reserved_mib / 1024.0;
    row["alloc_retries"] = c.alloc_retries;
    row["segment_allocs"] = c.segment_allocs;
    allocator.push_back(row);
  }
  // After the stats: the traced run is not one of the timed ones.
  nlohmann::ordered_json traced;
  if (!b.trace.empty()) {
    const models::GpuActivity a = models::measure_gpu_activity(
        [&] { run_slices(b.devices[0], *session, b.slices(), nullptr, depth); }, b.trace);
    traced["file"] = a.trace_written ? b.trace : "";
    traced["kernels"] = a.kernels;
    traced["span_ms"] = a.span_ms;
    traced["busy_ms"] = a.busy_ms;
    traced["long_gap_ms"] = a.long_gap_ms;
  }
  session.reset();
  nlohmann::ordered_json out;
  out["split"] = b.rows ? "rows" : b.whole_slices ? "time, whole slices" : "time";
  out["ranks"] = ranks;
  std::string names;
  for (const Device& d : b.devices) names += (names.empty() ? "" : ",") + d.str();
  out["devices"] = names;
  out["exchange"] = exchange_kind;  // what ran (NCCL asked under lazy CUDA loading: in-process)
  out["seconds"] = seconds;
  out["warmup_seconds"] = warm;  // each rank's thread runs cuDNN's search anew (thread-local)
  // Convolution shapes first run on their thread in the timed runs (each a search, when on).
  out["timed_new_shapes"] = timed_new_shapes;
  out["fps"] = double(b.frames_out) / seconds;
  out["speedup"] = b.one_seconds / seconds;
  // Slices run on rank 0 alone: a rank's share of its device could not hold the causal state
  // (SequenceParallelSession::solo_slices; the log says which rank).
  out["solo_slices"] = double(solo_slices) / iters;
  out["exchange_bytes"] = double(exchange.bytes - exchange_before.bytes) / iters;
  out["exchange_messages"] = double(exchange.messages - exchange_before.messages) / iters;
  out["exchange_wait_seconds"] = (exchange.wait_seconds - exchange_before.wait_seconds) / iters;

  // Compute per rank: a time split's, measured: the same run twice more, each rank's part of
  // every slice alone on its device (the ranks one after another), the second timed. The first
  // is the serial session's warm-up: alone on the device a rank plans its chunks from more free
  // memory than beside the others, and each new chunk shape is a cuDNN search on its thread
  // (1080p, 4 ranks sharing an H200, measured in one run: one rank's part took 3.5 s where the
  // others' took 0.9–1.4 s, most likely such searches). A
  // row split's bands exchange rows both ways in every convolution, so they cannot
  // run one after another: its compute is modelled as the one-device time shared by the bands.
  std::vector<double> compute(size_t(ranks), 0.0);
  if (b.scaling && !b.rows) {
    auto serial = open(true);
    run_slices(b.devices[0], *serial, b.slices());
    const std::vector<double> warm = serial->rank_seconds();
    run_slices(b.devices[0], *serial, b.slices());
    compute = serial->rank_seconds();
    for (size_t r = 0; r < compute.size() && r < warm.size(); ++r) compute[r] -= warm[r];
  } else if (b.scaling) {
    const std::vector<Planar> slices = b.slices();
    const int height = slices.empty() ? 1 : slices.front().height;
    const std::vector<int> bands = parallel::split_frames(height, ranks);
    for (size_t r = 0; r < bands.size(); ++r) {
      compute[r] = b.one_seconds * double(bands[r]) / double(height);
    }
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<parallel::RankLoad> loads;
  for (size_t r = 0; r < workers.size(); ++r) {
    const parallel::WorkerStats& s = after[r];
    const parallel::RankExchange none;
    const parallel::RankExchange& now = r < exchange.ranks.size() ? exchange.ranks[r] : none;
    const parallel::RankExchange& then =
        r < exchange_before.ranks.size() ? exchange_before.ranks[r] : none;
    parallel::RankLoad load;
    load.compute_seconds = compute[r];
    load.bytes = double(now.bytes - then.bytes) / iters;
    load.messages = double(now.messages - then.messages) / iters;
    loads.push_back(load);
    const double busy = (s.busy_seconds - before[r].busy_seconds) / iters;
    nlohmann::ordered_json row;
    row["rank"] = r;
    row["device"] = workers[r]->device().str();
    if (b.scaling) {
      row["compute_seconds"] = compute[r];
      row["compute"] = b.rows ? "modelled (band share of one device)" : "measured (alone)";
    }
    row["busy_seconds"] = busy;
    row["idle_seconds"] = std::max(0.0, seconds - busy);
    row["exchange_bytes"] = load.bytes;
    row["exchange_messages"] = load.messages;
    row["exchange_wait_seconds"] = (now.wait_seconds - then.wait_seconds) / iters;
    row["peak_gpu_mib"] = s.peak_memory_mib;
    rows.push_back(row);
  }
  out["per_rank"] = rows;
  if (!allocator.empty()) out["allocator"] = allocator;
  if (b.scaling) out["scaling"] = scaling_model(b.one_seconds, loads, !b.rows);
  if (!traced.is_null()) out["trace"] = traced;
  return out;
}

nlohmann::ordered_json scaling_model(double one_seconds,
                                     const std::vector<parallel::RankLoad>& loads,
                                     bool overlapped) {
  nlohmann::ordered_json out;
  out["one_device_seconds"] = one_seconds;
  out["exchange"] = overlapped ? "beside compute (time split)" : "added to compute (row split)";
  parallel::Link none{"none", 1e300, 0};
  for (const parallel::Link& link : {parallel::nvlink_link(), parallel::pcie5_link(), none}) {
    const double seconds = parallel::predicted_seconds(loads, link, overlapped);
    nlohmann::ordered_json j;
    j["gb_per_s"] = link.bytes_per_second < 1e299 ? link.bytes_per_second / 1e9 : 0.0;
    j["latency_us"] = link.latency_seconds * 1e6;
    j["seconds"] = seconds;
    j["speedup"] = seconds > 0 ? one_seconds / seconds : 0.0;
    out[link.name == "none" ? "no_exchange" : link.name] = j;
  }
  return out;
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // 5: reset the peak resident size to the current one
  clear.flush();
  return bool(clear);
}

}  // namespace wm::bench
