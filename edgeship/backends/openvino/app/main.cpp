// edgeship_openvino: runs an edgeship OpenVINO IR with the OpenVINO runtime's CPU plugin, as edgeship
// validated it, times it and writes what it answered.
//
//   edgeship_openvino <model.xml> <input.npy>... [--runs N] [--warmup W] [--threads T] [--out DIR]
//
// The IR (model.xml, its weights model.bin beside it; a model.openvino folder is taken too) records in
// its runtime info, under edgeship/inference_precision, the precision edgeship validated it in: f32 or
// bf16. It is compiled for the CPU with that ov::hint::inference_precision and
// ov::hint::performance_mode LATENCY, and what the plugin compiled for is read back: left alone, the
// plugin computes an f32 model in bf16 on CPUs with AVX512-BF16 or AMX, which is not the accuracy
// edgeship measured. The inputs are .npy files, one per model input in the model's order (model.json
// lists them). The first run's outputs are printed (shape, element type, top-1 of each row) and written
// to DIR/outputs/out0.npy, out1.npy ...; then W warmup runs, then N timed runs
// (std::chrono::steady_clock), written to DIR/timings.json.
//
// Exit codes: 0 done; 1 the model failed to load or run, or DIR could not be written; 2 bad arguments
// or an input file this program refuses; 3 this CPU's plugin cannot compute in the IR's precision.
#include <openvino/openvino.hpp>

#include "edgeship_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
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
    "usage: edgeship_openvino <model.xml> <input.npy>... [--runs N] [--warmup W] [--threads T] [--out DIR]\n"
    "  --runs N      timed runs (default 100)\n"
    "  --warmup W    untimed runs before them (default 10)\n"
    "  --threads T   the CPU plugin's INFERENCE_NUM_THREADS (default: the plugin's own choice)\n"
    "  --out DIR     where outputs/out<i>.npy and timings.json go (default edgeship-out)\n";


// ---- .npy files (numpy's format, versions 1.0 and 2.0): little-endian, C order, plain dtypes only.

struct NpyType {
  const char* descr;
  ov::element::Type type;
};

const NpyType kNpyTypes[] = {
    {"<f4", ov::element::f32}, {"<f8", ov::element::f64}, {"<f2", ov::element::f16},
    {"<i8", ov::element::i64}, {"<i4", ov::element::i32}, {"<i2", ov::element::i16},
    {"|i1", ov::element::i8},  {"|u1", ov::element::u8},  {"|b1", ov::element::boolean},
};

std::string npy_types() {
  std::string names;
  for (const auto& t : kNpyTypes) names += std::string(names.empty() ? "" : ", ") + t.descr;
  return names;
}


ov::element::Type npy_element_type(const std::string& descr, const std::string& path) {
  for (const auto& t : kNpyTypes) {
    if (descr == t.descr) return t.type;
  }
  edgeship::refuse_dtype(descr, path, npy_types());
}

ov::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(kRefused, path + ": cannot be opened");
  NpyHeader header = edgeship::read_npy_header(in, path);
  ov::element::Type type = npy_element_type(header.descr, path);
  ov::Tensor tensor(type, ov::Shape(header.shape.begin(), header.shape.end()));
  auto bytes = static_cast<std::streamsize>(tensor.get_byte_size());
  in.read(static_cast<char*>(tensor.data()), bytes);
  if (in.gcount() != bytes) {
    throw Failure(kRefused, path + ": holds " + std::to_string(in.gcount()) + " bytes of data, its header says " +
                                std::to_string(bytes));
  }
  if (in.peek() != std::char_traits<char>::eof()) throw Failure(kRefused, path + ": bytes after the array's data");
  return tensor;
}

void write_npy(const ov::Tensor& tensor, const fs::path& path) {
  const char* descr = nullptr;
  for (const auto& t : kNpyTypes) {
    if (t.type == tensor.get_element_type()) descr = t.descr;
  }
  if (descr == nullptr) {
    throw Failure(kRunFailed, path.string() + ": the output's element type " + tensor.get_element_type().to_string() +
                                  " has no .npy counterpart here (" + npy_types() + ")");
  }
  std::string shape;
  for (size_t d : tensor.get_shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (tensor.get_shape().size() == 1) shape += ",";  // a Python tuple of one
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ').push_back('\n');  // data starts on 64 bytes, as numpy's
  std::ofstream out(path, std::ios::binary);
  unsigned char lead[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xff),
                            static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(lead), sizeof lead);
  out << header;
  out.write(static_cast<const char*>(tensor.data()), static_cast<std::streamsize>(tensor.get_byte_size()));
  if (!out) throw Failure(kRunFailed, path.string() + ": cannot be written");
}

