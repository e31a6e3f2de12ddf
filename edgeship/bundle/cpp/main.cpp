// edgeship_run: runs an edgeship artifact with LibTorch, times it and writes what it answered.
//
//   edgeship_run <model.pt2|model.pt> <input.npy>... [--runs N] [--warmup W] [--threads T] [--out DIR]
//
// A .pt2 (AOTInductor package) is loaded with torch::inductor::AOTIModelPackageLoader, after its
// metadata is checked against this CPU, and run with AOTInductor's input checks on; a .pt
// (TorchScript) is loaded with torch::jit::load. The inputs are .npy files, one per model input in
// the model's order (model.json lists them). The first run's outputs go to DIR/outputs/out0.npy,
// out1.npy ... (a TorchScript model's tuple, list or dict outputs flattened in order); then W
// warmup runs, then N timed runs (std::chrono::steady_clock), written to DIR/timings.json.
//
// Exit codes: 0 done; 1 the model failed to load or run, or DIR could not be written; 2 bad arguments
// or an input file this program refuses; 3 an AOTInductor package needing CPU flags this CPU lacks.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <sys/utsname.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>
#include <torch/version.h>

#include "edgeship_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace fs = std::filesystem;

using edgeship::Failure;
using edgeship::kRefused;
using edgeship::kRunFailed;
using edgeship::kWrongCpu;
using edgeship::NpyHeader;
using edgeship::Options;
using edgeship::json_string;
using edgeship::median;
using edgeship::parse_args;

const char kUsage[] =
    "usage: edgeship_run <model.pt2|model.pt> <input.npy>... [--runs N] [--warmup W] [--threads T] [--out DIR]\n"
    "  --runs N      timed runs (default 100)\n"
    "  --warmup W    untimed runs before them (default 10)\n"
    "  --threads T   LibTorch's intra-op threads (default: LibTorch's own choice)\n"
    "  --out DIR     where outputs/out<i>.npy and timings.json go (default edgeship-out)\n";


// ---- .npy files (numpy's format, versions 1.0 and 2.0): little-endian, C order, plain dtypes only.

struct NpyType {
  const char* descr;
  at::ScalarType type;
};

const NpyType kNpyTypes[] = {
    {"<f4", at::kFloat}, {"<f8", at::kDouble}, {"<f2", at::kHalf}, {"<i8", at::kLong}, {"<i4", at::kInt},
    {"<i2", at::kShort}, {"|i1", at::kChar},   {"|u1", at::kByte}, {"|b1", at::kBool},
};

std::string npy_types() {
  std::string names;
  for (const auto& t : kNpyTypes) names += std::string(names.empty() ? "" : ", ") + t.descr;
  return names;
}


at::ScalarType npy_scalar_type(const std::string& descr, const std::string& path) {
  for (const auto& t : kNpyTypes) {
    if (descr == t.descr) return t.type;
  }
  edgeship::refuse_dtype(descr, path, npy_types());
}

at::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(kRefused, path + ": cannot be opened");
  NpyHeader header = edgeship::read_npy_header(in, path);
  at::ScalarType type = npy_scalar_type(header.descr, path);
  at::Tensor tensor = at::empty(header.shape, at::TensorOptions().dtype(type));
  auto bytes = static_cast<std::streamsize>(tensor.nbytes());
  in.read(static_cast<char*>(tensor.data_ptr()), bytes);
  if (in.gcount() != bytes) {
    throw Failure(kRefused, path + ": holds " + std::to_string(in.gcount()) + " bytes of data, its header says " +
                                std::to_string(bytes));
  }
  if (in.peek() != std::char_traits<char>::eof()) throw Failure(kRefused, path + ": bytes after the array's data");
  return tensor;
}

