// edgeship-model.js: this bundle's model in the browser, run by onnxruntime-web's WebAssembly backend.
//
//   import { loadModel } from "./edgeship-model.js";
//   const model = await loadModel("models/<variant>.onnx", { threads: 4 });
//   const { outputs, latencyMs } = await model.predict({ <input name>: typedArray });
//
// Written by edgeship for one model: MODEL below is the bundle's model.json (inputs, preprocessing,
// outputs, artifacts, the bundled sample). onnxruntime-web is imported from ./ort/ beside this file
// and loads its wasm files from there: nothing is fetched from a CDN. More than one thread needs a
// cross-origin isolated page (the host sends COOP and COEP headers; see README.md).
import * as ort from "./ort/ort.wasm.min.mjs";

export const MODEL = /*@EDGESHIP_MODEL@*/null;
export { ort };

const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
  int16: Int16Array, int8: Int8Array, uint8: Uint8Array, uint16: Uint16Array, bool: Uint8Array,
};
// .npy dtype strings (numpy's descr) and what they hold.
const NPY = {
  "<f4": "float32", "<f2": "float16", "<f8": "float64", "<i8": "int64", "<i4": "int32", "<i2": "int16",
  "|i1": "int8", "|u1": "uint8", "<u2": "uint16", "|b1": "bool",
};
const INTEGER_RANGE = { int64: [-(2n ** 63n), 2n ** 63n - 1n], int32: [-(2 ** 31), 2 ** 31 - 1], uint8: [0, 255], bool: [0, 1] };
const FLOATS = new Set(["float32", "float16", "float64"]);
const PRECISION_BITS = 22; // Pillow's fixed-point resampling of 8-bit images (Resample.c: 32 - 8 - 2)

let threadsSet = null;

/** How many wasm threads a model gets by default: every core when the page is cross-origin isolated, else one. */
export function defaultThreads() {
  return globalThis.crossOriginIsolated ? (navigator.hardwareConcurrency || 1) : 1;
}

/**
 * Load a model of this bundle (its .onnx URL, relative to the page) into an onnxruntime-web session.
 * `threads` is fixed by the first model loaded in the page (onnxruntime-web starts its wasm once);
 * without cross-origin isolation onnxruntime-web runs one thread whatever it is asked.
 */
export async function loadModel(url, { threads, graphOptimization } = {}) {
  if (threadsSet === null) {
    ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;
    ort.env.wasm.numThreads = threads || defaultThreads();
    ort.env.wasm.proxy = false;
    ort.env.logLevel = "error";
    threadsSet = ort.env.wasm.numThreads;
  }
  const href = new URL(url, globalThis.location ? location.href : import.meta.url).href;
  const artifact = MODEL.artifacts.find((a) => new URL(a.path, import.meta.url).href === href) || null;
  const level = graphOptimization || (artifact && artifact.runtime.graph_optimization) || "all";
  const response = await fetch(href);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  const session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: level });
  return new EdgeshipModel(session, artifact, ort.env.wasm.numThreads);
}

/** A loaded model: `predict` feeds it the spec's inputs and times the run. */
export class EdgeshipModel {
  constructor(session, artifact, threads) {
    this.session = session;
    this.artifact = artifact;
    this.threads = threads;
  }

  /**
   * Run the model. `inputs`: an object by input name (or an array in input order, or for a one-input
   * model the value itself); each value a typed array of the input's dtype and shape, `{data, shape}`
   * (readNpy, readRaw, loadSample give these), an ort.Tensor, or for an image model an image, which
   * is prepared as the model spec's preprocessing says. Returns the outputs by name ({type, dims,
   * data}) and the run's wall time in milliseconds.
   */
  async predict(inputs) {
    const given = byName(inputs);
    const unknown = Object.keys(given).filter((name) => !MODEL.inputs.some((i) => i.name === name));
    if (unknown.length) throw new Error(`predict: no input ${unknown[0]}; the model takes ${inputNames()}`);
    const feeds = {};
    for (const input of MODEL.inputs) {
      if (given[input.name] === undefined) throw new Error(`predict: input ${input.name} is missing (the model takes ${inputNames()})`);
      feeds[input.name] = await toTensor(given[input.name], input);
    }
    const start = performance.now();
    const results = await this.session.run(feeds);
    const latencyMs = performance.now() - start;
    const outputs = {};
    for (const name of this.session.outputNames) {
      const t = results[name];
      outputs[name] = { type: t.type, dims: Array.from(t.dims), data: t.data };
    }
    return { outputs, latencyMs };
  }