// ---- The model: read, compiled in the precision it was validated in, its inputs checked.

std::string model_xml(const std::string& path) {
  fs::path xml = fs::is_directory(path) ? fs::path(path) / "model.xml" : fs::path(path);
  if (!fs::is_regular_file(xml)) throw Failure(kRefused, xml.string() + ": no such file");
  return xml.string();
}

// What the IR records it was validated computing in ("f32", "bf16"), or "" for an IR edgeship did not write.
std::string recorded_precision(const std::shared_ptr<ov::Model>& model) {
  if (!model->has_rt_info("edgeship", "inference_precision")) return "";
  return model->get_rt_info<std::string>("edgeship", "inference_precision");
}

struct Compiled {
  ov::CompiledModel model;
  std::string precision;  // what the plugin compiled for
};

// Refuses (exit 3) to run a bf16 IR on a CPU without bf16 instructions, and any compilation whose
// precision is not the one asked: its numbers would not be the ones edgeship validated.
Compiled compile_for_cpu(ov::Core& core, const std::shared_ptr<ov::Model>& model, const std::string& precision,
                         int threads) {
  std::vector<std::string> capabilities = core.get_property("CPU", ov::device::capabilities);
  bool has_bf16 = std::find(capabilities.begin(), capabilities.end(), "BF16") != capabilities.end();
  if (precision == "bf16" && !has_bf16) {
    throw Failure(kWrongCpu, "this IR was validated computing in bf16 and this CPU has no bf16 instructions "
                             "(AVX512-BF16 or AMX): its plugin would compute in f32; use an fp32 or int8 variant");
  }
  ov::AnyMap config{ov::hint::performance_mode(ov::hint::PerformanceMode::LATENCY)};
  if (!precision.empty()) config.insert(ov::hint::inference_precision(ov::element::Type(precision)));
  if (threads) config.insert(ov::inference_num_threads(threads));
  ov::CompiledModel compiled = core.compile_model(model, "CPU", config);
  std::string used = compiled.get_property(ov::hint::inference_precision).get_type_name();
  if (!precision.empty() && used != precision) {
    throw Failure(kWrongCpu, "asked the CPU plugin to compute in " + precision + " and it compiled for " + used);
  }
  return {compiled, used};
}

std::vector<ov::Tensor> read_inputs(const std::vector<std::string>& paths, const ov::CompiledModel& compiled) {
  const auto& ports = compiled.inputs();
  if (paths.size() != ports.size()) {
    std::string names;
    for (const auto& p : ports) names += (names.empty() ? "" : ", ") + p.get_any_name();
    throw Failure(kRefused, "the model has " + std::to_string(ports.size()) + " input(s) (" + names + "); " +
                                std::to_string(paths.size()) + " .npy file(s) given");
  }
  std::vector<ov::Tensor> tensors;
  for (size_t i = 0; i < paths.size(); ++i) {
    ov::Tensor tensor = read_npy(paths[i]);
    const auto& port = ports[i];
    if (tensor.get_element_type() != port.get_element_type()) {
      throw Failure(kRefused, paths[i] + ": element type " + tensor.get_element_type().get_type_name() + "; input " +
                                  port.get_any_name() + " takes " + port.get_element_type().get_type_name());
    }
    if (!port.get_partial_shape().compatible(ov::PartialShape(tensor.get_shape()))) {
      throw Failure(kRefused, paths[i] + ": shape " + tensor.get_shape().to_string() + "; input " +
                                  port.get_any_name() + " takes " + port.get_partial_shape().to_string());
    }
    tensors.push_back(tensor);
  }
  return tensors;
}

// One line on an output: shape, element type and, for f32 scores, the top-1 index of each row.
std::string describe(const std::string& name, const ov::Tensor& tensor) {
  const ov::Shape& shape = tensor.get_shape();
  std::string text = name + ": shape " + shape.to_string() + ", " + tensor.get_element_type().get_type_name();
  if (tensor.get_element_type() != ov::element::f32 || shape.empty() || shape.back() < 2) return text;
  const float* data = tensor.data<const float>();
  size_t width = shape.back();
  std::string top;
  for (size_t row = 0; row < tensor.get_size() / width; ++row) {
    const float* begin = data + row * width;
    top += (top.empty() ? "" : ", ") + std::to_string(std::max_element(begin, begin + width) - begin);
  }
  return text + ", top-1 [" + top + "]";
}

