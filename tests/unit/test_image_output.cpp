// io/image_output: which paths are images, the encoder an extension implies, sequence names and
// folders, and the temp folder that becomes a sequence output whole or not at all.
#include "io/image_output.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "src/base/error.h"
#include "src/job_spec.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;
using io::ImagePath;

TEST(ImageOutput, KindsOfPaths) {
  EXPECT_EQ(io::image_path_kind("/d/out/a.png"), ImagePath::kImage);
  EXPECT_EQ(io::image_path_kind("a.JPG"), ImagePath::kImage);
  EXPECT_EQ(io::image_path_kind("scan.tiff"), ImagePath::kImage);
  EXPECT_EQ(io::image_path_kind("/d/frames/%06d.png"), ImagePath::kSequence);
  EXPECT_EQ(io::image_path_kind("/d/100%/a.png"), ImagePath::kImage) << "only the file name counts";
  EXPECT_EQ(io::image_path_kind("shot_%d.tif"), ImagePath::kSequence);
  EXPECT_EQ(io::image_path_kind("a.mp4"), ImagePath::kNone);
  EXPECT_EQ(io::image_path_kind("a%03d.mkv"), ImagePath::kNone);
  EXPECT_EQ(io::image_path_kind("a.safetensors"), ImagePath::kNone);
  EXPECT_EQ(io::image_path_kind("list.m3u8"), ImagePath::kNone);
}

TEST(ImageOutput, EncoderFromTheExtension) {
  EXPECT_EQ(io::image_encoder_for("a.png"), "png");
  EXPECT_EQ(io::image_encoder_for("a.jpg"), "mjpeg");
  EXPECT_EQ(io::image_encoder_for("a.jpeg"), "mjpeg");
  EXPECT_EQ(io::image_encoder_for("a.tif"), "tiff");
  EXPECT_EQ(io::image_encoder_for("f/%04d.png"), "png");
  EXPECT_EQ(io::image_encoder_for("a.mkv"), "");
  EXPECT_STREQ(io::single_image_muxer("a.png"), "image2pipe");
  EXPECT_EQ(io::single_image_muxer("%03d.png"), nullptr);
  EXPECT_EQ(io::single_image_muxer("a.mp4"), nullptr);
}

TEST(ImageOutput, SequenceNamesAndTargets) {
  EXPECT_EQ(io::sequence_file_name("%06d.png", 7), "000007.png");
  EXPECT_EQ(io::sequence_file_name("a_%d.tif", 12), "a_12.tif");
  EXPECT_THROW(io::sequence_file_name("plain.png", 1), OutputError);
  EXPECT_EQ(io::output_target("/d/out/a/%06d.png"), "/d/out/a");
  EXPECT_EQ(io::output_target("/d/out/a.png"), "/d/out/a.png");
  EXPECT_TRUE(io::path_within("/d/out/a", "/d/out"));
  EXPECT_TRUE(io::path_within("/d/out", "/d/out"));
  EXPECT_FALSE(io::path_within("/d/outer/a", "/d/out"));
  EXPECT_FALSE(io::path_within("/d", "/d/out"));
}

// {stem} of an image sequence: its name without the number, or the folder's.
TEST(ImageOutput, StemOfASequence) {
  EXPECT_EQ(expand_output("out/{stem}.mp4", "/d/frames/%06d.png", "j", "/d"), "/d/out/frames.mp4");
  EXPECT_EQ(expand_output("out/{stem}/%04d{ext}", "/d/shots/take1_%04d.png", "j", "/d"),
            "/d/out/take1/%04d.png");
  EXPECT_EQ(expand_output("out/{stem}.mp4", "/d/a.png", "j", "/d"), "/d/out/a.mp4");
}

TEST(ImageOutput, StartNumberOfAnInputSequence) {
  TempDir dir("image-start");
  EXPECT_EQ(io::sequence_start_number(dir.file("%03d.png")), 1) << "none: libav's default";
  write_text(dir.file("002.png"), "x");
  EXPECT_EQ(io::sequence_start_number(dir.file("%03d.png")), 2);
  write_text(dir.file("000.png"), "x");
  EXPECT_EQ(io::sequence_start_number(dir.file("%03d.png")), 0);
}

TEST(ImageOutput, SequenceFolderAppearsWholeOrNotAtAll) {
  TempDir dir("image-folder");
  const std::string pattern = dir.file("out/%03d.png");
  stdfs::create_directories(dir.file("out.999999.partial"));  // a killed run's
  {
    io::SequenceFolder folder(pattern);
    EXPECT_FALSE(exists(dir.file("out.999999.partial"))) << "stale temp folders are removed";
    write_text(folder.frame_path(1), "one");
    EXPECT_EQ(folder.frame_path(1), folder.temp_folder() + "/001.png");
    EXPECT_FALSE(exists(dir.file("out")));
  }  // not committed
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{}) << "nothing left";

  {
    io::SequenceFolder folder(pattern);
    write_text(folder.frame_path(1), "first");
    folder.commit();
  }
  EXPECT_EQ(read_text(dir.file("out/001.png")), "first");
  {
    io::SequenceFolder folder(pattern);
    write_text(folder.frame_path(1), "second");
    write_text(folder.frame_path(2), "second");
    EXPECT_EQ(read_text(dir.file("out/001.png")), "first") << "the previous output until commit";
    folder.commit();
  }
  EXPECT_EQ(list_dir(dir.file("out")), (std::vector<std::string>{"001.png", "002.png"}));
  EXPECT_EQ(read_text(dir.file("out/001.png")), "second");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out"}) << "the old folder is removed";
}

}  // namespace
}  // namespace wm::test