  async release() {
    await this.session.release();
  }
}

function inputNames() {
  return MODEL.inputs.map((i) => i.name).join(", ");
}

function byName(inputs) {
  if (Array.isArray(inputs)) return Object.fromEntries(inputs.map((v, i) => [MODEL.inputs[i] ? MODEL.inputs[i].name : `#${i}`, v]));
  const plain = inputs && Object.getPrototypeOf(inputs) === Object.prototype && !("data" in inputs && "shape" in inputs);
  if (plain) return inputs;
  if (MODEL.inputs.length === 1) return { [MODEL.inputs[0].name]: inputs };
  throw new Error(`predict: give the inputs by name (${inputNames()})`);
}

async function toTensor(value, input) {
  if (value instanceof ort.Tensor) {
    checkShape(Array.from(value.dims), input);
    if (value.type !== input.dtype) throw new Error(`input ${input.name}: a ${value.type} tensor; the model takes ${input.dtype}`);
    return value;
  }
  if (isImage(value)) {
    if (!MODEL.image_input) throw new Error(`input ${input.name}: the model spec declares no image preprocessing; give model-ready values (.npy or .bin)`);
    value = await preprocessImage(value);
  }
  const array = ArrayBuffer.isView(value) ? { data: value, shape: input.shape, dtype: dtypeOf(value, input) } : value;
  if (!array || !ArrayBuffer.isView(array.data)) throw new Error(`input ${input.name}: not a typed array, {data, shape}, tensor or image`);
  const shape = checkShape(array.shape || input.shape, input);
  const count = shape.reduce((a, b) => a * b, 1);
  if (array.data.length !== count) throw new Error(`input ${input.name}: ${array.data.length} values; shape [${shape}] takes ${count}`);
  return new ort.Tensor(input.dtype, cast(array.data, array.dtype || dtypeOf(array.data, input), input), shape);
}

function dtypeOf(data, input) {
  if (data instanceof ARRAYS[input.dtype]) return input.dtype;
  return Object.keys(ARRAYS).find((k) => data instanceof ARRAYS[k]);
}

/** The shape to feed: the input's (a dynamic dimension anywhere in its range; one sample without the batch axis for batch 1). */
function checkShape(shape, input) {
  if (shape.length === input.shape.length - 1 && input.shape[0] === 1) shape = [1, ...shape];
  const dynamic = input.dynamic || {};
  const ok = shape.length === input.shape.length && shape.every((d, i) => {
    const dim = dynamic[String(i)];
    return dim ? d >= dim.min && d <= dim.max : d === input.shape[i];
  });
  if (!ok) throw new Error(`input ${input.name}: shape [${shape}]; the model takes [${input.shape}]${Object.keys(dynamic).length ? " (dynamic dimensions: " + JSON.stringify(dynamic) + ")" : ""}`);
  return shape;
}

