// The bodies of the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp), shared with the unit test that
// replays the seed corpus and every crasher found so far (tests/unit/test_fuzz_inputs.cpp), so a
// fixed finding stays fixed in the normal and the sanitizer builds too.
//
// Each function feeds one input to the real code and returns "" when it behaved, or what broke
// the contract: a bad input must end in a wm::Error whose one-line message starts with the file
// it is about (docs/exit-codes.md). Crashes, leaks and undefined behaviour are for the sanitizers
// to catch; any other exception escapes to the caller.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <filesystem>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "src/base/error.h"
#include "src/job_spec.h"
#include "src/weights/safetensors.h"
#include "src/weights/torch_pickle.h"
#include "tests/support/stored_zip.h"
#include "watch/http_request.h"
#include "watch/watch_spec.h"

namespace wm::fuzz {

// WM_FUZZ_LOG=1 prints what each input did (accepted, or the error message).
inline bool verbose() {
  static const bool on = std::getenv("WM_FUZZ_LOG") != nullptr;
  return on;
}

// A file holding the current input, for the readers that take a path: one per process, on tmpfs
// when there is one, removed at exit. No extension, so libavformat probes the content alone.
inline const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("WM_FUZZ_TMPDIR");
    std::string base = dir && *dir ? dir : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    return base + "/wm-fuzz-" + std::to_string(getpid()) + "-input";
  }();
  static const bool cleanup = [] { return std::atexit([] { ::unlink(path.c_str()); }) == 0; }();
  (void)cleanup;
  return path;
}

inline void write_scratch(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(scratch_path().c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
}

// "" when `e` keeps the error contract for a file named `path`, else what is wrong.
inline std::string check_error(const wm::Error& e, const std::string& path) {
  const std::string what = e.what();
  if (verbose()) std::fprintf(stderr, "rejected: %s\n", what.c_str());
  if (what.rfind(path, 0) != 0) return "message does not start with the path: " + what;
  for (const char c : what) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      return "message is not one printable line: " + what;
    }
  }
  if (e.exit_code() == 0) return "exit code 0 for an error: " + what;
  return "";
}

// Job-file text → parse_job_text (YAML and validation), then expand_output on every job accepted.
inline std::string job_spec(const uint8_t* data, size_t size) {
  const std::string path = "/fuzz/jobs/job.yaml";
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<wm::JobSpec> jobs;
  try {
    jobs = wm::parse_job_text(text, path);
  } catch (const wm::Error& e) {
    return check_error(e, path);
  }
  if (verbose()) std::fprintf(stderr, "accepted: %zu jobs\n", jobs.size());
  for (const wm::JobSpec& job : jobs) {
    for (const char* input : {"clips/a.mp4", "/abs/b c.mkv"}) {
      try {
        wm::expand_output(job.output, input, job.name, job.dir);
      } catch (const wm::Error& e) {
        // Validation accepted the template, so expanding it works or names a problem of this
        // input (the output would be the input itself).
        if (e.exit_code() != wm::kExitDataErr) return std::string("expand_output: ") + e.what();
      }
    }
  }
  return "";
}

// Bytes as a .safetensors file → SafetensorsFile; every tensor accepted is read in full (ASan
// catches a TensorInfo pointing outside the mapping) and its size checked.
inline std::string safetensors(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  write_scratch(data, size);
  try {
    const wm::io::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const std::string& name : file.names()) {
      const wm::io::TensorInfo& t = file.info(name);
      size_t expected = wm::io::safetensors_dtype_size(t.dtype);
      for (int64_t d : t.shape) expected *= size_t(d);  // no overflow: the reader checked
      if (t.bytes != expected) return "tensor '" + name + "': bytes do not match dtype and shape";
      const auto* bytes = static_cast<const unsigned char*>(t.data);
      for (size_t i = 0; i < t.bytes; ++i) sum += bytes[i];
    }
    for (const auto& kv : file.metadata()) sum += unsigned(kv.first.size() + kv.second.size());
    if (verbose()) {
      std::fprintf(stderr, "accepted: %zu tensors (sum %u)\n", file.names().size(), sum);
    }
  } catch (const wm::Error& e) {
    return check_error(e, path);
  }
  return "";
}

// Frames decoded per input: enough for several packets, GOP boundaries and the end-of-file checks
// of short inputs, few enough that one input stays far below the per-input timeout.
constexpr int kMaxFrames = 24;
// Larger frames are opened but not decoded: an 8K frame is fine for wmbatch, but libFuzzer's
// memory limit is not the product's.
constexpr int64_t kMaxPixels = int64_t(4096) * 2304;

