"""edgeship device protocol: the job a runner reads (job.json) and the result it writes (result.json).

Standard library only, written for old device Pythons (no f-strings, no annotations): it is copied
to devices beside runner.py, which imports it as a sibling file, and it imports nothing of edgeship;
the host imports it as ``edgeship.devices.protocol``. Both ends check with it: the runner checks
every job it reads (``job_problems``) and builds its result through ``result_document``; the host
writes jobs with ``Job.document()`` and checks every result (``result_problems``) before the
pipeline reads a key of it.

Both documents carry ``"protocol": PROTOCOL_VERSION``. A field's name, type or meaning changing,
or a field coming or going, is a new version: a runner of another version (one left on a device by
another edgeship) refuses the job, naming both versions, instead of reading a key in another sense.

Each field is a ``Field``: its name, its JSON types (``"string"``, ``"integer"``, ``"number"``,
``"boolean"``, ``"object"``, ``"null"``, and ``"string[]"``/``"number[]"`` for arrays of those),
when it is required (``ALWAYS``; for a result also ``WHEN_OK`` or ``WHEN_FAILED``, by its ``ok``;
``OPTIONAL``), the value a runner takes when an optional job field is left out, and what it means.
A key that is not a field is a problem too: a key renamed on one side only shows up as one.
"""
import collections
import copy
import difflib

PROTOCOL_VERSION = 2  # 2: import_ms, first_inference_ms and rss_over_baseline_mb

ALWAYS = "always"
WHEN_OK = "when ok"
WHEN_FAILED = "when failed"
OPTIONAL = "optional"

Field = collections.namedtuple("Field", "name types required default meaning")

JOB_FIELDS = (
    Field("protocol", ("integer",), ALWAYS, None, "the protocol version the job is written in"),
    Field("runtime", ("string",), ALWAYS, None, "the runtime that runs the artifact (a runner's runtime id)"),
    Field("artifact", ("string", "null"), OPTIONAL, None,
          "the artifact's path, relative to job.json's folder or absolute; null: none (the eager model)"),
    Field("sha256", ("string", "null"), OPTIONAL, None,
          "the artifact's sha256 (hashing.sha256_path), checked before it loads; null: not checked"),
    Field("inputs", ("string",), ALWAYS, None, "the inputs .npz (one array per input name, N samples), as artifact"),
    Field("input_names", ("string[]",), ALWAYS, None, "the inputs in the order the artifact takes them"),
    Field("batch", ("integer",), OPTIONAL, 1, "samples per inference; the last batch is padded"),
    Field("warmup", ("integer",), OPTIONAL, 10, "untimed inferences before the timed ones"),
    Field("iterations", ("integer",), OPTIONAL, 100, "timed inferences on the first batch; 0: outputs only"),
    Field("threads", ("integer", "null"), OPTIONAL, None, "the runtime's threads; null: its default"),
    Field("options", ("object",), OPTIONAL, {}, "the runtime's own options (each runner reads its keys)"),
    Field("outputs", ("string",), OPTIONAL, "outputs.npz", "where the outputs .npz goes, beside job.json"),
    Field("result", ("string",), OPTIONAL, "result.json", "where the result document goes, beside job.json"),
    Field("deadline_s", ("number", "null"), OPTIONAL, None, "the runner stops itself after this long; null: never"),
)

RESULT_FIELDS = (
    Field("protocol", ("integer",), ALWAYS, None, "the protocol version the result is written in"),
    Field("ok", ("boolean",), ALWAYS, None, "whether the job ran; false: error says why"),
    Field("error", ("string",), WHEN_FAILED, None, "why the job failed"),
    Field("traceback", ("string",), OPTIONAL, None, "the failure's Python traceback"),
    Field("not_for_this_cpu", ("boolean",), OPTIONAL, None,
          "the artifact is made for other CPUs: not run here by design, not a failure"),
    Field("runtime", ("string",), WHEN_OK, None, "the job's runtime id"),
    Field("runtime_version", ("string",), WHEN_OK, None, "the runtime as the latency row names it"),
    Field("threads", ("integer", "null"), WHEN_OK, None, "the threads it ran with; null: unknown"),
    Field("warmup", ("integer",), OPTIONAL, None, "the untimed inferences it ran"),
    Field("iterations", ("integer",), OPTIONAL, None, "the timed inferences it ran"),
    Field("import_ms", ("number", "null"), WHEN_OK, None,
          "the runtime's import time, before the load (cold start: import + load + first inference); null: "
          "not measured"),
    Field("load_ms", ("number", "null"), WHEN_OK, None, "the artifact's load time; null: not measured"),
    Field("first_inference_ms", ("number", "null"), WHEN_OK, None,
          "the first inference after the load, on the first batch, timed on its own (the first warmup run; "
          "with no warmup, the first timed run); null: not measured (notes say why)"),
    Field("timings_ms", ("number[]",), WHEN_OK, None,
          "each timed inference's time; empty: none (outputs only, or summary_ms instead)"),
    Field("summary_ms", ("object",), OPTIONAL, None,
          "latency statistics from an outside tool (trtexec, a native program) instead of timings_ms"),
    Field("other_cpu_load", ("number", "null"), OPTIONAL, None,
          "CPUs' worth of other processes' work while it timed; null: unknown"),
    Field("peak_rss_mb", ("number", "null"), WHEN_OK, None,
          "the process's peak resident memory over the whole job (the evaluation pass included); null: unknown"),
    Field("rss_over_baseline_mb", ("number", "null"), WHEN_OK, None,
          "the process's peak resident memory from just before the runtime's import to the end of the timed "
          "runs, above its resident memory then (what the runtime, the loaded artifact and its inferences "
          "added; the evaluation pass not included); null: not measured (notes say why)"),
    Field("samples", ("integer",), WHEN_OK, None, "the samples whose outputs it wrote (0: no outputs)"),
    Field("outputs", ("string", "null"), OPTIONAL, None, "the outputs .npz it wrote; null: none"),
    Field("notes", ("string[]",), OPTIONAL, None, "what the latency row should say about the run"),
    Field("host", ("object",), OPTIONAL, None, "where it ran: platform, machine, python, cpus"),
    Field("browser", ("object",), OPTIONAL, None, "a browser device's Chromium and page"),
    Field("cpu", ("object", "null"), OPTIONAL, None, "the CPU it ran on (cpu.py's facts); null: unknown"),
    Field("ray", ("object",), OPTIONAL, None,
          "added by the host when measured through Ray (edgeship matrix): the node; never by a runner"),
)

