// edgeship's browser runner: what runner.py does on a device, done by onnxruntime-web in a page.
// The host (devices/browser.py) calls open(job) to load the artifact and the input batches,
// first() to time the first run after the load on its own, time(warmup, iterations) to time runs of
// the first batch with performance.now(), and outputs()
// for every batch's outputs, from which it computes accuracy exactly as for every other runtime.
import * as ort from "./ort/ort.wasm.min.mjs";

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
  int16: Int16Array, int8: Int8Array, uint8: Uint8Array, uint16: Uint16Array, bool: Uint8Array,
};
const LEVELS = { disabled: "disabled", basic: "basic", extended: "extended", all: "all" };

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

function tensorOf(bytes, input) {
  const Kind = ARRAYS[input.dtype];
  if (!Kind) throw new Error(`input ${input.name}: dtype ${input.dtype} is not supported by this page`);
  const data = new Kind(bytes.buffer, bytes.byteOffset, bytes.byteLength / Kind.BYTES_PER_ELEMENT);
  return new ort.Tensor(input.dtype, data, input.shape);
}

function base64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

function encode(outputs, names) {
  return names.map((name) => {
    const t = outputs[name];
    const data = t.data;
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return { name, dtype: t.type, dims: Array.from(t.dims), data: base64(bytes) };
  });
}

let current = null;  // the open session and its inputs, between open() and close()

// Load the artifact and the job's input batches; the session stays open for time() and outputs().
export async function open(job) {
  ort.env.wasm.wasmPaths = new URL("./ort/", location.href).href;  // served beside the page: no CDN
  ort.env.wasm.numThreads = job.threads || navigator.hardwareConcurrency;  // onnxruntime-web drops to 1 without isolation
  ort.env.wasm.proxy = false;
  ort.env.logLevel = "error";
  const options = {
    executionProviders: ["wasm"],
    graphOptimizationLevel: LEVELS[job.options.graph_optimization || "all"],
  };
  if (job.external_data.length) {  // weights beside the model, fetched by onnxruntime-web from the server
    options.externalData = job.external_data.map((name) => ({ path: name, data: name }));
  }
  const model = await fetchBytes(job.artifact);
  const batches = [];
  for (const files of job.batches) {
    const feeds = {};
    for (let i = 0; i < job.inputs.length; i++) {
      feeds[job.inputs[i].name] = tensorOf(await fetchBytes(files[i]), job.inputs[i]);
    }
    batches.push(feeds);
  }
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(model, options);
  current = { session, batches };
  return {
    loadMs: performance.now() - t0,
    outputNames: session.outputNames,
    ortVersion: ort.env.versions.web,
    threads: ort.env.wasm.numThreads,
    crossOriginIsolated: self.crossOriginIsolated,
    hardwareConcurrency: navigator.hardwareConcurrency,
    userAgent: navigator.userAgent,
  };
}

// Milliseconds of the first run of the first batch after the load, timed on its own (a warmup run).
export async function first() {
  const { session, batches } = current;
  const start = performance.now();
  await session.run(batches[0]);
  return performance.now() - start;
}

// Milliseconds of each of `iterations` runs of the first batch, after `warmup` untimed ones.
export async function time(warmup, iterations) {
  const { session, batches } = current;
  for (let i = 0; i < warmup; i++) await session.run(batches[0]);
  const timings = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await session.run(batches[0]);
    timings.push(performance.now() - start);
  }
  return timings;
}

// Every batch's outputs, encoded for the host.
export async function outputs() {
  const { session, batches } = current;
  const out = [];
  for (const feeds of batches) out.push(encode(await session.run(feeds), session.outputNames));
  return out;
}

export async function close() {
  if (current) await current.session.release();
  current = null;
}
