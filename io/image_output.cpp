#include "io/image_output.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::io {
namespace {

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

ImagePath image_path_kind(const std::string& path) {
  const std::string name = file_name(path);
  const AVOutputFormat* format = av_guess_format(nullptr, name.c_str(), nullptr);
  if (!format || std::strcmp(format->name, "image2") != 0) return ImagePath::kNone;
  return av_filename_number_test(name.c_str()) ? ImagePath::kSequence : ImagePath::kImage;
}

ImagePath input_image_kind(const std::string& path) {
  const ImagePath kind = image_path_kind(path);
  struct stat st {};
  if (kind == ImagePath::kSequence && ::stat(path.c_str(), &st) == 0) return ImagePath::kImage;
  return kind;
}

AVDictionary* literal_name_options(const std::string& path) {
  AVDictionary* options = nullptr;
  struct stat st {};
  if (image_path_kind(path) == ImagePath::kSequence && ::stat(path.c_str(), &st) == 0) {
    av_dict_set(&options, "pattern_type", "none", 0);
  }
  return options;
}

std::string image_encoder_for(const std::string& path) {
  if (image_path_kind(path) == ImagePath::kNone) return {};
  const std::string name = file_name(path);
  const AVOutputFormat* format = av_guess_format("image2", nullptr, nullptr);
  const AVCodecID id = av_guess_codec(format, nullptr, name.c_str(), nullptr, AVMEDIA_TYPE_VIDEO);
  const AVCodec* codec = id == AV_CODEC_ID_NONE ? nullptr : avcodec_find_encoder(id);
  return codec ? codec->name : "";
}

const char* single_image_muxer(const std::string& path) {
  return image_path_kind(path) == ImagePath::kImage ? "image2pipe" : nullptr;
}

std::string output_target(const std::string& output) {
  if (image_path_kind(output) != ImagePath::kSequence) return output;
  return fs::parent_dir(output);
}

bool path_within(const std::string& path, const std::string& folder) {
  if (folder == "/") return true;
  return path == folder ||
         (path.size() > folder.size() && path.compare(0, folder.size(), folder) == 0 &&
          path[folder.size()] == '/');
}

std::string sequence_file_name(const std::string& pattern, int64_t number) {
  char buffer[4096];
  if (number < 0 || number > INT32_MAX ||
      av_get_frame_filename2(buffer, sizeof(buffer), pattern.c_str(), int(number), 0) < 0) {
    throw OutputError(pattern + ": not a numbered file name pattern (such as %06d.png)",
                      kExitDataErr);
  }
  return buffer;
}

int64_t sequence_start_number(const std::string& pattern_path) {
  for (int64_t n = 0; n < 5; ++n) {
    struct stat st {};
    if (::stat(sequence_file_name(pattern_path, n).c_str(), &st) == 0) return n;
  }
  return 1;
}

SequenceFolder::SequenceFolder(const std::string& pattern_path)
    : pattern_(file_name(pattern_path)),
      folder_(fs::parent_dir(pattern_path)),
      temp_(fs::temp_path_for(fs::parent_dir(pattern_path))) {
  // Temp folders of killed runs ("<folder>.<pid>.partial" of another pid): nobody writes them
  // now, as the caller holds the output's lock.
  const std::string name = file_name(folder_);
  std::error_code ec;
  std::filesystem::directory_iterator it(fs::parent_dir(folder_), ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry.size() <= name.size() + 9 || entry.compare(0, name.size() + 1, name + ".") != 0 ||
        entry.compare(entry.size() - 8, 8, ".partial") != 0) {
      continue;
    }
    const std::string pid = entry.substr(name.size() + 1, entry.size() - 9 - name.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code removed;
    std::filesystem::remove_all(it->path(), removed);
  }
  std::filesystem::remove_all(temp_, ec);
  if (::mkdir(temp_.c_str(), 0755) != 0) {
    throw OutputError(
        folder_ + ": cannot create the temp folder " + temp_ + ": " + std::strerror(errno),
        kExitCantCreat);
  }
}

SequenceFolder::~SequenceFolder() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(temp_, ec);
}

std::string SequenceFolder::frame_path(int64_t number) const {
  return temp_ + "/" + sequence_file_name(pattern_, number);
}

void SequenceFolder::commit() {
  if (committed_) return;
  fs::fsync_path(temp_);
  if (is_dir(folder_)) {
    // A previous output (on_exists: overwrite) or the empty folder: swapped in one step, so the
    // final path always holds one whole sequence; the old one is then removed.
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, folder_.c_str(), RENAME_EXCHANGE) != 0) {
      throw OutputError(
          folder_ + ": cannot exchange it with " + temp_ + ": " + std::strerror(errno), kExitIoErr);
    }
    committed_ = true;
    std::error_code ec;
    std::filesystem::remove_all(temp_, ec);  // now the previous output
    if (ec)
      log::get("output")->warn("{}: cannot remove the previous output: {}", temp_, ec.message());
  } else {
    if (::rename(temp_.c_str(), folder_.c_str()) != 0) {
      throw OutputError(folder_ + ": rename from " + temp_ + ": " + std::strerror(errno),
                        kExitIoErr);
    }
    committed_ = true;
  }
  fs::fsync_path(fs::parent_dir(folder_));
}

}  // namespace wm::io