JOB = dict((f.name, f) for f in JOB_FIELDS)
RESULT = dict((f.name, f) for f in RESULT_FIELDS)


class ProtocolError(ValueError):
    """A document that does not follow the protocol; the message lists its problems."""


def job_problems(doc):
    """What is wrong with the job document ``doc``, in words (an empty list: nothing)."""
    return _problems(doc, JOB, "job", None)


def result_problems(doc):
    """What is wrong with the result document ``doc``, in words (an empty list: nothing). Which
    fields are required depends on its ``ok``."""
    outcome = None
    if isinstance(doc, dict) and isinstance(doc.get("ok"), bool):
        outcome = WHEN_OK if doc["ok"] else WHEN_FAILED
    return _problems(doc, RESULT, "result", outcome)


def other_version(doc):
    """The protocol version ``doc`` says it is written in when that is not this one's, else None
    (None too for a document that names no version: its problems say so)."""
    if isinstance(doc, dict) and "protocol" in doc and not _same_version(doc["protocol"]):
        return doc["protocol"]
    return None


def job_with_defaults(doc):
    """The (checked) job ``doc`` with every optional field it leaves out at its default, so a runner
    reads each field by name and its defaults are these, not its own."""
    job = dict(doc)
    for field in JOB_FIELDS:
        if field.name not in job:
            job[field.name] = copy.deepcopy(field.default)
    return job


def result_document(**values):
    """A result document: ``"protocol": PROTOCOL_VERSION`` and ``values``, each a result field
    (KeyError for a name that is not one, so a runner writes no key the protocol does not declare)."""
    unknown = sorted(set(values) - set(RESULT) - {"protocol"})
    if unknown:
        raise KeyError("not fields of a protocol %d result: %s" % (PROTOCOL_VERSION, ", ".join(unknown)))
    doc = {"protocol": PROTOCOL_VERSION}
    doc.update(values)
    return doc


def not_measured(names, why):
    """The note saying why the result fields ``names`` are null: ``"first_inference_ms,
    rss_over_baseline_mb not measured: why"`` (the host finds a field's reason by its name there)."""
    return "%s not measured: %s" % (", ".join(names), why)


def describe(field):
    """``'load_ms' (number or null, required when ok)``: a field as problems name it."""
    required = "optional" if field.required == OPTIONAL else "required " + field.required
    return "'%s' (%s, %s)" % (field.name, " or ".join(field.types), required)


def _problems(doc, fields, what, outcome):
    if not isinstance(doc, dict):
        return ["the %s is %s, not a JSON object" % (what, _kind(doc))]
    if other_version(doc) is not None:
        # another version's fields are not this one's: its version is the one problem worth naming
        return ["the %s is device protocol %r; this side reads and writes protocol %d"
                % (what, doc["protocol"], PROTOCOL_VERSION)]
    problems = []
    for name in sorted(set(doc) - set(fields)):
        close = difflib.get_close_matches(name, [n for n in fields if n not in doc], 1)
        problems.append("unknown key %r in the %s (not a field of protocol %d%s)"
                        % (name, what, PROTOCOL_VERSION, "; renamed from %r?" % close[0] if close else ""))
    for field in fields.values():
        if field.name not in doc:
            if field.required == ALWAYS or field.required == outcome:
                problems.append("missing key %s%s" % (describe(field), " (written before device protocols had "
                                                      "versions?)" if field.name == "protocol" else ""))
        elif not any(_is(doc[field.name], kind) for kind in field.types):
            problems.append("key %r is %s, not %s" % (field.name, _kind(doc[field.name]), " or ".join(field.types)))
    return problems


def _same_version(value):
    return _is(value, "integer") and value == PROTOCOL_VERSION


def _is(value, kind):
    """Whether ``value`` (as json.load gives it) is of the JSON type ``kind``."""
    if kind.endswith("[]"):
        return isinstance(value, list) and all(_is(v, kind[:-2]) for v in value)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, dict)
    raise ValueError("unknown JSON type %r" % kind)


def _kind(value):
    """The JSON type of ``value``, in words."""
    for kind in ("null", "boolean", "integer", "number", "string", "object"):
        if _is(value, kind):
            return kind
    if isinstance(value, list):
        return "array"
    return type(value).__name__
