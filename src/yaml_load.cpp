#include "src/yaml_load.h"

#include <charconv>
#include <cmath>
#include <locale>
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

namespace {
bool plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() != "!"; }
}  // namespace

std::optional<double> yaml_number(const YAML::Node& node) {
  if (!plain_scalar(node) || node.Scalar().empty()) return std::nullopt;
  std::istringstream in(node.Scalar());
  in.imbue(std::locale::classic());
  double v = 0;
  in >> v;
  if (in.fail() || in.peek() != std::char_traits<char>::eof() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<long long> yaml_integer(const YAML::Node& node) {
  if (!plain_scalar(node)) return std::nullopt;
  const std::string& s = node.Scalar();
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<bool> yaml_flag(const YAML::Node& node) {
  bool v = false;
  if (!plain_scalar(node) || !YAML::convert<bool>::decode(node, v)) return std::nullopt;
  return v;
}

}  // namespace wm
