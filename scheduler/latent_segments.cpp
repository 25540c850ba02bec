#include "scheduler/latent_segments.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/weights/safetensors.h"

namespace wm::sched {
namespace {

int64_t metadata_count(const io::SafetensorsFile& file, const char* key) {
  const auto& meta = file.metadata();
  const auto it = meta.find(key);
  char* end = nullptr;
  const long long n = it == meta.end() ? -1 : std::strtoll(it->second.c_str(), &end, 10);
  if (it == meta.end() || !end || *end != 0 || n < 0) {
    throw Error(file.path() + ": not a latent segment (metadata " + key + " missing or invalid)",
                kExitSoftware);
  }
  return n;
}

// Checks every tensor is [1, C, latent_frames, H, W] float32; returns latent_frames.
int64_t checked_latents(const io::SafetensorsFile& file) {
  const int64_t latents = metadata_count(file, "latent_frames");
  if (file.names().empty()) throw Error(file.path() + ": no tensor", kExitSoftware);
  for (const std::string& name : file.names()) {
    const io::TensorInfo& t = file.info(name);
    if (t.dtype != "F32" || t.shape.size() != 5 || t.shape[0] != 1 || t.shape[2] != latents) {
      throw Error(file.path() + ": tensor '" + name + "' is not [1, C, " + std::to_string(latents) +
                      ", H, W] float32",
                  kExitSoftware);
    }
  }
  return latents;
}

}  // namespace

io::SegmentInfo probe_latent_segment(const std::string& path, int64_t first_frame) {
  io::SafetensorsFile file(path);
  checked_latents(file);
  io::SegmentInfo info;
  info.path = path;
  info.frames = metadata_count(file, "frames");
  info.first_pts = first_frame;
  info.last_pts = first_frame + info.frames - 1;
  return info;
}

int64_t concat_latent_segments(const std::vector<std::string>& segments, const std::string& output,
                               const std::function<void(const std::string&)>& before_rename) {
  if (segments.empty()) throw Error(output + ": no segment to assemble", kExitSoftware);
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;
  int64_t frames = 0, latents = 0;
  for (const std::string& path : segments) {
    files.push_back(std::make_unique<io::SafetensorsFile>(path));
    latents += checked_latents(*files.back());
    frames += metadata_count(*files.back(), "frames");
  }
  const io::SafetensorsFile& first = *files.front();
  // Every tensor of the first segment, in name order ("latent", "latent_logvar": the order a
  // whole run writes them in), [1, C, T, H, W] with T the sum of the segments'.
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<io::TensorEntry> entries;
  for (const std::string& name : first.names()) {
    const std::vector<int64_t> shape = first.info(name).shape;
    const size_t plane = size_t(shape[3] * shape[4]) * sizeof(float);
    std::vector<unsigned char> data(size_t(shape[1]) * size_t(latents) * plane);
    size_t at = 0;
    for (int64_t c = 0; c < shape[1]; ++c) {
      for (const auto& file : files) {
        const io::TensorInfo& t = file->info(name);
        if (t.shape[1] != shape[1] || t.shape[3] != shape[3] || t.shape[4] != shape[4]) {
          throw Error(file->path() + ": tensor '" + name + "' does not match the first segment's",
                      kExitSoftware);
        }
        const size_t n = size_t(t.shape[2]) * plane;
        std::memcpy(data.data() + at, static_cast<const unsigned char*>(t.data) + c * n, n);
        at += n;
      }
    }
    io::TensorEntry entry;
    entry.name = name;
    entry.dtype = "F32";
    entry.shape = {1, shape[1], latents, shape[3], shape[4]};
    entry.data = data.data();
    entry.bytes = data.size();
    buffers.push_back(std::move(data));
    entries.push_back(entry);
  }
  std::map<std::string, std::string> meta = first.metadata();
  meta["frames"] = std::to_string(frames);
  meta["latent_frames"] = std::to_string(latents);
  io::write_safetensors(output, entries, meta, before_rename);
  fs::fsync_path(fs::parent_dir(output));
  return latents;
}

}  // namespace wm::sched