void write_npy(const at::Tensor& output, const fs::path& path) {
  at::Tensor tensor = output.detach().cpu().contiguous();
  const char* descr = nullptr;
  for (const auto& t : kNpyTypes) {
    if (t.type == tensor.scalar_type()) descr = t.descr;
  }
  if (descr == nullptr) {
    throw Failure(kRunFailed, path.string() + ": the output's dtype " + c10::toString(tensor.scalar_type()) +
                                  " has no .npy counterpart here (" + npy_types() + ")");
  }
  std::string shape;
  for (int64_t d : tensor.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (tensor.dim() == 1) shape += ",";  // a Python tuple of one
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ').push_back('\n');  // data starts on 64 bytes, as numpy's
  std::ofstream out(path, std::ios::binary);
  unsigned char lead[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xff),
                            static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(lead), sizeof lead);
  out << header;
  out.write(static_cast<const char*>(tensor.data_ptr()), static_cast<std::streamsize>(tensor.nbytes()));
  if (!out) throw Failure(kRunFailed, path.string() + ": cannot be written");
}

// ---- The CPU an AOTInductor package needs (its metadata's edgeship.cpu_flags, Linux's flag names).

// Linux's name -> whether this CPU has it, for the extensions this compiler's __builtin_cpu_supports knows.
std::map<std::string, bool> compiler_cpu_flags() {
  std::map<std::string, bool> has;
#if defined(__x86_64__) || defined(__i386__)
#define EDGESHIP_FLAG(linux_name, gcc_name) has[linux_name] = __builtin_cpu_supports(gcc_name) != 0
  __builtin_cpu_init();
  EDGESHIP_FLAG("popcnt", "popcnt");
  EDGESHIP_FLAG("sse4_1", "sse4.1");
  EDGESHIP_FLAG("sse4_2", "sse4.2");
  EDGESHIP_FLAG("avx", "avx");
  EDGESHIP_FLAG("avx2", "avx2");
  EDGESHIP_FLAG("fma", "fma");
  EDGESHIP_FLAG("bmi1", "bmi");
  EDGESHIP_FLAG("bmi2", "bmi2");
  EDGESHIP_FLAG("aes", "aes");
  EDGESHIP_FLAG("pclmulqdq", "pclmul");
  EDGESHIP_FLAG("avx512f", "avx512f");
  EDGESHIP_FLAG("avx512bw", "avx512bw");
  EDGESHIP_FLAG("avx512cd", "avx512cd");
  EDGESHIP_FLAG("avx512dq", "avx512dq");
  EDGESHIP_FLAG("avx512vl", "avx512vl");
  EDGESHIP_FLAG("avx512ifma", "avx512ifma");
  EDGESHIP_FLAG("avx512vbmi", "avx512vbmi");
  EDGESHIP_FLAG("avx512_vbmi2", "avx512vbmi2");
  EDGESHIP_FLAG("avx512_vnni", "avx512vnni");
  EDGESHIP_FLAG("avx512_bitalg", "avx512bitalg");
  EDGESHIP_FLAG("avx512_vpopcntdq", "avx512vpopcntdq");
  EDGESHIP_FLAG("gfni", "gfni");
  EDGESHIP_FLAG("vpclmulqdq", "vpclmulqdq");
#if !defined(__clang__) && __GNUC__ >= 12  // names gcc 12 added
  EDGESHIP_FLAG("adx", "adx");
  EDGESHIP_FLAG("f16c", "f16c");
  EDGESHIP_FLAG("movbe", "movbe");
  EDGESHIP_FLAG("sha_ni", "sha");
  EDGESHIP_FLAG("vaes", "vaes");
  EDGESHIP_FLAG("avx512_bf16", "avx512bf16");
  EDGESHIP_FLAG("avx512_fp16", "avx512fp16");
  EDGESHIP_FLAG("avx_vnni", "avxvnni");
  EDGESHIP_FLAG("amx_tile", "amx-tile");
  EDGESHIP_FLAG("amx_bf16", "amx-bf16");
  EDGESHIP_FLAG("amx_int8", "amx-int8");
#endif
#undef EDGESHIP_FLAG
#endif
  return has;
}