// ---- Timing and the files written.


std::vector<double> time_runs(ov::InferRequest& request, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) request.infer();
  std::vector<double> timings_ms;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    request.infer();
    timings_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return timings_ms;
}


struct Report {
  std::string runtime;
  std::string recorded;  // the IR's edgeship/inference_precision
  std::string precision;  // what the plugin compiled for
  int threads;
  std::vector<std::string> outputs;
};

void write_timings(const fs::path& path, const Options& options, const Report& report,
                   const std::vector<double>& timings_ms) {
  std::ostringstream doc;
  doc.precision(6);
  doc << std::fixed << "{\n  \"runtime\": " << json_string(report.runtime) << ",\n  \"model\": "
      << json_string(options.model) << ",\n  \"inference_precision\": " << json_string(report.precision)
      << ",\n  \"recorded_precision\": " << (report.recorded.empty() ? "null" : json_string(report.recorded))
      << ",\n  \"performance_hint\": \"LATENCY\",\n  \"threads\": " << report.threads
      << ",\n  \"warmup\": " << options.warmup << ",\n  \"runs\": " << options.runs << ",\n  \"outputs\": [";
  for (size_t i = 0; i < report.outputs.size(); ++i) doc << (i ? ", " : "") << json_string(report.outputs[i]);
  doc << "],\n  \"timings_ms\": [";
  for (size_t i = 0; i < timings_ms.size(); ++i) doc << (i ? ", " : "") << timings_ms[i];
  doc << "],\n  \"p50_ms\": " << median(timings_ms) << ",\n  \"min_ms\": "
      << *std::min_element(timings_ms.begin(), timings_ms.end()) << "\n}\n";
  std::ofstream out(path);
  out << doc.str();
  if (!out) throw Failure(kRunFailed, path.string() + ": cannot be written");
}

std::string runtime_name() {
  std::string build = ov::get_openvino_version().buildNumber;
  return "openvino " + build.substr(0, build.find('-')) + " CPU";
}

int run(const Options& options) {
  ov::Core core;
  std::shared_ptr<ov::Model> model = core.read_model(model_xml(options.model));
  Report report{runtime_name(), recorded_precision(model), "", 0, {}};
  Compiled compiled = compile_for_cpu(core, model, report.recorded, options.threads);
  report.precision = compiled.precision;
  report.threads = static_cast<int>(compiled.model.get_property(ov::inference_num_threads));
  std::vector<ov::Tensor> inputs = read_inputs(options.inputs, compiled.model);
  ov::InferRequest request = compiled.model.create_infer_request();
  for (size_t i = 0; i < inputs.size(); ++i) request.set_input_tensor(i, inputs[i]);
  request.infer();
  fs::path out(options.out);
  fs::create_directories(out / "outputs");
  const auto& ports = compiled.model.outputs();
  for (size_t i = 0; i < ports.size(); ++i) {
    ov::Tensor output = request.get_output_tensor(i);
    report.outputs.push_back(ports[i].get_any_name());
    std::cout << describe(report.outputs.back(), output) << "\n";
    write_npy(output, out / "outputs" / ("out" + std::to_string(i) + ".npy"));
  }
  std::vector<double> timings_ms = time_runs(request, options.warmup, options.runs);
  write_timings(out / "timings.json", options, report, timings_ms);
  std::cout << report.runtime << ", " << report.precision << " inference, " << report.threads << " thread(s): p50 "
            << median(timings_ms) << " ms over " << options.runs << " runs; wrote " << ports.size()
            << " output(s) and timings.json to " << out.string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv, kUsage));
  } catch (const Failure& e) {
    std::cout.flush();
    (e.code ? std::cerr : std::cout) << (e.code ? "edgeship_openvino: " : "") << e.what() << "\n";
    return e.code;
  } catch (const std::exception& e) {  // ov::Exception among them: the runtime's own message
    std::cout.flush();
    std::cerr << "edgeship_openvino: OpenVINO: " << e.what() << "\n";
  }
  return kRunFailed;
}