/** Values of one dtype as the input's: floats to floats (float32 rounding), integers to integers (in range); not across. */
function cast(data, from, input) {
  const to = input.dtype;
  if (from === to) return data;
  if (FLOATS.has(from) !== FLOATS.has(to)) throw new Error(`input ${input.name}: has dtype ${from}, the model takes ${to}`);
  if (to === "float32") return from === "float16" ? Float32Array.from(data, halfToFloat) : Float32Array.from(data);
  if (FLOATS.has(to)) throw new Error(`input ${input.name}: has dtype ${from}, the model takes ${to} (save the array as ${to})`);
  const [low, high] = INTEGER_RANGE[to];
  const out = new ARRAYS[to](data.length);
  for (let i = 0; i < data.length; i++) {
    const v = to === "int64" ? BigInt(data[i]) : Number(data[i]);
    if (v < low || v > high) throw new Error(`input ${input.name}: value ${data[i]} at index ${i} is outside ${to}`);
    out[i] = v;
  }
  return out;
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

/** A .npy file (numpy.save) as {data, shape, dtype}: C order, little-endian, the dtypes a model takes. */
export function readNpy(buffer) {
  const bytes = new Uint8Array(buffer);
  const magic = String.fromCharCode(...bytes.subarray(1, 6));
  if (bytes[0] !== 0x93 || magic !== "NUMPY") throw new Error("not a .npy file (no \\x93NUMPY magic)");
  const view = new DataView(buffer);
  const major = bytes[6];
  const length = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder(major >= 3 ? "utf-8" : "latin1").decode(bytes.subarray(start, start + length));
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`.npy header not understood: ${header.trim()}`);
  const dtype = NPY[descr[1]];
  if (!dtype) throw new Error(`.npy dtype ${descr[1]}: not one this page reads (${Object.keys(NPY).join(", ")}; little-endian)`);
  if (fortran[1] === "True") throw new Error(".npy in Fortran order: save it C-ordered (numpy.ascontiguousarray)");
  const dims = shape[1].split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const Kind = ARRAYS[dtype];
  const body = buffer.slice(start + length);
  const count = dims.reduce((a, b) => a * b, 1);
  if (body.byteLength < count * Kind.BYTES_PER_ELEMENT) throw new Error(`.npy holds ${body.byteLength} bytes; shape [${dims}] of ${dtype} needs ${count * Kind.BYTES_PER_ELEMENT}`);
  return { data: new Kind(body, 0, count), shape: dims, dtype };
}

/** Raw little-endian values of the input's dtype (a .bin file) in the input's shape. */
export function readRaw(buffer, input) {
  const Kind = ARRAYS[input.dtype];
  const count = input.shape.reduce((a, b) => a * b, 1);
  if (buffer.byteLength !== count * Kind.BYTES_PER_ELEMENT) {
    throw new Error(`input ${input.name}: the .bin file holds ${buffer.byteLength} bytes; [${input.shape}] of ${input.dtype} is ${count * Kind.BYTES_PER_ELEMENT}`);
  }
  return { data: new Kind(buffer.slice(0)), shape: input.shape, dtype: input.dtype };
}

/** A file picked for `input`: .npy, an image (image models), else raw values (.bin). */
export async function readInputFile(file, input) {
  if (file.name.toLowerCase().endsWith(".npy")) return readNpy(await file.arrayBuffer());
  if (file.type.startsWith("image/")) return preprocessImage(file);
  return readRaw(await file.arrayBuffer(), input);
}

/** The bundled sample (sample.bin: one batch of the build's evaluation inputs), by input name. */
export async function loadSample(url = MODEL.sample && new URL(MODEL.sample.file, import.meta.url)) {
  if (!MODEL.sample) throw new Error("this bundle has no sample");
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  const buffer = await response.arrayBuffer();
  const inputs = {};
  for (const part of MODEL.sample.inputs) {
    const Kind = ARRAYS[part.dtype];
    inputs[part.name] = { data: new Kind(buffer.slice(part.offset, part.offset + part.bytes)), shape: part.shape, dtype: part.dtype };
  }
  return inputs;
}

/** The class names of labels.txt (one a line), or null when the bundle has none. */
export async function loadLabels(url = MODEL.labels && new URL(MODEL.labels, import.meta.url)) {
  if (!url) return null;
  const response = await fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  return (await response.text()).split(/\r?\n/).map((line) => line.trim()).filter((line) => line);
}