// Bytes as a video file → VideoReader (probing, demuxing, decoding, the truncation checks,
// timestamps, RGB conversion), then a seek (the farm's chunked reads) and a few more frames.
inline std::string video_reader(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  write_scratch(data, size);
  try {
    wm::io::ReaderOptions options;
    options.threads = 1;           // deterministic: libFuzzer expects the same run on a replay
    options.max_error_rate = 0.5;  // also exercise the tolerated-error path
    wm::io::VideoReader reader(path, options);
    const wm::io::VideoInfo& info = reader.info();
    if (int64_t(info.width) * info.height > kMaxPixels) return "";
    wm::io::VideoFrame frame;
    int frames = 0;
    while (frames < kMaxFrames && reader.read(frame)) ++frames;
    if (verbose()) {
      std::fprintf(stderr, "accepted: %s %dx%d, %d frames read, %lld decode errors\n",
                   reader.decoder_name().c_str(), info.width, info.height, frames,
                   static_cast<long long>(reader.decode_errors()));
    }
    if (frames >= 2) {
      reader.seek_to_frame(frames / 2);
      for (int i = 0; i < 3 && reader.read(frame); ++i) {
      }
    }
  } catch (const wm::Error& e) {
    return check_error(e, path);
  }
  return "";
}

// A folder for WATCH.yaml inputs, one per process, removed at exit: the WATCH.yaml's own place,
// with the folders the seeds name (in, in2, a, b, c, out) and a job file (job.yaml), so that
// inputs get past the folder checks to the jobs, templates and loops.
inline const std::string& watch_scratch_dir() {
  static const std::string dir = [] {
    const std::string d = scratch_path() + "-watch";
    for (const char* sub : {"in/sub", "in2", "a", "b", "c", "out"}) {
      std::filesystem::create_directories(d + "/" + sub);
    }
    FILE* f = std::fopen((d + "/job.yaml").c_str(), "wb");
    if (!f) std::abort();
    std::fputs("task: upscale\nmodel: {kind: lanczos, scale: 2}\noutput: out/{stem}_x2.mp4\n", f);
    std::fclose(f);
    return d;
  }();
  static const bool cleanup = [] {
    return std::atexit([] {
             std::error_code ec;
             std::filesystem::remove_all(dir, ec);
           }) == 0;
  }();
  (void)cleanup;
  return dir;
}

// WATCH.yaml text → parse_watch_text (its keys, each job through the job parser, the output
// templates, the loop check); then, for every entry accepted, output_for and source_allowed of a
// file in its folder and one below it, and entry_for of the output.
inline std::string watch_spec(const uint8_t* data, size_t size) {
  const std::string& dir = watch_scratch_dir();
  const std::string path = dir + "/WATCH.yaml";
  const std::string text(reinterpret_cast<const char*>(data), size);
  wm::watch::WatchSpec spec;
  try {
    spec = wm::watch::parse_watch_text(text, path);
  } catch (const wm::Error& e) {
    // The problem is in WATCH.yaml or in a job file it names: both in `dir`.
    return check_error(e, dir + "/");
  }
  if (verbose()) std::fprintf(stderr, "accepted: %zu entries\n", spec.entries.size());
  for (const wm::watch::WatchEntry& entry : spec.entries) {
    for (const char* name : {"/a.mp4", "/sub/b c%03d.mkv"}) {
      const std::string input = entry.folder + name;
      wm::watch::source_allowed(entry, input);
      try {
        const std::string out = wm::watch::output_for(entry, input);
        if (out.empty() || out.front() != '/') return "output_for: not an absolute path: " + out;
        wm::watch::entry_for(spec, out);
      } catch (const wm::Error& e) {
        // Validation accepted the template: expanding works, or the output is the input itself.
        if (e.exit_code() != wm::kExitDataErr) return std::string("output_for: ") + e.what();
      }
    }
  }
  return "";
}

// Bytes a client sends → parse_http_request, whole and as it arrives (split at a point the input
// picks): the same verdict both ways, and a request it accepts is a GET-able one (a token method,
// a path that starts with '/' or is "*").
inline std::string http_request(const uint8_t* data, size_t size) {
  constexpr size_t kMaxHead = 8192;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  wm::watch::HttpRequest whole;
  size_t head = 0;
  const wm::watch::HttpParse verdict = wm::watch::parse_http_request(bytes, kMaxHead, whole, &head);
  if (verbose()) std::fprintf(stderr, "verdict %d\n", static_cast<int>(verdict));
  if (verdict == wm::watch::HttpParse::kDone) {
    if (head == 0 || head > size || head > kMaxHead) return "head size out of range";
    if (whole.method.empty() || whole.path.empty()) return "accepted without a method or path";
    if (whole.path != "*" && whole.path.front() != '/') return "path not absolute: " + whole.path;
    if (wm::watch::http_head_end(bytes, 0) != head) return "head end differs from the parse";
  }
  // Arriving in two parts: the end of the head is found on the second look, never missed.
  const size_t split = size ? data[0] % (size + 1) : 0;
  const size_t first = wm::watch::http_head_end(bytes.substr(0, split), 0);
  const size_t end =
      first != std::string_view::npos ? first : wm::watch::http_head_end(bytes, split);
  if (end != wm::watch::http_head_end(bytes, 0)) return "incremental head end differs";
  return "";
}