// The flags the kernel reports (/proc/cpuinfo's "flags", "Features" on Arm); none when unreadable.
std::optional<std::vector<std::string>> kernel_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    return flags;
  }
  return std::nullopt;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : ", ") + p;
  return text;
}

// Refuses (exit 3) a package compiled for another machine or for CPU flags this CPU lacks: its code
// would stop with an illegal instruction. Flags neither the compiler nor the kernel can answer for
// are named as not checked.
void check_cpu(const std::unordered_map<std::string, std::string>& metadata) {
  auto get = [&](const char* key) {
    auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
  };
  std::cout << "package: isa " << (get("edgeship.isa").empty() ? "?" : get("edgeship.isa")) << ", Inductor vector ISA "
            << (get("AOTI_CPU_ISA").empty() ? "?" : get("AOTI_CPU_ISA")) << ", machine " << get("AOTI_MACHINE") << "\n";
  utsname host{};
  std::string machine = uname(&host) == 0 ? host.machine : "";
  if (!get("AOTI_MACHINE").empty() && !machine.empty() && get("AOTI_MACHINE") != machine) {
    throw Failure(kWrongCpu, "this package was compiled for " + get("AOTI_MACHINE") + "; this machine is " + machine);
  }
  std::vector<std::string> needed = split(get("edgeship.cpu_flags"), ',');
  if (needed.empty()) {
    std::cout << "package: names no CPU flags it needs (edgeship.cpu_flags): not checked\n";
    return;
  }
  std::map<std::string, bool> compiler = compiler_cpu_flags();
  std::optional<std::vector<std::string>> kernel = kernel_cpu_flags();
  std::vector<std::string> lacking, unchecked;
  for (const auto& flag : needed) {
    if (compiler.count(flag)) {
      if (!compiler[flag]) lacking.push_back(flag);
    } else if (kernel) {
      if (std::find(kernel->begin(), kernel->end(), flag) == kernel->end()) lacking.push_back(flag);
    } else {
      unchecked.push_back(flag);
    }
  }
  if (!lacking.empty()) {
    throw Failure(kWrongCpu, "this package was compiled for a CPU with " + joined(needed) + "; this CPU lacks " +
                                 joined(lacking) + " and would stop with an illegal instruction: build the aoti "
                                 "variant for this device (options.isa = \"auto\" with it among the target's devices)");
  }
  std::cout << "package: this CPU has the " << needed.size() - unchecked.size() << " flags it needs";
  if (!unchecked.empty()) std::cout << "; not checked (unknown here): " << joined(unchecked);
  std::cout << "\n";
}

// ---- The models.

class Model {
 public:
  virtual ~Model() = default;
  virtual std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) = 0;
};

class AotiModel : public Model {
 public:
  explicit AotiModel(const std::string& path) : loader_(path) {}
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override { return loader_.run(inputs); }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};

void flatten(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) flatten(item, out);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) flatten(item, out);
  } else if (value.isGenericDict()) {
    for (const auto& item : value.toGenericDict()) flatten(item.value(), out);
  } else if (value.isInt() || value.isDouble() || value.isBool()) {
    c10::Scalar scalar = value.toScalar();
    out.push_back(at::scalar_tensor(scalar, at::TensorOptions().dtype(scalar.type())));
  } else {
    throw Failure(kRunFailed, "the model answered a " + value.tagKind() + ", which has no .npy form");
  }
}

class TorchScriptModel : public Model {
 public:
  explicit TorchScriptModel(const std::string& path) : module_(torch::jit::load(path, c10::Device("cpu"))) {
    module_.eval();
  }
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    std::vector<at::Tensor> outputs;
    flatten(module_.forward(std::vector<c10::IValue>(inputs.begin(), inputs.end())), outputs);
    return outputs;
  }

 private:
  torch::jit::Module module_;
};