/** The index and score of the largest value in each batch row of an output (the first, on ties, as numpy's argmax). */
export function topClasses(output) {
  const rows = output.dims.length > 1 ? output.dims[0] : 1;
  const size = output.data.length / rows;
  const out = [];
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let i = 1; i < size; i++) if (output.data[r * size + i] > output.data[r * size + best]) best = i;
    out.push({ index: best, score: Number(output.data[r * size + best]) });
  }
  return out;
}

function isImage(value) {
  const kinds = ["ImageBitmap", "ImageData", "HTMLImageElement", "HTMLCanvasElement", "OffscreenCanvas", "Blob"];
  return kinds.some((k) => typeof globalThis[k] === "function" && value instanceof globalThis[k]);
}

/**
 * An image as the model's input, prepared as edgeship prepares image folders (calibration/images.py,
 * with Pillow): converted to RGB or L, resized with Pillow's bilinear filter to [height, width],
 * center-cropped, scaled to [0, 1], the mean subtracted and divided by the std (float32), in the
 * spec's layout. Returns {data, shape}. The same values as edgeship's, bit for bit, when at most one
 * side is resized; resized on both sides, a pixel can differ by one level of 255 (Pillow 13 runs
 * the vertical pass first for some sizes; this follows Pillow's Resample.c, horizontal first).
 * Decoding is the browser's: PNG decodes to the same pixels; JPEG decoders may differ by a level
 * here and there, and transparent pixels may differ (a canvas keeps colours premultiplied by alpha).
 */
export async function preprocessImage(source) {
  const p = MODEL.preprocessing;
  if (!MODEL.image_input) throw new Error("the model spec declares no image preprocessing for this model");
  let { width, height, rgba } = await pixels(source);
  const channels = p.color === "L" ? 1 : 3;
  let plane = toColor(rgba, width * height, p.color);
  if (p.resize && (p.resize[0] !== height || p.resize[1] !== width)) {
    plane = resize(plane, width, height, channels, p.resize[1], p.resize[0]);
    [width, height] = [p.resize[1], p.resize[0]];
  }
  if (p.crop) {
    const [h, w] = p.crop;
    if (w > width || h > height) throw new Error(`image ${width}x${height} is smaller than the crop ${w}x${h}`);
    plane = crop(plane, width, channels, Math.floor((width - w) / 2), Math.floor((height - h) / 2), w, h);
    [width, height] = [w, h];
  }
  const input = MODEL.inputs[0];
  const want = input.shape.slice(1);
  const got = p.layout === "NCHW" ? [channels, height, width] : [height, width, channels];
  if (got.join() !== want.join()) {
    throw new Error(`the image prepares to [${got}], but the model takes [${want}] per sample (input shape [${input.shape}])`);
  }
  return { data: normalize(plane, width * height, channels, p), shape: [1, ...want], dtype: "float32" };
}

