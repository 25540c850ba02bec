// Jobs on models that run on named tensors (src/models/tensor_model.h): task dit, and upscale of
// a .safetensors input by such a model (SeedVR2's whole pipeline as one batch). The input file's
// tensors go in, the model's outputs (with job.debug_tensors, every intermediate) come out into
// one .safetensors file written atomically. This is how the golden cases run as jobs.
#include <cstring>
#include <string>
#include <vector>

#include "scheduler/tasks.h"
#include "src/base/error.h"
#include "src/models/tensor_model.h"
#include "src/weights/safetensors.h"

namespace wm::sched {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

HostTensor read_tensor(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorInfo& info = file.info(name);
  HostTensor t;
  t.name = name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.bytes.resize(info.bytes);
  std::memcpy(t.bytes.data(), info.data, info.bytes);
  return t;
}

class TensorRunner : public TaskRunner {
 public:
  explicit TensorRunner(const JobSpec& job)
      : job_(job), models_(job.model, job.devices, job.device_ids, job.parallel) {}
  const ModelSet* model_set() const override { return &models_; }

  int64_t process(const std::string& input, const std::string& output, const RunOptions& options,
                  Progress& progress) override {
    (void)options;
    return run_tensor_model(job_, models_, input, output, progress).frames;
  }

 private:
  JobSpec job_;
  ModelSet models_;
};

}  // namespace

TaskResult run_tensor_model(const JobSpec& job, const ModelSet& models, const std::string& input,
                            const std::string& output, Progress& progress) {
  const auto* model = dynamic_cast<const TensorModel*>(&models.model());
  if (!model) {
    throw ConfigError(
        job.file, job.line, "model",
        "kind " + job.model.kind + " does not run on tensors (task " + to_string(job.task) + ")");
  }
  if (!ends_with(input, ".safetensors")) {
    throw InputError(
        input + ": task " + std::string(to_string(job.task)) + " reads .safetensors files",
        kExitDataErr);
  }
  if (!ends_with(output, ".safetensors")) {
    throw ConfigError(
        job.file, job.output_line, "output",
        "a .safetensors input is written to a .safetensors output (got '" + output + "')");
  }
  const io::SafetensorsFile file(input);
  std::vector<HostTensor> inputs;
  std::string op;
  int64_t frames = 1;
  if (job.task == Task::kDit) {
    op = "dit";
    for (const std::string& name : file.names()) inputs.push_back(read_tensor(file, name));
  } else {
    op = "upscale";
    inputs.push_back(read_tensor(file, job.input_tensor));
    if (!inputs.front().shape.empty()) frames = inputs.front().shape.front();
  }
  progress.begin(input, frames);
  const std::vector<HostTensor> outputs = model->run_tensors(op, inputs, job.debug_tensors);
  progress.add(frames);
  progress.end();
  std::vector<io::TensorEntry> entries;
  for (const HostTensor& t : outputs) {
    // A name written twice (an intermediate the model shows more than once) keeps its first.
    bool seen = false;
    for (const io::TensorEntry& e : entries) seen = seen || e.name == t.name;
    if (seen) continue;
    io::TensorEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.data = t.bytes.data();
    e.bytes = t.bytes.size();
    entries.push_back(e);
  }
  io::write_safetensors(output, entries,
                        {{"source", input}, {"model", models.traits().name}, {"op", op}});
  return TaskResult{frames, {}, {}};
}

std::unique_ptr<TaskRunner> make_tensor_task_runner(const JobSpec& job) {
  return std::make_unique<TensorRunner>(job);
}

}  // namespace wm::sched
