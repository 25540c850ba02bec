// Segment-parallel encoding (scheduler/segment_encode.h) against one encoder: the same frame
// count, order and timestamps (and the source's audio), identical decoded frames with a lossless
// setting, the same bytes on every run, nothing left behind when abandoned or failing.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/segment_encode.h"
#include "scheduler/upscale_device.h"
#include "src/base/error.h"
#include "tests/support/media.h"

namespace wm::sched {
namespace {

using test::ClipSpec;
using test::TempDir;

io::WriterConfig config_for(const std::string& source, const std::string& out, bool lossless) {
  io::VideoReader reader(source);
  const io::VideoInfo& info = reader.info();
  io::WriterConfig c;
  c.path = out;
  c.width = info.width;
  c.height = info.height;
  c.time_base = info.time_base;
  c.frame_rate = info.frame_rate;
  c.source_path = source;
  c.source = info;
  c.encode.codec = "libx264";
  c.encode.preset = "ultrafast";
  c.encode.threads = 2;
  if (lossless) {
    c.encode.crf = -1;
    c.encode.options = {{"qp", "0"}};
  }
  return c;
}

// Decodes `source` and writes every frame's planes to `sink` (write_planes semantics).
template <typename Write>
int64_t feed(const std::string& source, Write&& write) {
  io::VideoReader reader(source);
  int64_t n = 0;
  for (;;) {
    io::VideoFrame timing;
    io::YuvImage image;
    if (!reader.read_yuv(timing, image)) break;
    write(timing, image);
    ++n;
  }
  return n;
}

int64_t encode_one(const io::WriterConfig& c) {
  io::VideoWriter writer(c);
  WriterPlaneSink sink(writer);
  feed(c.source_path, [&](const io::VideoFrame& t, const io::YuvImage& i) { sink.write(t, i); });
  return writer.finish();
}

int64_t encode_segments(const io::WriterConfig& c, int instances, int segment_frames) {
  SegmentOptions o;
  o.instances = instances;
  o.segment_frames = segment_frames;
  SegmentEncoder encoder(c, o);
  feed(c.source_path, [&](const io::VideoFrame& t, const io::YuvImage& i) { encoder.write(t, i); });
  EXPECT_GT(encoder.busy_seconds(), 0);
  return encoder.finish();
}

std::vector<std::vector<uint8_t>> decoded_planes(const std::string& path) {
  std::vector<std::vector<uint8_t>> out;
  io::VideoReader reader(path);
  for (;;) {
    io::VideoFrame timing;
    io::YuvImage image;
    if (!reader.read_yuv(timing, image)) break;
    std::vector<uint8_t> bytes;
    for (int p = 0; p < 3; ++p) {
      for (int y = 0; y < image.plane_height(p); ++y) {
        const uint8_t* row = image.data[p] + y * image.stride[p];
        bytes.insert(bytes.end(), row, row + image.plane_width(p));
      }
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Names in `dir` that start with `prefix`.
std::vector<std::string> entries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(prefix, 0) == 0) out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

class SegmentEncode : public testing::Test {
 protected:
  void SetUp() override {
    ClipSpec spec;
    spec.width = 64;
    spec.height = 48;
    spec.frames = 40;
    spec.gop = 10;
    test::make_clip(source_ = dir_.file("source.mp4"), spec);
  }
  TempDir dir_{"segment-encode"};
  std::string source_;
};

TEST_F(SegmentEncode, SameFramesOrderAndTimestampsAsOneEncoder) {
  const io::WriterConfig one = config_for(source_, dir_.file("one.mp4"), false);
  const io::WriterConfig three = config_for(source_, dir_.file("three.mp4"), false);
  ASSERT_EQ(encode_one(one), 40);
  ASSERT_EQ(encode_segments(three, 3, 6), 40);  // 7 segments, the last of 4 frames
  const test::Probe a = test::probe(one.path), b = test::probe(three.path);
  EXPECT_EQ(a.video_frames, 40);
  EXPECT_EQ(b.video_frames, 40);
  EXPECT_EQ(a.video_pts, b.video_pts);
  EXPECT_TRUE(b.has_audio);
  EXPECT_NEAR(a.audio_duration, b.audio_duration, 0.03);
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.pix_fmt, b.pix_fmt);
  EXPECT_TRUE(entries(dir_.path(), ".wmbatch-segments-").empty());
}

TEST_F(SegmentEncode, LosslessSegmentsDecodeToTheSameFramesAndBytesRepeat) {
  const io::WriterConfig one = config_for(source_, dir_.file("one.mp4"), true);
  ASSERT_EQ(encode_one(one), 40);
  const io::WriterConfig seg = config_for(source_, dir_.file("seg.mp4"), true);
  ASSERT_EQ(encode_segments(seg, 2, 8), 40);
  const auto source_frames = decoded_planes(source_);
  const auto one_frames = decoded_planes(one.path);
  const auto seg_frames = decoded_planes(seg.path);
  ASSERT_EQ(source_frames.size(), 40u);
  EXPECT_TRUE(one_frames == source_frames);
  EXPECT_TRUE(seg_frames == source_frames);
  // The same settings give the same bytes.
  const io::WriterConfig again = config_for(source_, dir_.file("again.mp4"), true);
  ASSERT_EQ(encode_segments(again, 2, 8), 40);
  EXPECT_EQ(file_bytes(seg.path), file_bytes(again.path));
  EXPECT_FALSE(file_bytes(seg.path).empty());
}

TEST_F(SegmentEncode, AbandonedLeavesNothing) {
  const io::WriterConfig c = config_for(source_, dir_.file("gone.mp4"), false);
  {
    SegmentOptions o;
    o.instances = 2;
    o.segment_frames = 5;
    SegmentEncoder encoder(c, o);
    int n = 0;
    feed(source_, [&](const io::VideoFrame& t, const io::YuvImage& i) {
      if (n++ < 23) encoder.write(t, i);
    });
  }
  EXPECT_FALSE(std::filesystem::exists(c.path));
  EXPECT_TRUE(entries(dir_.path(), ".wmbatch-segments-").empty());
  EXPECT_TRUE(entries(dir_.path(), "gone.mp4").empty());
}

TEST_F(SegmentEncode, AnInstanceFailureFailsTheOutput) {
  io::WriterConfig c = config_for(source_, dir_.file("bad.mp4"), false);
  c.encode.options = {{"no_such_option", "1"}};  // each segment's encoder refuses it
  SegmentOptions o;
  o.instances = 2;
  o.segment_frames = 5;
  SegmentEncoder encoder(c, o);
  bool threw = false;
  try {
    feed(source_, [&](const io::VideoFrame& t, const io::YuvImage& i) { encoder.write(t, i); });
    encoder.finish();
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("no_such_option"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
  EXPECT_FALSE(std::filesystem::exists(c.path));
}

TEST(SegmentEncodeFolder, UnwritableFolderIsAnOutputError) {
  io::WriterConfig c;
  c.path = "/nonexistent-folder-wm/out.mp4";
  EXPECT_THROW(SegmentEncoder(c, SegmentOptions{}), OutputError);
}

}  // namespace

// Segments sized for several instances: at most two seconds each (so every instance starts
// within two seconds of frames), and as even as whole rounds allow: no instance encodes more than
// its share plus one frame per round (two-second segments gave 240 frames at 24 fps to two
// instances as 144 + 96).
TEST(SegmentFrames, EvenRoundsOfAtMostTwoSeconds) {
  const io::Rational fps24{24, 1};
  EXPECT_EQ(segment_frames_for(fps24, 0, 2), 48);                // frame count unknown: two seconds
  EXPECT_EQ(segment_frames_for(fps24, 1000, 1), 48);             // one instance: two seconds
  EXPECT_EQ(segment_frames_for(io::Rational{10, 1}, 0, 2), 24);  // at least 24
  for (int instances : {2, 3, 4}) {
    for (int64_t frames : {1, 7, 48, 95, 96, 97, 100, 240, 241, 1000, 4321}) {
      const int64_t seg = segment_frames_for(fps24, frames, instances);
      ASSERT_GE(seg, 1);
      EXPECT_LE(seg, 48) << frames << " frames, " << instances << " instances";
      // Frames per instance when segment s goes to instance s mod N.
      std::vector<int64_t> per(size_t(instances), 0);
      for (int64_t f = 0; f < frames; ++f) ++per[size_t((f / seg) % instances)];
      const int64_t rounds = (frames + instances * 48 - 1) / (instances * 48);
      const int64_t share = (frames + instances - 1) / instances;
      EXPECT_LE(*std::max_element(per.begin(), per.end()), share + rounds)
          << frames << " frames, " << instances << " instances";
    }
  }
  EXPECT_EQ(segment_frames_for(fps24, 100, 2), 25);
  EXPECT_EQ(segment_frames_for(fps24, 240, 2), 40);
}
}  // namespace wm::sched
