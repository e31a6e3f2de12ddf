// What the bundles' C++ programs share (the linux bundle's edgeship_run, the x86 bundle's program):
// the exit codes and Failure (a message and the code a program ends with), the command
// line (Options, parse_args), NpyHeader (the dictionary of a .npy file's header, numpy's format 1.0
// and 2.0), the median and JSON string quoting. Standard C++ only; each bundle ships this file beside
// its main.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <istream>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace edgeship {

constexpr int kRunFailed = 1;
constexpr int kRefused = 2;
constexpr int kWrongCpu = 3;

// A failure the program reports and exits with: its message and exit code.
struct Failure : std::runtime_error {
  Failure(int code, const std::string& message) : std::runtime_error(message), code(code) {}
  int code;
};

// The header's dictionary: {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8, 8), }
class NpyHeader {
 public:
  NpyHeader(std::string text, std::string path) : text_(std::move(text)), path_(std::move(path)) { parse(); }

  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;

 private:
  void parse() {
    expect('{');
    std::map<std::string, bool> seen;
    while (!next_is('}')) {
      std::string key = quoted();
      expect(':');
      if (key == "descr") {
        if (next_is('[')) refuse("a structured dtype (record fields); save a plain array");
        descr = quoted();
      } else if (key == "fortran_order") {
        fortran_order = word() == "True";
      } else if (key == "shape") {
        shape = tuple();
      } else {
        refuse("unknown header key '" + key + "'");
      }
      seen[key] = true;
      if (!next_is('}')) expect(',');
    }
    ++pos_;
    if (text_.find_first_not_of(" \n", pos_) != std::string::npos) refuse("text after the header's dictionary");
    if (seen.size() != 3) refuse("the header lacks descr, fortran_order or shape");
  }

  [[noreturn]] void refuse(const std::string& why) const {
    throw Failure(kRefused, path_ + ": not a .npy file this program reads: " + why);
  }
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool next_is(char c) {
    skip_spaces();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!next_is(c)) refuse(std::string("malformed header (expected '") + c + "' at character " +
                            std::to_string(pos_) + ")");
    ++pos_;
  }
  std::string quoted() {
    skip_spaces();
    char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') expect('\'');
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) refuse("malformed header (an unterminated string)");
    std::string value = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return value;
  }
  std::string word() {
    skip_spaces();
    for (const char* w : {"True", "False"}) {
      if (text_.compare(pos_, std::strlen(w), w) == 0) {
        pos_ += std::strlen(w);
        return w;
      }
    }
    refuse("fortran_order is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!next_is(')')) {
      size_t end = text_.find_first_not_of("0123456789", pos_);
      if (end == pos_ || end == std::string::npos) refuse("a shape that is not a tuple of whole numbers");
      dims.push_back(std::stoll(text_.substr(pos_, end - pos_)));
      pos_ = end;
      if (!next_is(')')) expect(',');
    }
    ++pos_;
    return dims;
  }

  std::string text_;
  std::string path_;
  size_t pos_ = 0;
};

inline uint32_t little_endian(const unsigned char* bytes, int count) {
  uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}


struct Options {
  std::string model;
  std::vector<std::string> inputs;
  int runs = 100;
  int warmup = 10;
  int threads = 0;  // 0: the runtime's default
  std::string out = "edgeship-out";
};

inline int parse_count(const std::string& flag, const std::string& text, int least) {
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || value < least) {
    throw Failure(kRefused, flag + " takes a whole number >= " + std::to_string(least) + ", not '" + text + "'");
  }
  return value;
}

// The command line: a model, its inputs, --runs/--warmup/--threads/--out; ``usage`` for --help and mistakes.
inline Options parse_args(int argc, char** argv, const char* usage) {
  Options options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool takes_value = arg == "--runs" || arg == "--warmup" || arg == "--threads" || arg == "--out";
    if (takes_value && i + 1 >= argc) throw Failure(kRefused, arg + " needs a value\n" + usage);
    if (arg == "--runs") options.runs = parse_count(arg, argv[++i], 1);
    else if (arg == "--warmup") options.warmup = parse_count(arg, argv[++i], 0);
    else if (arg == "--threads") options.threads = parse_count(arg, argv[++i], 1);
    else if (arg == "--out") options.out = argv[++i];
    else if (arg == "-h" || arg == "--help") throw Failure(0, usage);
    else if (arg.rfind("--", 0) == 0) throw Failure(kRefused, "unknown option " + arg + "\n" + usage);
    else positional.push_back(arg);
  }
  if (positional.size() < 2) {
    throw Failure(kRefused, "a model and at least one input are needed\n" + std::string(usage));
  }
  options.model = positional[0];
  options.inputs.assign(positional.begin() + 1, positional.end());
  return options;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// A JSON string literal of ``text``.
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
    else if (c < 0x20) out += "\\u00" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

// The header of the .npy file open in ``in``, which is left at the start of its data; refused
// (kRefused, naming ``path``) unless it is numpy's format 1.0 or 2.0 in C order.
inline NpyHeader read_npy_header(std::istream& in, const std::string& path) {
  unsigned char lead[8] = {};
  in.read(reinterpret_cast<char*>(lead), sizeof lead);
  if (!in || std::memcmp(lead, "\x93NUMPY", 6) != 0) {
    throw Failure(kRefused, path + ": not a .npy file (no \\x93NUMPY magic)");
  }
  if ((lead[6] != 1 && lead[6] != 2) || lead[7] != 0) {
    throw Failure(kRefused, path + ": .npy format version " + std::to_string(lead[6]) + "." + std::to_string(lead[7]) +
                                " (this program reads 1.0 and 2.0)");
  }
  unsigned char length[4] = {};
  int length_bytes = lead[6] == 1 ? 2 : 4;
  in.read(reinterpret_cast<char*>(length), length_bytes);
  std::string text(little_endian(length, length_bytes), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) throw Failure(kRefused, path + ": truncated .npy header");
  NpyHeader header(text, path);
  if (header.fortran_order) {
    throw Failure(kRefused, path + ": Fortran-order (column-major) data; save it in C order (numpy.ascontiguousarray)");
  }
  return header;
}

// The refusal of a .npy dtype the program has no tensor type for (``readable``: the ones it has).
[[noreturn]] inline void refuse_dtype(const std::string& descr, const std::string& path, const std::string& readable) {
  std::string why = descr.size() > 1 && descr[0] == '>' ? "big-endian data ('" + descr + "'); save it little-endian"
                                                         : "dtype '" + descr + "'";
  throw Failure(kRefused, path + ": not a .npy file this program reads: " + why + " (it reads " + readable + ")");
}

}  // namespace edgeship
