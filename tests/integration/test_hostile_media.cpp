// Issue 25 ("Nothing lost, nobody let in"), the parser, image and command-line half: the real
// wmbatch binary on files a hostile or unlucky user hands it. A --report that would replace a job
// file, file names that are not UTF-8 or hold a '%', model files built to exhaust the torch.save
// reader or that are FIFOs, palette PNGs, a sequence whose pixel format changes midway, EXIF
// orientation, an encoder the output cannot hold, latent files with bad metadata, a precision a
// kind does not run, and a PNG declaring a size libav cannot decode.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "src/base/json_text.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"
#include "tests/support/stored_zip.h"

namespace wm::test {
namespace {

using namespace std::string_literals;

// Lines: 1 task, 2 input, 3 output, 4 model, 5- `more`.
std::string upscale_job(const std::string& input, const std::string& output,
                        const std::string& more = "",
                        const std::string& model = "{kind: lanczos, scale: 2}") {
  return "task: upscale\ninput: '" + input + "'\noutput: '" + output + "'\nmodel: " + model + "\n" +
         more;
}

// --- 7: --report never replaces a file that is not a previous report -------------------------

TEST(HostileMedia, ReportNeverReplacesAJobFile) {
  TempDir dir("hostile-report");
  make_image(dir.file("a.mkv"), "ffv1", "yuv444p");
  const std::string a = upscale_job(dir.file("a.mkv"), dir.file("out/a.mkv"));
  const std::string b = upscale_job(dir.file("a.mkv"), dir.file("out/b.mkv"));
  write_text(dir.file("a.yaml"), a);
  write_text(dir.file("b.yaml"), b);
  // `wmbatch --report *.yaml`: the shell gives `--report a.yaml b.yaml`.
  CommandResult r = wmbatch({"--report", dir.file("a.yaml"), dir.file("b.yaml")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(
      r.output.find("--report " + dir.file("a.yaml") + ": exists and is not a wmbatch report"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(read_text(dir.file("a.yaml")), a);  // the job file is untouched
  EXPECT_FALSE(exists(dir.file("out/b.mkv")));  // refused before any work

  // A folder is refused too; a new file, an empty file and a previous report are written.
  std::filesystem::create_directories(dir.file("folder.json"));
  r = wmbatch({"--report", dir.file("folder.json"), dir.file("b.yaml")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(r.output.find("is a folder"), std::string::npos) << r.output;
  write_text(dir.file("empty.json"), "");
  r = wmbatch({"--report", dir.file("empty.json"), dir.file("b.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string first = read_text(dir.file("empty.json"));
  EXPECT_NE(first.find("\"inputs\""), std::string::npos) << first;
  write_text(dir.file("b.yaml"), b + "on_exists: overwrite\n");
  r = wmbatch({"--report", dir.file("empty.json"), dir.file("b.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(read_text(dir.file("empty.json")), first);  // the previous report was replaced
  // JSON that is not a report (a list of something else) is not replaced either.
  write_text(dir.file("other.json"), "[{\"name\": \"x\"}]\n");
  r = wmbatch({"--report", dir.file("other.json"), dir.file("b.yaml")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_EQ(read_text(dir.file("other.json")), "[{\"name\": \"x\"}]\n");
}

// --- 8: file names that are not UTF-8 --------------------------------------------------------

TEST(HostileMedia, FileNamesThatAreNotUtf8SurviveReportPlanAndFarmRun) {
  TempDir dir("hostile-latin1");
  const std::string name = "caf\xe9";  // Latin-1 "café": not UTF-8
  std::filesystem::create_directories(dir.file("clips"));
  make_image(dir.file("clips/" + name + ".mkv"), "ffv1", "yuv444p", 24, 16, 3);
  write_text(dir.file("job.yaml"),
             upscale_job(dir.file("clips/*.mkv"), dir.file("out/{stem}.mkv")));
  CommandResult r = wmbatch({"--report", dir.file("report.json"), dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;  // once 70, after the output was written
  EXPECT_TRUE(exists(dir.file("out/" + name + ".mkv")));
  const std::string text = read_text(dir.file("report.json"));
  EXPECT_NE(text.find("caf\\udce9.mkv"), std::string::npos) << text;  // Python's os.fsdecode form
  const nlohmann::json report = json_parse(text);
  EXPECT_EQ(report.at(0).at("inputs").at(0).at("input").get<std::string>(),
            dir.file("clips/" + name + ".mkv"));
  EXPECT_EQ(report.at(0).at("inputs").at(0).at("output").get<std::string>(),
            dir.file("out/" + name + ".mkv"));

  // The farm: plan's JSON (once an abort, 134), then every chunk and the assembly (once 70).
  write_text(dir.file("farm.yaml"),
             upscale_job(dir.file("clips/*.mkv"), dir.file("farm/{stem}.mkv")));
  r = run_command({wmbatch_path(), "plan", dir.file("farm.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = json_parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(plan.at("chunks").at(0).at("input").get<std::string>(),
            dir.file("clips/" + name + ".mkv"));
  // --keep-journal: a finished farm job's journal goes by default; kept, the second run reads
  // its records (the name among them) back and finds the job done.
  r = run_command(
      {wmbatch_path(), "run", "--progress", "none", "--keep-journal", dir.file("farm.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("farm/" + name + ".mkv")).video_frames, 3);
  r = run_command({wmbatch_path(), "run", "--progress", "none",
                   dir.file("farm.yaml")});  // done: the journal's records read back
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// --- 10, 20: model files built to exhaust the reader, FIFOs, long error lines ---------------

std::string checkpoint(const std::string& pickle) {
  return stored_zip({{"archive/data.pkl", pickle}, {"archive/version", "3\n"}});
}

TEST(HostileMedia, HostileTorchCheckpointsFailWithOneShortLine) {
  TempDir dir("hostile-pth");
  make_image(dir.file("a.mkv"), "ffv1", "yuv444p");
  const auto run_with = [&](const std::string& weights) {
    write_text(dir.file("job.yaml"), upscale_job(dir.file("a.mkv"), dir.file("out/a.mkv"), "",
                                                 "{kind: realesrgan, weights: '" + weights + "'}"));
    return wmbatch({dir.file("job.yaml")});
  };
  // 2 million nested tuples (2 MB, allowed opcodes only): once SIGSEGV.
  std::string deep = "\x80\x02)";
  deep.append(2'000'000, '\x85');
  write_text(dir.file("deep.pth"), checkpoint(deep + "0}."));
  CommandResult r = run_with(dir.file("deep.pth"));
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(dir.file("deep.pth") + ": refused"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nested more than 100 deep"), std::string::npos) << r.output;

  // 100 000 keys, none a tensor: the error lists a few (once a 3 MB line).
  std::string keys = "\x80\x02}(";
  for (int i = 0; i < 100'000; ++i) {
    const std::string key = "key_" + std::to_string(i);
    keys += 'X';
    put_le(keys, key.size(), 4);
    keys += key + "K\x01";
  }
  write_text(dir.file("keys.pth"), checkpoint(keys + "u."));
  r = run_with(dir.file("keys.pth"));
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("and 99992 more)"), std::string::npos) << r.output.substr(0, 2000);
  EXPECT_LT(r.output.size(), 4000u) << r.output.substr(0, 2000);
  EXPECT_FALSE(exists(dir.file("out/a.mkv")));

  // A FIFO as weights: refused at validation, not waited on (once a hang).
  ASSERT_EQ(::mkfifo(dir.file("fifo.pth").c_str(), 0600), 0);
  r = run_with(dir.file("fifo.pth"));
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("job.yaml:4: model.weights: " + dir.file("fifo.pth") + " is a FIFO"),
            std::string::npos)
      << r.output;
}

// --- 12: palette images ----------------------------------------------------------------------

TEST(HostileMedia, PalettePngsAreWrittenAsRgbOrRgba) {
  TempDir dir("hostile-pal8");
  const std::string palette =
      "split[a][b];[a]palettegen=max_colors=16:reserve_transparent=%d[p];[b][p]paletteuse";
  for (const bool transparent : {false, true}) {
    SCOPED_TRACE(transparent ? "transparent" : "opaque");
    const std::string name = transparent ? "clear" : "solid";
    char graph[256];
    std::snprintf(graph, sizeof graph, palette.c_str(), transparent ? 1 : 0);
    const std::string source =
        transparent ? "testsrc2=s=24x16:r=1:d=1,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':"
                      "a='if(lt(X,8),0,255)'"
                    : "testsrc2=s=24x16:r=1:d=1";
    CommandResult made = run_command({"ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-vf",
                                      graph, "-frames:v", "1", dir.file(name + ".png")});
    ASSERT_EQ(made.exit_code, 0) << made.output;
    ASSERT_EQ(probe(dir.file(name + ".png")).pix_fmt, "pal8");
    write_text(dir.file("job.yaml"),
               upscale_job(dir.file(name + ".png"), dir.file("out/{stem}.png")));
    const CommandResult r = wmbatch({dir.file("job.yaml")});
    ASSERT_EQ(r.exit_code, 0) << r.output;  // once 70: "gbrpf32le -> pal8: sws_init_context"
    const std::string out = dir.file("out/" + name + ".png");
    EXPECT_EQ(probe(out).pix_fmt, transparent ? "rgba" : "rgb24");
    const auto in = read_all(dir.file(name + ".png"));
    const auto result = read_all(out);
    ASSERT_EQ(result.size(), 1u);
    EXPECT_LE(max_abs_diff(result[0].image, lanczos_x2(in[0].image)), 1.0 / 255 + 1e-5);
    if (transparent) {
      // The palette's alpha is kept: the left third transparent, the rest opaque.
      ASSERT_FALSE(result[0].alpha.empty());
      EXPECT_EQ(result[0].alpha.plane(0, 0)[2], 0.0f);
      EXPECT_EQ(result[0].alpha.plane(0, 0)[40], 1.0f);
    }
  }
}

// --- 13: a pixel format that changes midway --------------------------------------------------

TEST(HostileMedia, ASequenceWithOneSixteenBitFrameIsRefused) {
  TempDir dir("hostile-depth");
  std::filesystem::create_directories(dir.file("seq"));
  make_image(dir.file("seq/000001.png"), "png", "rgb24");
  make_image(dir.file("seq/000002.png"), "png", "rgb48be");
  make_image(dir.file("seq/000003.png"), "png", "rgb24");
  write_text(dir.file("job.yaml"),
             upscale_job(dir.file("seq/%06d.png"), dir.file("out/{stem}/%06d.png")));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  // Once written all 8-bit with exit 0 and nothing in `dropped`.
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(dir.file("seq/%06d.png") + ": frame 1 (" + dir.file("seq/000002.png") +
                          ") is rgb48be (16-bit colour) after frames of rgb24 (8-bit colour)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("out/seq")));
}

// --- 14: EXIF orientation --------------------------------------------------------------------

// A JPEG of 24x16 pixels whose EXIF says "turn 90 degrees clockwise to show" (orientation 6).
void make_exif_jpeg(const std::string& path) {
  make_image(path, "mjpeg", "yuvj444p");
  const std::string jpeg = read_text(path);
  std::string tiff = "II*\0"s;
  put_le(tiff, 8, 4);
  put_le(tiff, 1, 2);  // one entry: Orientation (0x0112), SHORT, 1 value: 6
  put_le(tiff, 0x0112, 2), put_le(tiff, 3, 2), put_le(tiff, 1, 4), put_le(tiff, 6, 2);
  put_le(tiff, 0, 2), put_le(tiff, 0, 4);
  const std::string app1 = "Exif\0\0"s + tiff;
  std::string segment = "\xff\xe1"s;
  segment += char((app1.size() + 2) >> 8);
  segment += char((app1.size() + 2) & 0xff);
  write_text(path, jpeg.substr(0, 2) + segment + app1 + jpeg.substr(2));
}

TEST(HostileMedia, ExifOrientationIsAppliedOrKept) {
  TempDir dir("hostile-exif");
  make_exif_jpeg(dir.file("photo.jpg"));
  const auto in = read_all(dir.file("photo.jpg"));
  ASSERT_EQ(in.size(), 1u);
  ASSERT_EQ(in[0].image.width, 24);
  // An image cannot store the rotation: the pixels are turned (once it came out sideways).
  write_text(dir.file("png.yaml"), upscale_job(dir.file("photo.jpg"), dir.file("out/{stem}.png")));
  CommandResult r = wmbatch({dir.file("png.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto png = read_all(dir.file("out/photo.png"));
  ASSERT_EQ(png.size(), 1u);
  EXPECT_EQ(png[0].image.width, 32);
  EXPECT_EQ(png[0].image.height, 48);
  EXPECT_LE(max_abs_diff(png[0].image, turn_clockwise(lanczos_x2(in[0].image))), 1.0 / 255 + 1e-5);
  // An mp4 stores it: the pixels stay as they are and the display matrix says -90 degrees.
  write_text(dir.file("mp4.yaml"),
             upscale_job(dir.file("photo.jpg"), dir.file("out/{stem}.mp4"), "encode: {crf: 0}\n"));
  r = wmbatch({dir.file("mp4.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe mp4 = probe(dir.file("out/photo.mp4"));
  EXPECT_EQ(mp4.width, 48);
  EXPECT_EQ(mp4.height, 32);
  EXPECT_EQ(mp4.rotation, -90.0);
}

// --- 15: a '%' in a real file's name ---------------------------------------------------------

TEST(HostileMedia, APercentInARealFileNameIsNoSequenceNumber) {
  TempDir dir("hostile-percent");
  make_image(dir.file("50%discount.mkv"), "ffv1", "yuv444p", 24, 16, 2);
  write_text(dir.file("video.yaml"),
             upscale_job(dir.file("50%discount.mkv"), dir.file("out/{stem}_x2.mkv")));
  CommandResult r = wmbatch({dir.file("video.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out/50%discount_x2.mkv")).video_frames, 2);  // once "50iscount"

  // An image named like a pattern is that one image (once "no file of this image sequence").
  // (Made under another name: libav's image2 muxer would take the name as a pattern too.)
  make_image(dir.file("pct.png"), "png", "rgb24");
  std::filesystem::rename(dir.file("pct.png"), dir.file("pct%03d.png"));
  write_text(dir.file("image.yaml"),
             upscale_job(dir.file("pct%03d.png"), dir.file("out/{stem}.mkv")));
  r = wmbatch({dir.file("image.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out/pct%03d.mkv")).video_frames, 1);
  // Into an image output its name would make a numbered sequence (whose folder, out/, is
  // replaced whole): refused before any work.
  write_text(dir.file("png.yaml"),
             upscale_job(dir.file("pct%03d.png"), dir.file("out/{stem}.png")));
  r = wmbatch({dir.file("png.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(
      r.output.find("png.yaml:3: output: " + dir.file("out/pct%03d.png") + ": the name of input"),
      std::string::npos)
      << r.output;
  EXPECT_TRUE(exists(dir.file("out/50%discount_x2.mkv")));  // out/ untouched
}

// --- 16: an encoder the output cannot hold ---------------------------------------------------

TEST(HostileMedia, AnEncoderTheOutputCannotHoldIsRefusedBeforeAnyJob) {
  TempDir dir("hostile-codec");
  make_image(dir.file("a.png"), "png", "rgb24");
  write_text(dir.file("first.yaml"), upscale_job(dir.file("a.png"), dir.file("out/first.png")));
  write_text(dir.file("second.yaml"), upscale_job(dir.file("a.png"), dir.file("out/second.png"),
                                                  "encode:\n  codec: libx264\n"));
  CommandResult r = wmbatch({dir.file("first.yaml"), dir.file("second.yaml")});
  // Once: the first job ran, then the second failed with exit 73 and no file:line:key.
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(dir.file("second.yaml") +
                          ":6: encode.codec: encoder libx264 writes h264, not the image format "
                          "png"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("out/first.png")));
  // A container that cannot hold the default encoder's codec.
  write_text(dir.file("webm.yaml"), upscale_job(dir.file("a.png"), dir.file("out/{stem}.webm")));
  r = wmbatch({dir.file("webm.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("webm.yaml:3: output: " + dir.file("out/{stem}.webm") +
                          ": container webm cannot hold h264"),
            std::string::npos)
      << r.output;
}

// --- 17: latent files with bad metadata ------------------------------------------------------

TEST(HostileMedia, LatentMetadataIsChecked) {
  TempDir dir("hostile-latent");
  const Planar latent = read_planar(golden_file("decode_t5.safetensors"), "input");
  const std::vector<int64_t> shape = {latent.channels, latent.frames, latent.height, latent.width};
  const std::string model =
      "model: {kind: wan2.1-vae, weights: '" + golden_file("weights.safetensors") + "', dim: 16}\n";
  struct Case {
    std::string key, value;
  };
  for (const Case& c : {Case{"fps", "abc"}, Case{"fps", "0"}, Case{"fps", "nan"},
                        Case{"frames", "0"}, Case{"frames", "abc"}, Case{"frames", "2.5"}}) {
    SCOPED_TRACE(c.key + "=" + c.value);
    io::write_safetensors(dir.file("lat.safetensors"),
                          {{"latent", "F32", shape, latent.data.data(), latent.data.size() * 4}},
                          {{c.key, c.value}});
    write_text(dir.file("job.yaml"), "task: decode_latents\ninput: '" +
                                         dir.file("lat.safetensors") + "'\noutput: '" +
                                         dir.file("out.mkv") + "'\n" + model);
    const CommandResult r = wmbatch({dir.file("job.yaml")});
    // Once 70 ("abc", "nan", fps "0") or a retryable 74 (frames "0").
    EXPECT_EQ(r.exit_code, 65) << r.output;
    EXPECT_NE(r.output.find(dir.file("lat.safetensors") + ": metadata " + c.key + " '" + c.value +
                            "' is not"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(exists(dir.file("out.mkv")));
  }
}

// --- 20: a precision the kind does not run; a size libav cannot decode -----------------------

TEST(HostileMedia, APrecisionTheKindDoesNotRunIsRefused) {
  TempDir dir("hostile-precision");
  make_image(dir.file("a.png"), "png", "rgb24");
  write_text(dir.file("job.yaml"),
             upscale_job(dir.file("a.png"), dir.file("out/{stem}.png"), "precision: bf16\n"));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;  // once run in fp32 without a word
  EXPECT_NE(r.output.find("job.yaml:5: precision: kind lanczos runs fp32 only, not bf16"),
            std::string::npos)
      << r.output;
}

TEST(HostileMedia, APngTooLargeForLibavSaysTheLimit) {
  TempDir dir("hostile-huge");
  // IHDR of 100000 x 100000 RGB (CRCs are not checked by libav's decoder).
  std::string png = "\x89PNG\r\n\x1a\n"s;
  const auto be32 = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) png += char((v >> (8 * i)) & 0xff);
  };
  be32(13);
  png += "IHDR";
  be32(100000), be32(100000);
  png += "\x08\x02\x00\x00\x00"s;
  be32(0);
  be32(0), png += "IEND", be32(0);
  write_text(dir.file("huge.png"), png);
  write_text(dir.file("job.yaml"), upscale_job(dir.file("huge.png"), dir.file("out/{stem}.png")));
  const CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;  // once "truncated or corrupt"
  EXPECT_NE(r.output.find(dir.file("huge.png") +
                          ": the image declares 100000x100000 pixels, more than libav decodes"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace wm::test
