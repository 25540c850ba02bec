// Images as inputs and outputs of upscale jobs (issue 14 "Images too", issue 15 image outputs
// written atomically): the real wmbatch binary on PNG (8/16-bit, grey, alpha), JPEG and TIFF
// files and numbered sequences made by libav here; the outputs are decoded again and compared
// with the built-in Lanczos resampler run on the decoded inputs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "src/models/resample/resample.h"
#include "src/models/resample/resize_plane.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

// Lines: 1 task, 2 input, 3 output, 4 model, 5- `more`.
std::string job_text(const std::string& input, const std::string& output,
                     const std::string& model = "{kind: lanczos, scale: 2}",
                     const std::string& more = "") {
  return "task: upscale\ninput: " + input + "\noutput: " + output + "\nmodel: " + model + "\n" +
         more;
}

// Files under `dir` (recursively) whose name contains `part`.
std::vector<std::string> files_named(const std::string& dir, const std::string& part) {
  std::vector<std::string> out;
  for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path());
  }
  return out;
}

// --- one image in, one image out -----------------------------------------------------------------

struct ImageCase {
  const char* name;
  const char* ext;
  const char* codec;
  const char* pix_fmt;      // of the input
  const char* out_pix_fmt;  // expected of the output (the input's kind kept)
  int depth;                // bits per sample
  bool alpha;
  // Tolerance in levels: one (rounding), more for grey, which the writer converts through
  // libswscale (io/pixel_convert.h writes RGB sample by sample, grey not).
  int levels = 1;
};

class SingleImage : public testing::TestWithParam<ImageCase> {};

