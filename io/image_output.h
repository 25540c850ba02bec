// Images as inputs and outputs: which paths name images (libavformat's image2 family: .png,
// .jpg, .tif, ...), single images versus numbered sequences ("frames/%06d.png"), the encoder an
// image extension implies, and the folder a sequence output is written into atomically.
//
// A single image is written by VideoWriter like any file: its muxer is image2pipe (one frame,
// written to the file VideoWriter opens itself: "<image>.<pid>.partial", verified, renamed).
// libavformat's image2 muxer opens and writes its files itself, so a sequence is written frame
// by frame, each frame an image of its own, into a temp folder that SequenceFolder renames into
// place when all are written: the final folder holds the whole sequence or is untouched.
#pragma once

#include <cstdint>
#include <string>

struct AVDictionary;

namespace wm::io {

enum class ImagePath {
  kNone,      // not an image (a video or other container, a .safetensors file)
  kImage,     // one image file: its extension is one libavformat's image2 muxer writes
  kSequence,  // a numbered sequence: the file name holds a printf number ("%06d", "%d")
};

// What `path` names (by its file name alone; nothing is opened).
ImagePath image_path_kind(const std::string& path);

// What an input path names: as image_path_kind, except that a file whose name only looks like
// a pattern ("50%d.png", "pct%03d.png") is that file when a file of that exact name exists. A
// `%` in a real file's name is not a sequence number (docs/job-format.md, "Images").
ImagePath input_image_kind(const std::string& path);

// Options for avformat_open_input() of an input `path` (to pass, then free with av_dict_free):
// "pattern_type=none" when its name looks like a sequence pattern but a file of that exact name
// exists, so libav's image2 demuxer reads that file instead of numbered ones; null otherwise.
AVDictionary* literal_name_options(const std::string& path);

// The encoder an image path's extension implies ("png", "mjpeg", "tiff", ...); empty for a path
// that is not an image.
std::string image_encoder_for(const std::string& path);

// The muxer VideoWriter uses for `path`: "image2pipe" for a single image, nullptr (libavformat's
// guess from the extension) for everything else.
const char* single_image_muxer(const std::string& path);

// The path an output's lock, existence check (on_exists) and rename apply to: the folder of a
// sequence output ("out/a/%06d.png" → "out/a"), the output itself otherwise.
std::string output_target(const std::string& output);

// True when `path` is `folder` or lies inside it (lexically; both absolute and normalised): a
// sequence output's folder, which is replaced whole, may hold neither the inputs nor the job.
bool path_within(const std::string& path, const std::string& folder);

// The file name of frame `number` of a sequence whose file name is `pattern` ("%06d.png", 7 →
// "000007.png"). Throws OutputError for a pattern that is not one.
std::string sequence_file_name(const std::string& pattern, int64_t number);

// The number of the first file of an input sequence (path with a printf number), by libav's
// image2 demuxer rule: the first of 0..4 whose file exists; 1 when none does.
int64_t sequence_start_number(const std::string& pattern_path);

// A sequence output being written: frames go into "<folder>.<pid>.partial" beside the final
// folder; commit() fsyncs that folder and renames it to the final folder (a previous output there
// is exchanged atomically, renameat2 RENAME_EXCHANGE, then removed), then fsyncs the parent.
// Destroyed uncommitted (a failure, a cancel), it removes the temp folder: nothing appears at the
// final path and a previous output is untouched. The caller holds the output's io::OutputLock on
// the final folder (output_target); the constructor removes temp folders of that output which
// killed runs of other processes left. Throws OutputError (kExitCantCreat when the temp folder
// cannot be made; kExitIoErr when the commit fails). Move-only; one thread.
class SequenceFolder {
 public:
  explicit SequenceFolder(const std::string& pattern_path);
  ~SequenceFolder();
  SequenceFolder(const SequenceFolder&) = delete;
  SequenceFolder& operator=(const SequenceFolder&) = delete;

  // Where frame `number` is written (in the temp folder).
  std::string frame_path(int64_t number) const;
  void commit();
  const std::string& folder() const { return folder_; }
  const std::string& temp_folder() const { return temp_; }

 private:
  std::string pattern_;  // file name pattern
  std::string folder_;   // final folder
  std::string temp_;
  bool committed_ = false;
};

}  // namespace wm::io
