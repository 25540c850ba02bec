// Standard input read twice (stdin_tee.h).
#include "io/stdin_tee.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

extern "C" {
#include <libavutil/error.h>
#include <libavutil/mem.h>
}

namespace wm::io {
namespace {

class StdinTee {
 public:
  // A new consumer at byte 0; -1 when byte 0 is gone.
  int add() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (base_ > 0) return -1;
    const int id = next_id_++;
    positions_[id] = 0;
    // The reader and the writer's copy: once both are there, no one else is waited for.
    if (positions_.size() >= 2) waiting_ = false;
    return id;
  }

  bool from_start() {
    std::lock_guard<std::mutex> lock(mutex_);
    return base_ == 0;
  }

  void remove(int id) {
    std::lock_guard<std::mutex> lock(mutex_);
    positions_.erase(id);
    trim();
  }

  // Up to `size` bytes at the consumer's position; 0 at the end of the input, < 0 an AVERROR.
  int read(int id, uint8_t* out, int size) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const int64_t at = positions_.at(id);
      if (at < end_) {
        const int n = int(std::min<int64_t>(size, end_ - at));
        std::memcpy(out, buffer_.data() + (at - base_), size_t(n));
        positions_[id] = at + n;
        trim();
        return n;
      }
      if (eof_) return 0;
      if (error_) return error_;
      if (reading_) {
        cv_.wait(lock);
        continue;
      }
      // This consumer reads file descriptor 0; the others wait for its bytes.
      reading_ = true;
      lock.unlock();
      uint8_t chunk[1 << 16];
      ssize_t n;
      do {
        n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      } while (n < 0 && errno == EINTR);
      const int err = errno;
      lock.lock();
      reading_ = false;
      if (n > 0) {
        buffer_.insert(buffer_.end(), chunk, chunk + n);
        end_ += n;
      } else if (n == 0) {
        eof_ = true;
      } else {
        error_ = AVERROR(err);
      }
      cv_.notify_all();
    }
  }

 private:
  // Drops the bytes every consumer has read, unless a consumer may still open.
  void trim() {
    if (waiting_ && end_ <= kRetainBytes) return;
    waiting_ = false;
    int64_t keep = end_;
    for (const auto& [id, at] : positions_) keep = std::min(keep, at);
    if (keep > base_) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + (keep - base_));
      base_ = keep;
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint8_t> buffer_;  // bytes [base_, end_) of the input
  int64_t base_ = 0;
  int64_t end_ = 0;
  bool eof_ = false;
  int error_ = 0;
  bool reading_ = false;
  bool waiting_ = true;  // a consumer may still open: keep every byte
  std::map<int, int64_t> positions_;
  int next_id_ = 0;
};

StdinTee& tee() {
  static StdinTee t;
  return t;
}

struct Opaque {
  int id;
};

int read_packet(void* opaque, uint8_t* buf, int size) {
  const int n = tee().read(static_cast<Opaque*>(opaque)->id, buf, size);
  return n == 0 ? AVERROR_EOF : n;
}

}  // namespace

AVIOContext* open_stdin() {
  const int id = tee().add();
  if (id < 0) return nullptr;
  constexpr int kBufferSize = 1 << 16;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferSize));
  auto* opaque = new Opaque{id};
  AVIOContext* io =
      avio_alloc_context(buffer, kBufferSize, 0, opaque, read_packet, nullptr, nullptr);
  if (!buffer || !io) {
    av_free(buffer);
    delete opaque;
    tee().remove(id);
    throw std::bad_alloc();
  }
  io->seekable = 0;
  return io;
}

bool stdin_from_start() { return tee().from_start(); }

void close_stdin(AVIOContext* io) {
  if (!io) return;
  auto* opaque = static_cast<Opaque*>(io->opaque);
  tee().remove(opaque->id);
  delete opaque;
  av_freep(&io->buffer);
  avio_context_free(&io);
}

}  // namespace wm::io
