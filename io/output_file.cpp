#include "io/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "io/av_handles.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::io {
namespace {

[[noreturn]] void fail(const std::string& final_path, const std::string& what, int rc) {
  throw OutputError(final_path + ": " + what + ": " + av_error_string(rc), kExitIoErr);
}

// fsync; a folder that cannot be synced (some filesystems) is only worth a warning.
void sync(const std::string& path, int flags, bool required, const std::string& final_path) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (::fsync(fd) != 0) err = errno;
    ::close(fd);
  }
  if (err == 0) return;
  if (required) {
    throw OutputError(final_path + ": fsync " + path + ": " + std::strerror(err), kExitIoErr);
  }
  log::get("mux")->warn("{}: fsync {}: {}", final_path, path, std::strerror(err));
}

int64_t count_stream0_packets(const AVOutputFormat* oformat, const std::string& temp_path,
                              const std::string& final_path) {
  const AVInputFormat* format = av_find_input_format(oformat->name);
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, temp_path.c_str(), format, nullptr);
  if (rc < 0) fail(final_path, "verify: cannot reopen " + temp_path, rc);
  FormatInputPtr input(raw);
  for (unsigned i = 1; i < input->nb_streams; ++i) input->streams[i]->discard = AVDISCARD_ALL;
  PacketPtr pkt = make_packet();
  int64_t count = 0;
  while ((rc = av_read_frame(input.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == 0) ++count;
    av_packet_unref(pkt.get());
  }
  if (rc != AVERROR_EOF) fail(final_path, "verify: cannot read " + temp_path, rc);
  return count;
}

}  // namespace

OutputLock::OutputLock(const std::string& final_path, const std::atomic<bool>* cancel) {
  const std::string folder = parent_folder(final_path);
  const size_t slash = final_path.find_last_of('/');
  path_ = folder + "/." + final_path.substr(slash == std::string::npos ? 0 : slash + 1) + ".wmlock";
  bool told = false;
  for (;;) {
    fd_ = fs::open_lock_file(path_);  // a symbolic link there is removed, never followed
    if (fd_ < 0) {
      throw OutputError(
          final_path + ": cannot create its lock file " + path_ + ": " + std::strerror(errno),
          kExitCantCreat);
    }
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK) {
        ::close(fd_);
        throw OutputError(final_path + ": cannot lock " + path_ + ": " + std::strerror(err),
                          kExitIoErr);
      }
      if (!told) {
        log::get("output")->info("{}: another process is writing it; waiting", final_path);
        told = true;
      }
      if (cancel && cancel->load()) {
        ::close(fd_);
        throw Cancelled(final_path + ": interrupted while waiting for another process");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // The previous holder removes the file as it lets go: a lock on a removed file locks
    // nothing, so take the one now at the path.
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      break;
    }
    ::close(fd_);
  }
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held: see the constructor
  ::close(fd_);
}

OutputLock::OutputLock(OutputLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

std::string parent_folder(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void commit_output(AVFormatContext* output, const std::string& temp_path,
                   const std::string& final_path, int64_t frames,
                   const std::function<void(const std::string& temp_path)>& before_rename) {
  if (!(output->oformat->flags & AVFMT_NOFILE)) {
    const int rc = avio_closep(&output->pb);
    if (rc < 0) fail(final_path, "cannot close " + temp_path, rc);
  }
  sync(temp_path, O_RDONLY, true, final_path);
  const int64_t in_file = count_stream0_packets(output->oformat, temp_path, final_path);
  if (in_file != frames) {
    throw OutputError(final_path + ": verify failed: " + std::to_string(in_file) +
                          " video frames in the file, " + std::to_string(frames) + " written",
                      kExitIoErr);
  }
  if (before_rename) before_rename(temp_path);
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    throw OutputError(final_path + ": rename from " + temp_path + ": " + std::strerror(errno),
                      kExitIoErr);
  }
  // The rename is durable only once the folder entry is on disk.
  sync(parent_folder(final_path), O_RDONLY | O_DIRECTORY, false, final_path);
}

int pick_video_stream(AVFormatContext* format) {
  auto usable = [&](int i) {
    const AVStream* s = format->streams[i];
    return s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
           !(s->disposition & AV_DISPOSITION_ATTACHED_PIC);
  };
  const int best = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (best >= 0 && usable(best)) return best;
  int chosen = -1;
  int64_t chosen_area = -1;
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    if (!usable(int(i))) continue;
    const AVCodecParameters* par = format->streams[i]->codecpar;
    const int64_t area = int64_t(par->width) * par->height;
    if (area > chosen_area) chosen = int(i), chosen_area = area;
  }
  return chosen;
}

}  // namespace wm::io
