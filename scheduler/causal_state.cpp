#include "scheduler/causal_state.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "scheduler/journal.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/weights/safetensors.h"

namespace wm::sched {

namespace {

constexpr const char* kVersion = "1";

// 64-bit FNV-1a over 8-byte words (then the tail bytes): fast enough for GiB of state.
class Checksum {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h_ = (h_ ^ w) * kPrime;
    }
    for (; i < n; ++i) h_ = (h_ ^ p[i]) * kPrime;
    h_ = (h_ ^ n) * kPrime;
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  std::string hex() const {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// Over the tensors in name order (a file lists them sorted).
std::string checksum_of(const std::vector<StateTensor>& tensors) {
  std::vector<const StateTensor*> sorted;
  for (const StateTensor& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const StateTensor* a, const StateTensor* b) { return a->name < b->name; });
  Checksum c;
  for (const StateTensor* p : sorted) {
    const StateTensor& t = *p;
    c.add(t.name);
    c.add(t.dtype);
    c.add(t.shape.data(), t.shape.size() * sizeof(int64_t));
    const unsigned char layout = t.channels_last ? 1 : 0;
    c.add(&layout, 1);
    c.add(t.bytes.data(), t.bytes.size());
  }
  return c.hex();
}

}  // namespace

int64_t save_causal_state(const std::string& path, const std::vector<StateTensor>& tensors,
                          const std::string& sequence, int64_t next_frame) {
  std::vector<io::TensorEntry> entries;
  std::string channels_last;
  for (const StateTensor& t : tensors) {
    io::TensorEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.data = t.bytes.data();
    e.bytes = t.bytes.size();
    entries.push_back(e);
    if (t.channels_last) channels_last += (channels_last.empty() ? "" : ",") + t.name;
  }
  const std::map<std::string, std::string> meta = {{"wmbatch_state", kVersion},
                                                   {"sequence", sequence},
                                                   {"next_frame", std::to_string(next_frame)},
                                                   {"channels_last", channels_last},
                                                   {"checksum", checksum_of(tensors)}};
  io::write_safetensors(path, entries, meta);
  const auto stamp = stamp_file(path);
  if (!stamp) throw OutputError(path + ": vanished after it was written", kExitIoErr);
  return stamp->size;
}

std::optional<std::vector<StateTensor>> load_causal_state(const std::string& path,
                                                          const std::string& sequence,
                                                          int64_t next_frame, int64_t expected_size,
                                                          std::string* why) {
  auto fail = [&](const std::string& reason) -> std::optional<std::vector<StateTensor>> {
    if (why) *why = reason;
    return std::nullopt;
  };
  const auto stamp = stamp_file(path);
  if (!stamp) return fail("missing");
  if (expected_size >= 0 && stamp->size != expected_size) {
    return fail("size " + std::to_string(stamp->size) + " bytes, " + std::to_string(expected_size) +
                " recorded");
  }
  try {
    io::SafetensorsFile file(path);
    const auto& meta = file.metadata();
    auto value = [&](const char* key) {
      auto it = meta.find(key);
      return it == meta.end() ? std::string() : it->second;
    };
    if (value("wmbatch_state") != kVersion) return fail("not a wmbatch state file");
    if (value("sequence") != sequence) return fail("saved for another input or other settings");
    if (value("next_frame") != std::to_string(next_frame)) {
      return fail("saved before frame " + value("next_frame") + ", not " +
                  std::to_string(next_frame));
    }
    std::map<std::string, bool> channels_last;
    const std::string list = value("channels_last");
    for (size_t at = 0; at < list.size();) {
      size_t comma = list.find(',', at);
      if (comma == std::string::npos) comma = list.size();
      channels_last[list.substr(at, comma - at)] = true;
      at = comma + 1;
    }
    std::vector<StateTensor> out;
    for (const std::string& name : file.names()) {
      const io::TensorInfo& info = file.info(name);
      StateTensor t;
      t.name = name;
      t.dtype = info.dtype;
      t.shape = info.shape;
      t.channels_last = channels_last.count(name) != 0;
      const auto* p = static_cast<const uint8_t*>(info.data);
      t.bytes.assign(p, p + info.bytes);
      out.push_back(std::move(t));
    }
    if (checksum_of(out) != value("checksum")) return fail("checksum mismatch (damaged)");
    return out;
  } catch (const Error& e) {
    return fail(e.what());
  }
}

std::vector<StateTensor> state_part(const std::vector<StateTensor>& all,
                                    const std::string& prefix) {
  std::vector<StateTensor> out;
  for (const StateTensor& t : all) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    StateTensor part = t;
    part.name = t.name.substr(prefix.size());
    out.push_back(std::move(part));
  }
  return out;
}

}  // namespace wm::sched
