#include "scheduler/segment_encode.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "io/segments.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"

namespace wm::sched {
namespace {

// The extension of `path` with its dot ("" when none).
std::string extension_of(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? std::string() : name.substr(dot);
}

}  // namespace

void WriterPlaneSink::write(const io::VideoFrame& timing, const io::YuvImage& image) {
  const Clock::time_point start = Clock::now();
  writer_.write_planes(timing, image);
  busy_ += seconds_since(start);
}

struct SegmentEncoder::Impl {
  struct Item {
    io::VideoFrame timing;  // index, pts, duration (no image)
    io::YuvImage image;
    int64_t segment = 0;
  };
  struct Instance {
    std::thread thread;
    std::deque<Item> queue;
    std::condition_variable changed;  // an item queued or taken, or closed
    double busy = 0;                  // under `mutex`
  };

  io::WriterConfig config;
  SegmentOptions options;
  std::string folder;
  std::mutex mutex;
  std::vector<std::unique_ptr<Instance>> instances;
  bool closed = false;
  bool aborted = false;        // the destructor before finish(): queued frames are dropped
  std::exception_ptr failure;  // the first error of an instance
  std::map<int64_t, std::string> finished;  // segment → its file, once written
  int64_t frames_in = 0;
  int64_t segments_started = 0;
  double flush = 0, join = 0;
  bool joined = false;

  Impl(const io::WriterConfig& c, const SegmentOptions& o) : config(c), options(o) {
    options.instances = std::max(1, options.instances);
    options.segment_frames = std::max(1, options.segment_frames);
    // A private folder beside the output (made exclusively, mode 0700), so the segments are
    // on the output's file system and no name in it can have been planted.
    std::string pattern = fs::parent_dir(config.path) + "/.wmbatch-segments-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      throw OutputError(config.path + ": cannot create a folder for its encoder segments: " +
                            std::strerror(errno),
                        kExitCantCreat);
    }
    folder = pattern;
    for (int i = 0; i < options.instances; ++i) {
      instances.push_back(std::make_unique<Instance>());
    }
    for (int i = 0; i < options.instances; ++i) {
      instances[size_t(i)]->thread = std::thread([this, i] { run(*instances[size_t(i)]); });
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      aborted = true;
    }
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      closed = true;
      for (auto& instance : instances) instance->changed.notify_all();
    }
    for (auto& instance : instances) {
      if (instance->thread.joinable()) instance->thread.join();
    }
  }

  std::string segment_path(int64_t segment) const {
    char name[32];
    std::snprintf(name, sizeof(name), "/%06lld", static_cast<long long>(segment));
    return folder + name + extension_of(config.path);
  }

  io::WriterConfig segment_config(int64_t segment) const {
    io::WriterConfig c = config;
    c.path = segment_path(segment);
    c.source_path.clear();
    c.encode.copy_audio = false;
    c.encode.copy_subtitles = false;
    c.encode.copy_other = false;
    c.exact_timescale = true;  // the join keeps every pts exact (farm segments do the same)
    return c;
  }

  // An instance: takes its segments' frames in order, one VideoWriter per segment.
  void run(Instance& self) {
    std::unique_ptr<io::VideoWriter> writer;
    int64_t current = -1;
    try {
      for (;;) {
        Item item;
        {
          std::unique_lock<std::mutex> lock(mutex);
          self.changed.wait(lock, [&] { return !self.queue.empty() || closed || failure; });
          if (failure || aborted || self.queue.empty()) break;
          item = std::move(self.queue.front());
          self.queue.pop_front();
          self.changed.notify_all();
        }
        const Clock::time_point start = Clock::now();
        if (item.segment != current) {
          if (writer) finish_segment(std::move(writer), current);
          writer = std::make_unique<io::VideoWriter>(segment_config(item.segment));
          current = item.segment;
        }
        writer->write_planes(item.timing, item.image);
        item.image = io::YuvImage();  // the picture's block, once the encoder has let it go
        std::lock_guard<std::mutex> lock(mutex);
        self.busy += seconds_since(start);
      }
      if (writer) {
        bool ok = false;
        {
          std::lock_guard<std::mutex> lock(mutex);
          ok = !failure && !aborted && closed;
        }
        if (ok) {
          const Clock::time_point start = Clock::now();
          finish_segment(std::move(writer), current);
          std::lock_guard<std::mutex> lock(mutex);
          self.busy += seconds_since(start);
          flush = std::max(flush, seconds_since(start));
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
      for (auto& instance : instances) {
        instance->queue.clear();
        instance->changed.notify_all();
      }
    }
  }

  void finish_segment(std::unique_ptr<io::VideoWriter> writer, int64_t segment) {
    writer->finish();
    std::lock_guard<std::mutex> lock(mutex);
    finished[segment] = segment_path(segment);
  }

  void write(const io::VideoFrame& timing, const io::YuvImage& image) {
    const int64_t segment = frames_in / options.segment_frames;
    Instance& target = *instances[size_t(segment % options.instances)];
    std::unique_lock<std::mutex> lock(mutex);
    target.changed.wait(lock, [&] {
      return failure || closed || int64_t(target.queue.size()) < options.segment_frames;
    });
    if (failure) std::rethrow_exception(failure);
    if (closed) throw Error(config.path + ": segment encoder already finished", kExitSoftware);
    Item item;
    item.timing.index = timing.index;
    item.timing.pts = timing.pts;
    item.timing.duration = timing.duration;
    item.image = image;
    item.segment = segment;
    target.queue.push_back(std::move(item));
    target.changed.notify_all();
    ++frames_in;
    segments_started = segment + 1;
  }

  int64_t finish() {
    stop();
    if (failure) std::rethrow_exception(failure);
    if (options.cancel && options.cancel->load()) throw Cancelled(config.path + ": interrupted");
    const Clock::time_point start = Clock::now();
    int64_t written = 0;
    if (finished.empty()) {
      // No frame at all: the output as one writer would leave it.
      io::VideoWriter empty(config);
      written = empty.finish();
    } else {
      io::ConcatConfig concat;
      for (const auto& [segment, path] : finished) concat.segments.push_back(path);
      if (int64_t(concat.segments.size()) != segments_started) {
        throw Error(config.path + ": " + std::to_string(concat.segments.size()) + " of " +
                        std::to_string(segments_started) + " encoder segments written",
                    kExitSoftware);
      }
      concat.output = config.path;
      concat.source_path = config.source_path;
      concat.copy_audio = config.encode.copy_audio;
      concat.copy_subtitles = config.encode.copy_subtitles;
      concat.copy_other = config.encode.copy_other;
      concat.cancel = options.cancel;
      written = io::concat_segments(concat);
    }
    join = seconds_since(start);
    joined = true;
    return written;
  }
};

SegmentEncoder::SegmentEncoder(const io::WriterConfig& config, const SegmentOptions& options)
    : impl_(std::make_unique<Impl>(config, options)) {}

SegmentEncoder::~SegmentEncoder() = default;

void SegmentEncoder::write(const io::VideoFrame& timing, const io::YuvImage& image) {
  impl_->write(timing, image);
}

double SegmentEncoder::busy_seconds() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  double sum = 0;
  for (const auto& instance : impl_->instances) sum += instance->busy;
  return sum;
}

int SegmentEncoder::instances() const { return impl_->options.instances; }

int64_t SegmentEncoder::finish() { return impl_->finish(); }

int64_t SegmentEncoder::segments() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->segments_started;
}

double SegmentEncoder::flush_seconds() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->flush;
}

double SegmentEncoder::join_seconds() const { return impl_->join; }

}  // namespace wm::sched
