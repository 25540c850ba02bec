#include "src/yaml_load.h"

#include <sstream>

namespace wm {
namespace {

// Sees only where each document starts; LoadAll builds the nodes afterwards.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    // Every document consumes at least one token, so the next one starts further on; one that
    // starts where the previous one did will repeat forever.
    if (started_ && mark.pos == last_.pos) {
      throw YAML::ParserException(mark, "unexpected '" + token_at(mark) + "'");
    }
    started_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  explicit DocumentStarts(const std::string& text) : text_(text) {}

 private:
  std::string token_at(const YAML::Mark& mark) const {
    if (mark.pos < 0 || size_t(mark.pos) >= text_.size()) return "end of file";
    return text_.substr(size_t(mark.pos), 1);
  }

  const std::string& text_;
  bool started_ = false;
  YAML::Mark last_;
};

}  // namespace

std::vector<YAML::Node> load_yaml_documents(const std::string& text) {
  {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts guard(text);
    while (parser.HandleNextDocument(guard)) {
    }
  }
  return YAML::LoadAll(text);
}

}  // namespace wm