async function pixels(source) {
  if (globalThis.ImageData && source instanceof ImageData) return { width: source.width, height: source.height, rgba: source.data };
  // No colour management: Pillow ignores embedded profiles too.
  const bitmap = await createImageBitmap(source, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const context = canvas.getContext("2d", { willReadFrequently: true });
  context.drawImage(bitmap, 0, 0);
  const image = context.getImageData(0, 0, bitmap.width, bitmap.height);
  return { width: bitmap.width, height: bitmap.height, rgba: image.data };
}

function toColor(rgba, count, color) {
  const channels = color === "L" ? 1 : 3;
  const out = new Uint8Array(count * channels);
  for (let i = 0; i < count; i++) {
    const [r, g, b] = [rgba[4 * i], rgba[4 * i + 1], rgba[4 * i + 2]];
    if (channels === 1) out[i] = (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; // Pillow's RGB -> L (ITU-R 601-2)
    else out.set([r, g, b], 3 * i);
  }
  return out;
}

// Pillow's Image.resize(size, BILINEAR) for 8-bit images: a horizontal then a vertical pass, each only
// when that side changes, with a triangle filter widened by the scale when shrinking, fixed-point
// coefficients and rounding to 8 bits after each pass (Resample.c: precompute_coeffs, normalize_coeffs_8bpc).
function coefficients(inSize, outSize) {
  const scale = inSize / outSize;
  const filterscale = Math.max(scale, 1);
  const support = filterscale;
  const ksize = Math.ceil(support) * 2 + 1;
  const bounds = new Int32Array(outSize * 2);
  const kk = new Int32Array(outSize * ksize);
  const k = new Float64Array(ksize);
  for (let xx = 0; xx < outSize; xx++) {
    const center = (xx + 0.5) * scale;
    const ss = 1 / filterscale;
    const xmin = Math.max(Math.trunc(center - support + 0.5), 0);
    const xmax = Math.min(Math.trunc(center + support + 0.5), inSize) - xmin;
    let ww = 0;
    for (let x = 0; x < xmax; x++) {
      k[x] = Math.max(1 - Math.abs((x + xmin - center + 0.5) * ss), 0);
      ww += k[x];
    }
    for (let x = 0; x < xmax; x++) {
      const v = ww !== 0 ? k[x] / ww : k[x];
      kk[xx * ksize + x] = v < 0 ? Math.trunc(-0.5 + v * (1 << PRECISION_BITS)) : Math.trunc(0.5 + v * (1 << PRECISION_BITS));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax;
  }
  return { bounds, kk, ksize };
}

function clip8(sum) {
  const v = sum >> PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

function resize(plane, width, height, channels, outWidth, outHeight) {
  let image = plane;
  if (outWidth !== width) {
    const { bounds, kk, ksize } = coefficients(width, outWidth);
    const out = new Uint8Array(outWidth * height * channels);
    for (let y = 0; y < height; y++) {
      for (let xx = 0; xx < outWidth; xx++) {
        const [xmin, n] = [bounds[2 * xx], bounds[2 * xx + 1]];
        for (let c = 0; c < channels; c++) {
          let sum = 1 << (PRECISION_BITS - 1);
          for (let x = 0; x < n; x++) sum += image[(y * width + xmin + x) * channels + c] * kk[xx * ksize + x];
          out[(y * outWidth + xx) * channels + c] = clip8(sum);
        }
      }
    }
    [image, width] = [out, outWidth];
  }
  if (outHeight !== height) {
    const { bounds, kk, ksize } = coefficients(height, outHeight);
    const out = new Uint8Array(width * outHeight * channels);
    for (let yy = 0; yy < outHeight; yy++) {
      const [ymin, n] = [bounds[2 * yy], bounds[2 * yy + 1]];
      for (let x = 0; x < width; x++) {
        for (let c = 0; c < channels; c++) {
          let sum = 1 << (PRECISION_BITS - 1);
          for (let y = 0; y < n; y++) sum += image[((ymin + y) * width + x) * channels + c] * kk[yy * ksize + y];
          out[(yy * width + x) * channels + c] = clip8(sum);
        }
      }
    }
    image = out;
  }
  return image;
}

function crop(plane, width, channels, left, top, w, h) {
  const out = new Uint8Array(w * h * channels);
  for (let y = 0; y < h; y++) {
    out.set(plane.subarray(((top + y) * width + left) * channels, ((top + y) * width + left + w) * channels), y * w * channels);
  }
  return out;
}

// float32 arithmetic in numpy's order: x / 255, then - mean, then / std (Math.fround after each step).
function normalize(plane, count, channels, p) {
  const out = new Float32Array(count * channels);
  const pick = (values, c) => Math.fround(values.length === 1 ? values[0] : values[c]);
  for (let i = 0; i < count; i++) {
    for (let c = 0; c < channels; c++) {
      let v = Math.fround(plane[i * channels + c] / 255);
      if (p.mean) v = Math.fround(v - pick(p.mean, c));
      if (p.std) v = Math.fround(v / pick(p.std, c));
      out[p.layout === "NCHW" ? c * count + i : i * channels + c] = v;
    }
  }
  return out;
}