// Size ×2, same pixel format (bit depth, grey, alpha), every value the Lanczos reference's
// within one level, alpha Lanczos-resized too.
TEST_P(SingleImage, KeepsItsKindAndMatchesTheLanczosReference) {
  const ImageCase& c = GetParam();
  TempDir dir("image-single");
  const std::string input = dir.file(std::string("in") + c.ext);
  make_image(input, c.codec, c.pix_fmt);
  write_text(dir.file("job.yaml"), job_text(input, "out/{stem}{ext}"));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string output = dir.file(std::string("out/in") + c.ext);
  const Probe p = probe(output);
  EXPECT_EQ(p.width, 48);
  EXPECT_EQ(p.height, 32);
  EXPECT_EQ(p.video_frames, 1);
  EXPECT_EQ(p.pix_fmt, c.out_pix_fmt);
  EXPECT_EQ(stdfs::path(output).extension(), c.ext);
  EXPECT_TRUE(files_named(dir.path(), ".partial").empty());
  EXPECT_TRUE(files_named(dir.path(), ".wmlock").empty());

  const std::vector<io::VideoFrame> in = read_all(input);
  const std::vector<io::VideoFrame> out = read_all(output);
  ASSERT_EQ(in.size(), 1u);
  ASSERT_EQ(out.size(), 1u);
  const double level = 1.0 / ((1 << c.depth) - 1);
  EXPECT_LE(max_abs_diff(out[0].image, lanczos_x2(in[0].image)), c.levels * level + 1e-5);
  ASSERT_EQ(out[0].alpha.empty(), !c.alpha);
  if (c.alpha) {
    const Planar reference = models::resize_plane_lanczos(in[0].alpha, 48, 32);
    EXPECT_LE(max_abs_diff(out[0].alpha, reference), level + 1e-5);
    // The ramp's ends stay transparent and opaque.
    EXPECT_LT(out[0].alpha.data.front(), 0.1f);
    EXPECT_GT(out[0].alpha.data.back(), 0.9f);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SingleImage,
    testing::Values(ImageCase{"png8", ".png", "png", "rgb24", "rgb24", 8, false},
                    ImageCase{"png16", ".png", "png", "rgb48be", "rgb48be", 16, false},
                    ImageCase{"png_alpha", ".png", "png", "rgba", "rgba", 8, true},
                    ImageCase{"png16_alpha", ".png", "png", "rgba64be", "rgba64be", 16, true},
                    ImageCase{"png_grey", ".png", "png", "gray", "gray", 8, false, 2},
                    ImageCase{"png_grey16", ".png", "png", "gray16be", "gray16be", 16, false, 4},
                    ImageCase{"png_grey_alpha", ".png", "png", "ya8", "ya8", 8, true, 2},
                    ImageCase{"tiff8", ".tif", "tiff", "rgb24", "rgb24", 8, false},
                    ImageCase{"tiff16", ".tif", "tiff", "rgb48le", "rgb48le", 16, false}),
    [](const testing::TestParamInfo<ImageCase>& info) { return std::string(info.param.name); });

// JPEG is lossy: a flat colour stays that colour, the size doubles, the file stays a JPEG.
TEST(ImageJobs, JpegFlatColourStaysThatColour) {
  TempDir dir("image-jpeg");
  ClipSpec spec;
  spec.width = 32;
  spec.height = 16;
  spec.frames = 1;
  spec.codec = "mjpeg";
  spec.pix_fmt = "yuvj420p";
  spec.color_range = 2;  // full (JFIF)
  spec.audio = false;
  spec.flat = true;
  spec.flat_value = {150, 100, 180};
  make_clip(dir.file("in.jpg"), spec);
  write_text(dir.file("job.yaml"), job_text(dir.file("in.jpg"), "out/{stem}.jpg"));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe p = probe(dir.file("out/in.jpg"));
  EXPECT_EQ(p.codec, "mjpeg");
  EXPECT_EQ(p.width, 64);
  EXPECT_EQ(p.height, 32);
  const std::vector<io::VideoFrame> in = read_all(dir.file("in.jpg"));
  const std::vector<io::VideoFrame> out = read_all(dir.file("out/in.jpg"));
  ASSERT_EQ(out.size(), 1u);
  for (int c = 0; c < 3; ++c) {
    const float want = in[0].image.plane(c, 0)[0];
    const Planar& got = out[0].image;
    for (size_t i = 0; i < got.plane_size(); ++i) {
      ASSERT_NEAR(got.plane(c, 0)[i], want, 3.0 / 255) << "channel " << c << " pixel " << i;
    }
  }
}

// A PNG into a JPEG: RGB becomes full-range YUV (libavcodec's mjpeg takes nothing else).
TEST(ImageJobs, PngIntoJpegAndTiff) {
  TempDir dir("image-convert");
  make_image(dir.file("a.png"), "png", "rgb24");
  write_text(dir.file("job.yaml"), job_text(dir.file("a.png"), "out/{stem}.jpg") + "---\n" +
                                       job_text(dir.file("a.png"), "out/{stem}.tif"));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out/a.jpg")).codec, "mjpeg");
  const Probe tif = probe(dir.file("out/a.tif"));
  EXPECT_EQ(tif.codec, "tiff");
  EXPECT_EQ(tif.pix_fmt, "rgb24");
  EXPECT_EQ(tif.width, 48);
}

// --- sequences -----------------------------------------------------------------------------------

// frames/%06d.png → a sequence folder (numbering kept) and → a video; {stem} is "frames".
TEST(ImageJobs, SequenceIntoImagesAndIntoVideo) {
  TempDir dir("image-seq");
  stdfs::create_directories(dir.file("frames"));
  make_image(dir.file("frames/%06d.png"), "png", "rgba", 24, 16, 5);  // 000001 .. 000005
  ASSERT_TRUE(exists(dir.file("frames/000005.png")));
  write_text(dir.file("job.yaml"),
             job_text("frames/%06d.png", "seq/{stem}/%06d.png") + "---\n" +
                 job_text("frames/%06d.png", "vid/{stem}.mkv", "{kind: lanczos, scale: 2}",
                          "encode: {codec: ffv1}\n"));
  const CommandResult r = wmbatch({dir.file("job.yaml"), "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(list_dir(dir.file("seq/frames")),
            (std::vector<std::string>{"000001.png", "000002.png", "000003.png", "000004.png",
                                      "000005.png"}));
  EXPECT_EQ(list_dir(dir.file("seq")), (std::vector<std::string>{"frames"}));
  const std::vector<io::VideoFrame> in = read_all(dir.file("frames/%06d.png"));
  ASSERT_EQ(in.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const std::string name = dir.file("seq/frames/00000" + std::to_string(i + 1) + ".png");
    const Probe p = probe(name);
    EXPECT_EQ(p.pix_fmt, "rgba") << name;
    const std::vector<io::VideoFrame> out = read_all(name);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_LE(max_abs_diff(out[0].image, lanczos_x2(in[i].image)), 1.0 / 255 + 1e-5) << name;
    ASSERT_FALSE(out[0].alpha.empty());
  }
  const Probe video = probe(dir.file("vid/frames.mkv"));
  EXPECT_EQ(video.video_frames, 5);
  EXPECT_EQ(video.width, 48);
  EXPECT_EQ(video.height, 32);
  const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
  EXPECT_EQ(report[0]["inputs"][0]["frames"], 5);
  EXPECT_EQ(report[0]["inputs"][0]["output"], dir.file("seq/frames/%06d.png"));
}

// A video into a sequence: frames numbered from 1; the audio it cannot hold is said.
TEST(ImageJobs, VideoIntoSequenceReportsTheAudio) {
  TempDir dir("image-video-seq");
  ClipSpec spec;
  spec.frames = 3;
  make_clip(dir.file("a.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("a.mp4", "out/{stem}/%04d.png"));
  const CommandResult r = wmbatch({dir.file("job.yaml"), "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(list_dir(dir.file("out/a")),
            (std::vector<std::string>{"0001.png", "0002.png", "0003.png"}));
  EXPECT_EQ(probe(dir.file("out/a/0001.png")).width, 128);
  const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
  const std::string dropped = report[0]["inputs"][0]["dropped"].dump();
  EXPECT_NE(dropped.find("audio"), std::string::npos) << dropped;
}

// --- a real network
// --------------------------------------------------------------------------------

// The tiny SRVGG (×4) from its official-style .pth on a PNG with alpha: ×4 size, RGBA kept, alpha
// the Lanczos-resized source alpha.
TEST(ImageJobs, RealesrganTinyModelOnAPng) {
  TempDir dir("image-realesrgan");
  make_image(dir.file("a.png"), "png", "rgba", 20, 12);
  const std::string weights =
      std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/srvgg-tiny/model.pth";
  write_text(dir.file("job.yaml"),
             job_text("a.png", "out/{stem}.png", "{kind: realesrgan, weights: '" + weights + "'}"));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe p = probe(dir.file("out/a.png"));
  EXPECT_EQ(p.width, 80);
  EXPECT_EQ(p.height, 48);
  EXPECT_EQ(p.pix_fmt, "rgba");
  const std::vector<io::VideoFrame> in = read_all(dir.file("a.png"));
  const std::vector<io::VideoFrame> out = read_all(dir.file("out/a.png"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_LE(max_abs_diff(out[0].alpha, models::resize_plane_lanczos(in[0].alpha, 80, 48)),
            1.0 / 255 + 1e-5);
}

// --- nothing half-written, nothing lost
// ------------------------------------------------------------

// A run that fails (a corrupt input) leaves the previous output as it was and no temp file.
TEST(ImageJobs, FailingRunKeepsThePreviousImage) {
  TempDir dir("image-fail");
  make_image(dir.file("a.png"), "png", "rgb24");
  const std::string job =
      job_text("a.png", "out/{stem}.png", "{kind: lanczos, scale: 2}", "on_exists: overwrite\n");
  write_text(dir.file("job.yaml"), job);
  ASSERT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 0);
  const std::string before = read_text(dir.file("out/a.png"));
  const std::string whole = read_text(dir.file("a.png"));
  write_text(dir.file("a.png"), whole.substr(0, whole.size() / 2));  // truncated
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_EQ(read_text(dir.file("out/a.png")), before);
  EXPECT_TRUE(files_named(dir.path(), ".partial").empty());
}

// A sequence that fails part-way (its fourth file is corrupt) leaves the previous sequence folder
// whole and no temp folder; the rerun that succeeds replaces it whole.
TEST(ImageJobs, FailingSequenceKeepsThePreviousFolder) {
  TempDir dir("image-seq-fail");
  stdfs::create_directories(dir.file("frames"));
  make_image(dir.file("frames/%06d.png"), "png", "rgb24", 24, 16, 6);
  const std::string job = job_text("frames/%06d.png", "out/{stem}/%06d.png",
                                   "{kind: lanczos, scale: 2}", "on_exists: overwrite\n");
  write_text(dir.file("job.yaml"), job);
  ASSERT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 0);
  const std::vector<std::string> names = list_dir(dir.file("out/frames"));
  ASSERT_EQ(names.size(), 6u);
  const std::string first = read_text(dir.file("out/frames/000001.png"));
  // A marker only the previous output has.
  write_text(dir.file("out/frames/marker.txt"), "previous");

  const std::string good = read_text(dir.file("frames/000004.png"));
  write_text(dir.file("frames/000004.png"), "not a png at all");
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(exists(dir.file("out/frames/marker.txt")));
  EXPECT_EQ(list_dir(dir.file("out/frames")).size(), 7u);
  EXPECT_EQ(read_text(dir.file("out/frames/000001.png")), first);
  EXPECT_EQ(list_dir(dir.file("out")), (std::vector<std::string>{"frames"}));

  write_text(dir.file("frames/000004.png"), good);
  ASSERT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 0);
  EXPECT_EQ(list_dir(dir.file("out/frames")), names) << "replaced whole";
  EXPECT_EQ(list_dir(dir.file("out")), (std::vector<std::string>{"frames"}));
}

// Killed (SIGKILL) while writing a sequence: the previous folder is intact; the temp folder the
// killed run left is not at the final path, and the next run removes it. SIGTERM: exit 75 and
// nothing left behind.
TEST(ImageJobs, KilledSequenceRunLeavesThePreviousFolder) {
  TempDir dir("image-seq-kill");
  stdfs::create_directories(dir.file("frames"));
  make_image(dir.file("frames/%06d.png"), "png", "rgb24", 160, 120, 60);
  const std::string job = job_text("frames/%06d.png", "out/{stem}/%06d.png",
                                   "{kind: lanczos, scale: 4}", "on_exists: overwrite\n");
  write_text(dir.file("job.yaml"), job);
  ASSERT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 0);
  write_text(dir.file("out/frames/marker.txt"), "previous");
  const std::string first = read_text(dir.file("out/frames/000001.png"));

  for (int sig : {SIGKILL, SIGTERM}) {
    SCOPED_TRACE(sig);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string bin = wmbatch_path();
      const std::string file = dir.file("job.yaml");
      std::freopen("/dev/null", "w", stderr);
      ::execl(bin.c_str(), bin.c_str(), "--progress", "none", file.c_str(), nullptr);
      ::_exit(127);
    }
    // Kill once its temp folder holds a few images.
    const std::string temp = dir.file("out/frames." + std::to_string(pid) + ".partial");
    bool writing = false;
    for (int i = 0; i < 6000 && !writing; ++i) {
      std::error_code ec;
      writing = stdfs::is_directory(temp, ec) && std::distance(stdfs::directory_iterator(temp, ec),
                                                               stdfs::directory_iterator{}) >= 3;
      if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(writing) << "the run never wrote its temp folder";
    if (sig == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 75) << status;
      EXPECT_FALSE(exists(temp)) << "a cancelled run removes its temp folder";
    }
    EXPECT_TRUE(exists(dir.file("out/frames/marker.txt")));
    EXPECT_EQ(read_text(dir.file("out/frames/000001.png")), first);
    EXPECT_EQ(list_dir(dir.file("out/frames")).size(), 61u);
  }
  ASSERT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 0);
  EXPECT_EQ(list_dir(dir.file("out")), (std::vector<std::string>{"frames"}))
      << "the killed run's temp folder is removed";
  EXPECT_FALSE(exists(dir.file("out/frames/marker.txt")));
  EXPECT_EQ(list_dir(dir.file("out/frames")).size(), 60u);
}

// --- validation
// --------------------------------------------------------------------------------------

TEST(ImageJobs, CollisionsAndWrongInputsAreRefusedAtValidation) {
  TempDir dir("image-validate");
  stdfs::create_directories(dir.file("x"));
  stdfs::create_directories(dir.file("y"));
  make_image(dir.file("x/a.png"), "png", "rgb24");
  make_image(dir.file("y/a.png"), "png", "rgb24");
  make_image(dir.file("b.png"), "png", "rgb24");
  make_image(dir.file("b.jpg"), "mjpeg", "yuvj420p");
  ClipSpec clip;
  clip.frames = 2;
  clip.audio = false;
  make_clip(dir.file("v.mp4"), clip);
  struct Case {
    std::string input, output, says;
  };
  const std::vector<Case> cases = {
      {"'[xy]/*.png'", "out/{stem}.png",
       "inputs " + dir.file("x/a.png") + " and " + dir.file("y/a.png") + " would both write " +
           dir.file("out/a.png")},
      {"[b.png, b.jpg]", "out/{stem}.png",
       "inputs " + dir.file("b.png") + " and " + dir.file("b.jpg") + " would both write " +
           dir.file("out/b.png")},
      // Two sequences in one folder.
      {"[x/a.png, y/a.png]", "out/{stem}/%06d.png",
       "inputs " + dir.file("x/a.png") + " and " + dir.file("y/a.png") + " would both write " +
           dir.file("out/a")},
      {"v.mp4", "out/{stem}.png", "a single-image output takes an image input"},
      // A sequence's folder is replaced whole: never the inputs' or the job's.
      {"x/a.png", "x/%06d.png", "may not hold the input"},
      {"x/a.png", "'%06d.png'", "may not hold the input"},  // quoted: YAML
      {"v.mp4", "hls/{stem}.m3u8", "cannot be written atomically"},
      {"v.mp4", "dash/{stem}.mpd", "cannot be written atomically"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output);
    write_text(dir.file("job.yaml"), job_text(c.input, c.output));
    const CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, 65) << r.output;
    EXPECT_NE(r.output.find("job.yaml:3: output: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    for (const char* folder : {"out", "hls", "dash"}) EXPECT_FALSE(exists(dir.file(folder)));
    EXPECT_TRUE(exists(dir.file("x/a.png")));
  }
}

// An existing output image with on_exists: fail is exit 73 and untouched; skip keeps it.
TEST(ImageJobs, ExistingImageFollowsOnExists) {
  TempDir dir("image-exists");
  make_image(dir.file("a.png"), "png", "rgb24");
  stdfs::create_directories(dir.file("out"));
  write_text(dir.file("out/a.png"), "old");
  write_text(dir.file("job.yaml"), job_text("a.png", "out/{stem}.png"));
  CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 73) << r.output;
  EXPECT_EQ(read_text(dir.file("out/a.png")), "old");
  write_text(dir.file("job.yaml"),
             job_text("a.png", "out/{stem}.png", "{kind: lanczos, scale: 2}", "on_exists: skip\n"));
  r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir.file("out/a.png")), "old");
}

