#include "tools/bench_vae_common.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <utility>

#include "parallel/device_worker.h"
#include "parallel/sequence_parallel.h"

namespace wm::bench {

int parse_int(const std::string& flag, const std::string& value, int min) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || used == 0 || x < min) {
    throw std::invalid_argument(flag + ": expected an integer >= " + std::to_string(min) +
                                ", got '" + value + "'");
  }
  return x;
}

Device parse_device(const std::string& value) {
  Device d;
  if (value == "cpu") return d;
  if (value == "cuda") {
    d.kind = Device::Kind::kCuda;
    return d;
  }
  if (value.rfind("cuda:", 0) == 0) {
    d.kind = Device::Kind::kCuda;
    d.index = parse_int("--device", value.substr(5), 0);
    return d;
  }
  throw std::invalid_argument("--device: expected cpu or cuda:N, got '" + value + "'");
}

Precision parse_precision(const std::string& value) {
  if (value == "fp32") return Precision::kFloat32;
  if (value == "bf16") return Precision::kBFloat16;
  if (value == "fp16") return Precision::kFloat16;
  throw std::invalid_argument("--dtype: expected fp32, bf16 or fp16, got '" + value + "'");
}

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
                   std::vector<Planar>* outputs) {
  const bool direct = dynamic_cast<parallel::SequenceParallelSession*>(&session) != nullptr;
  parallel::DeviceWorker& worker = parallel::device_worker(device, 0);
  int64_t frames = 0;
  // As the pipeline does: a slice's output is taken (deferred) after the next slice has been
  // started on the device, so its last copies to the host overlap the next slice's work.
  std::function<Planar()> previous;
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
      out = session.run(std::move(slices[i]), ctx);
    } else {
      ctx.device = worker.context();
      ctx.deferred = &deferred;
      out = worker.call([&] { return session.run(std::move(slices[i]), ctx); });
    }
    if (previous) take(std::exchange(previous, nullptr)());
    if (deferred) {
      previous = std::move(deferred);
    } else {
      take(std::move(out));
    }
  }
  if (previous) take(previous());
  return frames;
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