// Bytes as a torch.save checkpoint → TorchCheckpoint (the restricted unpickler; its bounds on
// depth, values and time). An input that starts like a zip ("PK\3\4") is the whole file; any
// other is the pickle (data.pkl) of a checkpoint whose storages "0".."3" hold 32 KiB each, so
// the mutations reach the unpickler instead of breaking the zip. Every tensor accepted has its
// first and last reachable element read.
inline std::string torch_pickle(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.rfind("PK\x03\x04", 0) == 0) {
    write_scratch(data, size);
  } else {
    std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", bytes},
                                                                {"archive/version", "3\n"}};
    for (int i = 0; i < 4; ++i) {
      entries.emplace_back("archive/data/" + std::to_string(i), std::string(32 << 10, char(i)));
    }
    const std::string zip = wm::test::stored_zip(entries);
    write_scratch(reinterpret_cast<const uint8_t*>(zip.data()), zip.size());
  }
  try {
    const wm::io::TorchCheckpoint checkpoint(path);
    unsigned sum = 0;
    auto touch = [&](const wm::io::TorchTensor& t) {
      int64_t last = 0;
      for (size_t i = 0; i < t.shape.size(); ++i) {
        if (t.shape[i] == 0) return;
        last += (t.shape[i] - 1) * t.strides[i];
      }
      const auto* first = static_cast<const unsigned char*>(t.data);
      for (size_t b = 0; b < t.element_size; ++b) {
        sum += first[b] + first[size_t(last) * t.element_size + b];
      }
    };
    for (const auto& kv : checkpoint.tensors()) touch(kv.second);
    size_t nested = 0;
    for (const auto& kv : checkpoint.top_level()) {
      for (const auto& inner : checkpoint.dict(kv.first)) touch(inner.second), ++nested;
    }
    if (verbose()) {
      std::fprintf(stderr, "accepted: %zu top-level keys, %zu nested tensors (sum %u)\n",
                   checkpoint.top_level().size(), nested, sum);
    }
  } catch (const wm::Error& e) {
    return check_error(e, path);
  }
  return "";
}

// Pictures larger than this are opened but not decoded (libFuzzer's memory limit).
constexpr int64_t kMaxImagePixels = int64_t(1024) * 1024;

// Bytes as an image file (PNG, JPEG, TIFF, BMP, ...: libavformat probes the content) →
// VideoReader (declared sizes, palettes, EXIF orientation, a pixel format that changes between
// frames), then the first frame written as a PNG by VideoWriter with the source's properties
// (the output pixel format chosen from the source's, alpha, rotation turned into the pixels).
inline std::string image_header(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  write_scratch(data, size);
  const std::string output = path + ".png";
  try {
    wm::io::ReaderOptions options;
    options.threads = 1;
    wm::io::VideoReader reader(path, options);
    const wm::io::VideoInfo& info = reader.info();
    if (int64_t(info.width) * info.height > kMaxImagePixels) return "";
    std::vector<wm::io::VideoFrame> frames(1);
    if (!reader.read(frames[0])) return "";
    for (wm::io::VideoFrame next; frames.size() < 3 && reader.read(next);) {
      frames.push_back(std::move(next));
    }
    wm::io::WriterConfig config;
    config.path = output;
    config.width = frames[0].image.width;
    config.height = frames[0].image.height;
    config.time_base =
        info.time_base.num > 0 && info.time_base.den > 0 ? info.time_base : wm::io::Rational{1, 25};
    config.frame_rate = {25, 1};
    config.source = info;
    config.encode.codec = "png";
    config.encode.copy_audio = config.encode.copy_subtitles = config.encode.copy_other = false;
    config.encode.threads = 1;
    config.encode.convert_workers = 1;
    wm::io::VideoWriter writer(config);
    writer.write(frames[0]);
    writer.finish();
    ::unlink(output.c_str());
    if (verbose()) {
      std::fprintf(stderr, "accepted: %s %dx%d %s, %zu frames read, written as PNG\n",
                   reader.decoder_name().c_str(), info.width, info.height, info.pix_fmt.c_str(),
                   frames.size());
    }
  } catch (const wm::Error& e) {
    ::unlink(output.c_str());
    return check_error(e, path);
  }
  return "";
}

// For the harnesses: a broken contract aborts, so libFuzzer keeps the input.
inline int require(const std::string& problem) {
  if (problem.empty()) return 0;
  std::fprintf(stderr, "contract broken: %s\n", problem.c_str());
  std::abort();
}

}  // namespace wm::fuzz