// --- many images, flat memory
// -----------------------------------------------------------------------

// A folder of images runs with memory flat: the peak RSS of a run over 3N images is that of a
// run over N (a per-image leak of the decoded or upscaled planes, 64×48 RGBA → ~200 KB per image,
// would add ~40 MiB over the 2N more images).
TEST(ImageJobs, ManyImagesRunInFlatMemory) {
  TempDir dir("image-many");
  constexpr int kFew = 100, kMany = 300;
  stdfs::create_directories(dir.file("in"));
  make_image(dir.file("in/a.png"), "png", "rgba", 64, 48);
  for (int i = 1; i < kMany; ++i) {
    stdfs::copy_file(dir.file("in/a.png"), dir.file("in/" + std::to_string(1000 + i) + ".png"));
  }
  stdfs::create_directories(dir.file("few"));
  for (int i = 1; i < kFew; ++i) {
    stdfs::copy_file(dir.file("in/a.png"), dir.file("few/" + std::to_string(1000 + i) + ".png"));
  }
  stdfs::copy_file(dir.file("in/a.png"), dir.file("few/a.png"));
  auto peak_mib = [&](const std::string& folder) {
    write_text(dir.file("job.yaml"),
               job_text("'" + folder + "/*.png'", folder + "-out/{stem}.png"));
    const CommandResult r = wmbatch({dir.file("job.yaml"), "--report", dir.file("report.json")});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
    EXPECT_EQ(report[0]["inputs"].size(), size_t(folder == "in" ? kMany : kFew));
    return report[0]["peak_rss_mib"].get<double>();
  };
  const double few = peak_mib("few");
  const double many = peak_mib("in");
  EXPECT_EQ(list_dir(dir.file("in-out")).size(), size_t(kMany));
  EXPECT_LT(many, few + 12.0) << "peak RSS " << few << " MiB after " << kFew << " images, " << many
                              << " MiB after " << kMany;
}

}  // namespace
}  // namespace wm::test