// "aoti" or "torchscript", from the file's suffix; refuses a missing file or another suffix.
std::string model_kind(const std::string& path) {
  if (!fs::is_regular_file(path)) throw Failure(kRefused, path + ": no such file");
  std::string suffix = fs::path(path).extension().string();
  if (suffix == ".pt2") return "aoti";
  if (suffix == ".pt") return "torchscript";
  throw Failure(kRefused, path + ": a model is an AOTInductor package (.pt2) or TorchScript (.pt), not '" + suffix +
                              "'");
}

std::unique_ptr<Model> load_model(const std::string& path, const std::string& kind) {
  if (kind == "torchscript") return std::make_unique<TorchScriptModel>(path);
  // AOTInductor's generated code checks its inputs' dtype, sizes and strides only when this is set:
  // without it an input of another shape runs anyway, reading past its end. Setting it to 0 skips them.
  setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/0);
  check_cpu(torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model"));
  return std::make_unique<AotiModel>(path);
}

// ---- Timing and the files written.


std::vector<double> time_runs(Model& model, const std::vector<at::Tensor>& inputs, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) model.run(inputs);
  std::vector<double> timings_ms;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    model.run(inputs);
    timings_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return timings_ms;
}


void write_timings(const fs::path& path, const Options& options, const std::string& runtime,
                   const std::vector<double>& timings_ms, size_t outputs) {
  std::ostringstream doc;
  doc.precision(6);
  doc << std::fixed << "{\n  \"runtime\": " << json_string(runtime) << ",\n  \"model\": " << json_string(options.model)
      << ",\n  \"threads\": " << at::get_num_threads() << ",\n  \"warmup\": " << options.warmup
      << ",\n  \"runs\": " << options.runs << ",\n  \"outputs\": " << outputs << ",\n  \"timings_ms\": [";
  for (size_t i = 0; i < timings_ms.size(); ++i) doc << (i ? ", " : "") << timings_ms[i];
  doc << "],\n  \"p50_ms\": " << median(timings_ms) << ",\n  \"min_ms\": "
      << *std::min_element(timings_ms.begin(), timings_ms.end()) << "\n}\n";
  std::ofstream out(path);
  out << doc.str();
  if (!out) throw Failure(kRunFailed, path.string() + ": cannot be written");
}

int run(const Options& options) {
  std::string kind = model_kind(options.model);
  std::vector<at::Tensor> inputs;
  for (const auto& path : options.inputs) inputs.push_back(read_npy(path));
  if (options.threads) at::set_num_threads(options.threads);
  std::unique_ptr<Model> model = load_model(options.model, kind);
  c10::InferenceMode inference;
  std::vector<at::Tensor> outputs = model->run(inputs);
  fs::path out(options.out);
  fs::create_directories(out / "outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    write_npy(outputs[i], out / "outputs" / ("out" + std::to_string(i) + ".npy"));
  }
  std::vector<double> timings_ms = time_runs(*model, inputs, options.warmup, options.runs);
  std::string runtime = std::string("libtorch ") + TORCH_VERSION + " " + kind;
  write_timings(out / "timings.json", options, runtime, timings_ms, outputs.size());
  std::cout << runtime << ", " << at::get_num_threads() << " thread(s): p50 " << median(timings_ms) << " ms over "
            << options.runs << " runs; wrote " << outputs.size() << " output(s) and timings.json to " << out.string()
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv, kUsage));
  } catch (const Failure& e) {
    std::cout.flush();
    (e.code ? std::cerr : std::cout) << (e.code ? "edgeship_run: " : "") << e.what() << "\n";
    return e.code;
  } catch (const c10::Error& e) {
    std::cout.flush();
    std::cerr << "edgeship_run: LibTorch: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "edgeship_run: " << e.what() << "\n";
  }
  return kRunFailed;
}
