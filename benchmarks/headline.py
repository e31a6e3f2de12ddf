"""make bench's figures for one model, from the candidates and their interleaved timings: each
row's ratios (with intervals), throughput against the machine's peak for its precision, the
headlines, which compare like with like inside one accuracy budget (fp32 with fp32, int8 with int8,
bf16 with bf16 where a candidate computes in bf16), the fastest runtime per precision, the
OpenVINO figures issue 16 asks for (``openvino_figures``), and each candidate's cold start and
memory with which starts fastest and which holds least (``cold_figures``)."""
from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from stats import Ratio, order_statistic, ratio

TOP1_BUDGET = 1.0     # points, where the evaluation data has labels (the demo)
SQNR_BUDGET = 25.0    # dB against the float model, where it has none (the random-weight models)
MAX_WIDTH = 0.06      # a headline interval wider than 6% of its ratio gets more rounds (while they can narrow it)
PEAK_KEY = {"fp32": "fp32_gflops", "int8": "int8_gops"}   # no bf16 peak is measured: its share is left out
PRECISIONS = ("fp32", "int8")      # the headline classes every model has, then any other a candidate has
# The OpenVINO figures (issue 16): the variants they read (the x86 profile's, else another profile's
# of the same precision), and their targets, printed beside them, never asserted.
OPENVINO_VARIANT = "openvino-{}"
OPENVINO_TARGETS = {"int8_over_fp32": ("<=", 0.45), "int8_vs_nncf_default_ptq": (">=", 1.0),
                    "int8_sqnr_db": (">=", 25.0), "bf16_sqnr_db": (">=", 40.0), "fp32_sqnr_db": (">=", 60.0)}
NNCF_PEER = "peer: nncf default ptq"
# A row's cold-start figures (harness.cold_start, one shot per worker process): the median over its processes.
COLD = ("import_ms", "load_ms", "first_inference_ms", "start_ms", "ready_ms", "peak_rss_mb", "rss_over_baseline_mb")
LEAST = (("fastest_start", "start_ms", "starts fastest (load + first inference)", "ms"),
         ("fastest_ready", "ready_ms", "is ready first from a fresh process (import + load + first inference)", "ms"),
         ("least_memory", "rss_over_baseline_mb", "holds least (peak RSS over the process's baseline)", "MiB"))


def within_budget(c: dict[str, Any]) -> bool:
    """Inside the accuracy budget: top-1 within 1 point, or 25 dB SQNR without labels."""
    if c["kind"] == "eager" or c.get("identical"):
        return True
    if c.get("top1_drop") is not None:
        return c["top1_drop"] <= TOP1_BUDGET
    return (c.get("sqnr_db") or 0.0) >= SQNR_BUDGET


class Figures:
    """p50s and ratios read from a Timing, with byte-identical candidates resolved to the one timed."""

    def __init__(self, candidates: dict[str, dict[str, Any]], timing: Any) -> None:
        self.candidates, self.timing = candidates, timing

    def timed(self, name: str) -> str:
        return self.candidates[name].get("same_as") or name

    def cold(self, name: str) -> str:
        """Whose cold start a candidate's is: its own where it was loaded apart (its own loader for a
        file timed as another's: ``Timing(cold_only=...)``), else the one it is timed as."""
        own = name in getattr(self.timing, "cold", {}) or name in getattr(self.timing, "failed", {})
        return name if own else self.timed(name)

    def p50(self, name: str) -> float | None:
        return self.timing.p50(self.timed(name))

    def ratio(self, reference: str, candidate: str) -> Ratio:
        """reference time / candidate time; exactly 1 for a file timed once for both."""
        a, b = self.timed(reference), self.timed(candidate)
        if a == b:
            return Ratio(1.0, 1.0, 1.0, len(self.timing.paired(a, a)[0]))
        return ratio(*self.timing.paired(a, b))

    def best(self, kind: str, precision: str | None = None) -> str | None:
        """The fastest candidate of ``kind`` (and ``precision``) inside the budget."""
        pool = [n for n, c in self.candidates.items() if c["kind"] == kind and self.p50(n)
                and (precision is None or c["precision"] == precision) and within_budget(c)]
        return min(pool, key=self.p50) if pool else None

    def precisions(self) -> list[str]:
        """fp32 and int8, then every other class a candidate has (bf16: an OpenVINO bf16 variant,
        or the OpenVINO default peer where the plugin computes an fp32 model in bf16)."""
        extra = {c["precision"] for c in self.candidates.values()} - set(PRECISIONS)
        return [*PRECISIONS, *sorted(extra)]

    def headline_pairs(self) -> dict[str, tuple[str, str] | None]:
        """The headline comparisons as (reference, candidate): eager against the best variant, and
        the best peer against the best variant of each precision."""
        best = self.best("edgeship")
        pairs: dict[str, tuple[str, str] | None] = {"best_speedup_vs_eager": ("eager", best) if best else None}
        for precision in self.precisions():
            variant, peer = self.best("edgeship", precision), self.best("peer", precision)
            pairs[f"speedup_vs_best_{precision}_peer"] = (peer, variant) if variant and peer else None
        return pairs

    def openvino_variant(self, precision: str) -> str | None:
        """The edgeship OpenVINO variant of ``precision`` (as built) that was timed: the x86
        profile's, else the first other profile's."""
        names = [n for n, c in self.candidates.items() if c["kind"] == "edgeship" and c.get("backend") == "openvino"
                 and c.get("built_precision") == precision and self.p50(n)]
        preferred = f"x86/{OPENVINO_VARIANT.format(precision)}"
        return preferred if preferred in names else next(iter(names), None)

    def openvino_pairs(self) -> dict[str, tuple[str, str] | None]:
        """The OpenVINO figures' speed comparisons as (reference, candidate)."""
        int8, fp32 = self.openvino_variant("int8"), self.openvino_variant("fp32")
        peer = NNCF_PEER if NNCF_PEER in self.candidates and self.p50(NNCF_PEER) else None
        return {"int8_over_fp32": (int8, fp32) if int8 and fp32 else None,   # int8 time / fp32 time
                "int8_vs_nncf_default_ptq": (peer, int8) if peer and int8 else None,
                "int8_speedup_vs_eager": ("eager", int8) if int8 else None}

    def by_runtime(self) -> dict[str, dict[str, Any]]:
        """Per precision, each runtime's fastest candidate inside the budget (edgeship's or a
        peer's; a runtime with none inside it shows its fastest, marked outside), fastest first,
        each with how many times faster the fastest runtime's candidate is (interval as for the
        headlines), and which runtime is fastest."""
        out = {}
        for precision in self.precisions():
            per: dict[str, str] = {}
            for name, c in self.candidates.items():
                if c["kind"] == "eager" or c["precision"] != precision or not self.p50(name):
                    continue
                held = per.get(c["runtime"])
                if held is None or (within_budget(c), -self.p50(name)) > (within_budget(self.candidates[held]),
                                                                           -self.p50(held)):
                    per[c["runtime"]] = name
            if not per:
                continue
            order = sorted(per, key=lambda r: (not within_budget(self.candidates[per[r]]), self.p50(per[r])))
            fastest = per[order[0]] if within_budget(self.candidates[per[order[0]]]) else None
            rows = {}
            for runtime in order:
                name, c = per[runtime], self.candidates[per[runtime]]
                rows[runtime] = {"candidate": name, "kind": c["kind"], "p50_ms": self.p50(name),
                                 "sqnr_db": c.get("sqnr_db"), "top1_drop": c.get("top1_drop"),
                                 "within_budget": within_budget(c),
                                 "fastest_speedup_over_it": (self.ratio(name, fastest).as_dict()
                                                             if fastest and name != fastest else None)}
            out[precision] = {"fastest_runtime": order[0] if fastest else None, "runtimes": rows}
        return out


def refine(timing: Any, candidates: dict[str, dict[str, Any]], block: int, max_rounds: int) -> None:
    """More rounds for the candidates of every headline (and OpenVINO figure) whose interval is
    still wider than MAX_WIDTH, while ``max_rounds`` rounds can be expected to narrow it that far
    (``worth_more_rounds``; where the machine's noise keeps it wider, rounds would cost time and not
    narrow it: the interval stays as measured, wider, and still holds). Each step adds the rounds up
    to the next count at which the interval narrows (``next_rounds``)."""
    figures = Figures(candidates, timing)
    while True:
        wide, counts = set(), []
        pairs = [*figures.headline_pairs().values(), *figures.openvino_pairs().values()]
        for a, b in {(figures.timed(x), figures.timed(y)) for x, y in filter(None, pairs)}:
            reference, candidate = timing.paired(a, b)
            r = figures.ratio(a, b)
            if a != b and r.width > MAX_WIDTH and r.rounds < max_rounds and worth_more_rounds(
                    reference, candidate, max_rounds):
                wide.update((a, b))
                counts.append(r.rounds)
        if not wide:
            return
        more = next_rounds(min(counts), max_rounds) - min(counts)
        print(f"  {len(wide)} candidate(s) of a headline still too noisy to call: {more} more rounds", flush=True)
        timing.run(more, block, sorted(wide))


def worth_more_rounds(reference: list[float], candidate: list[float], max_rounds: int) -> bool:
    """Whether ``max_rounds`` paired rounds can be expected to give an interval no wider than
    MAX_WIDTH: theirs would take the k-th smallest and largest per-round ratio (stats.order_statistic),
    which lie about k / (max_rounds + 1) of the way in from either end, so the rounds so far, read at
    those quantiles, predict its width."""
    ratios = [a / b for a, b in zip(reference, candidate)]
    q = order_statistic(max_rounds) / (max_rounds + 1)
    low, high = np.quantile(ratios, [q, 1 - q])
    return (high - low) / statistics.median(ratios) <= MAX_WIDTH


def next_rounds(rounds: int, max_rounds: int) -> int:
    """The least count of rounds above ``rounds`` whose interval takes order statistics further in
    (9, 12, 15, 17, ... rounds: in between, an added round can only widen it), at most ``max_rounds``."""
    more = rounds + 1
    while more < max_rounds and order_statistic(more) <= order_statistic(rounds):
        more += 1
    return min(more, max_rounds)


def summarize(found: Any, timing: Any, cost: dict) -> dict:
    """Rows, headlines and build cost of one model, as latest.json keeps them."""
    figures = Figures(found.candidates, timing)
    eager = figures.p50("eager")
    ort = found.candidates.get("peer: onnxruntime default", {}).get("size_bytes")
    rows = {}
    for name, c in found.candidates.items():
        p50 = figures.p50(name)
        if name == "eager" or p50 is None:
            continue
        peer = figures.best("peer", c["precision"])
        achieved = found.flops / (p50 / 1e3) / 1e9 if found.flops else None
        rows[name] = {**{k: v for k, v in c.items() if k not in ("job", "identity")}, "p50_ms": p50,
                      "rounds": len(timing.paired(figures.timed(name), figures.timed(name))[0]),
                      "speedup_vs_eager": figures.ratio("eager", name).as_dict(),
                      "vs_best_peer_of_its_precision": (figures.ratio(peer, name).as_dict()
                                                         if peer and peer != name else None),
                      "achieved_gops": achieved,
                      "fraction_of_peak": None,   # use_peaks(), once the peak is measured again at the end
                      "size_vs_ort_default": c["size_bytes"] / ort if ort and c.get("size_bytes") else None,
                      "within_budget": within_budget(c),
                      "process_spread": round(timing.spread(figures.timed(name)), 4),
                      **cold_row(timing.cold_start(figures.cold(name)))}
    summary = {"eager_p50_ms": eager, "eager_cold": cold_row(timing.cold_start("eager")), "flops": found.flops,
               "eager_achieved_gops": found.flops / (eager / 1e3) / 1e9 if found.flops else None,
               "budget": f"top-1 drop <= {TOP1_BUDGET} point where labelled, else SQNR >= {SQNR_BUDGET} dB"}
    for key, pair in figures.headline_pairs().items():
        summary[key] = figures.ratio(*pair).as_dict() if pair else None
        summary[key.replace("speedup_vs_", "") + "_pair"] = list(pair) if pair else None
    best = figures.best("edgeship")
    summary.update(best_variant=best, best_precision=found.candidates[best]["precision"] if best else None)
    for precision in figures.precisions():
        summary[f"best_{precision}_variant"] = figures.best("edgeship", precision)
    for precision in figures.precisions():
        summary[f"best_{precision}_peer"] = figures.best("peer", precision)
    summary.update(identical={n: c["same_as"] for n, c in found.candidates.items() if c.get("same_as")},
                   by_runtime=figures.by_runtime(), openvino=openvino_figures(figures, timing),
                   cold=cold_figures(figures),
                   build_cost=cost, rows=rows)
    return summary


def cold_row(cold: dict[str, Any]) -> dict[str, Any]:
    """A row's cold-start figures (``COLD``, each the median over its processes; None where not
    measured) beside the whole record (``cold_start``: ranges, process count, notes, or why not)."""
    return {**{key: (cold.get(key) or {}).get("median") for key in COLD}, "cold_start": cold}


def cold_figures(figures: Figures) -> dict[str, Any]:
    """Which candidate starts fastest (load + first inference, its runtime already imported) and
    which holds least memory over its process's baseline, eager included, each beside the runner-up
    ("apart": their ranges over the processes do not overlap; else the processes' noise does not
    separate them); and per runtime its candidates side by side, edgeship's and the peers', fastest
    start first (a byte-identical file opened by the same loader is measured once, as ``same_as``;
    by another loader, apart: ``own_cold_start``)."""
    timing, candidates = figures.timing, figures.candidates
    measured = {name: timing.cold_start(name) for name in candidates
                if figures.cold(name) == name and "not_measured" not in timing.cold_start(name)}
    by_runtime: dict[str, list[dict[str, Any]]] = {}
    for name, c in candidates.items():
        if figures.p50(name) is None:   # not loaded: not in the rows either
            continue
        row = {k: v for k, v in cold_row(timing.cold_start(figures.cold(name))).items() if k != "cold_start"}
        by_runtime.setdefault(c["runtime"], []).append({"candidate": name, "kind": c["kind"],
                                                        "same_as": c.get("same_as"),
                                                        "own_cold_start": figures.cold(name) == name, **row})

    def start(row: dict[str, Any]) -> tuple[bool, float]:
        return row["start_ms"] is None, row["start_ms"] or 0.0
    for rows in by_runtime.values():
        rows.sort(key=start)
    return {**{key: _least(measured, figure, candidates) for key, figure, _, _ in LEAST},
            "by_runtime": dict(sorted(by_runtime.items(), key=lambda kv: start(kv[1][0])))}


def _least(measured: dict[str, dict], key: str, candidates: dict[str, dict]) -> dict[str, Any] | None:
    """The candidate with the least median ``key``, the runner-up, and whether their ranges are apart."""
    ranked = sorted((cold[key]["median"], name) for name, cold in measured.items() if cold.get(key))
    if not ranked:
        return None
    best = ranked[0][1]
    out = {"candidate": best, "runtime": candidates[best]["runtime"], "figure": key, key: measured[best][key]}
    if len(ranked) > 1:
        runner = ranked[1][1]
        out.update(runner_up=runner, runner_up_runtime=candidates[runner]["runtime"],
                   **{f"runner_up_{key}": measured[runner][key]},
                   apart=measured[best][key]["high"] < measured[runner][key]["low"])
    return out


def openvino_figures(figures: Figures, timing: Any) -> dict | None:
    """What issue 16 asks the bench to print for OpenVINO (printed, not asserted): the int8
    variant's p50 over the fp32 one's (and the paired per-round ratio with its interval), its speed
    against the NNCF-defaults peer and against eager (intervals as for the headlines), and the
    SQNR of the int8, bf16 and fp32 (and fp16) variants; each with its target and whether the
    figure meets it (a ratio: met or missed only when its whole interval is on one side of the
    target, else undecided). None when no OpenVINO variant was timed."""
    variants = {p: figures.openvino_variant(p) for p in ("int8", "bf16", "fp32", "fp16")}
    if not any(variants.values()):
        return None
    out: dict[str, Any] = {"variants": variants, "nncf_default_ptq_peer": NNCF_PEER
                           if NNCF_PEER in figures.candidates and figures.p50(NNCF_PEER) else None}
    int8, fp32 = variants["int8"], variants["fp32"]
    out["int8_p50_over_fp32_p50"] = figures.p50(int8) / figures.p50(fp32) if int8 and fp32 else None
    for key, pair in figures.openvino_pairs().items():
        out[key] = figures.ratio(*pair).as_dict() if pair else None
    if out["int8_over_fp32"]:  # a time ratio the other way round: above 1, int8 is the slower
        out["int8_over_fp32"]["verdict"] = {"faster": "int8 slower", "slower": "int8 faster"}.get(
            out["int8_over_fp32"]["verdict"], "tie")
    for precision, name in variants.items():
        c = figures.candidates.get(name) if name else None
        out[f"{precision}_sqnr_db"] = c.get("sqnr_db") if c else None
        out[f"{precision}_top1_drop"] = c.get("top1_drop") if c else None
    out["targets"] = {key: f"{op} {value}" for key, (op, value) in OPENVINO_TARGETS.items()}
    out["meets"] = {key: _meets(out, key, op, value) for key, (op, value) in OPENVINO_TARGETS.items()}
    return out


def _meets(out: dict, key: str, op: str, target: float) -> str | None:
    """met / missed / undecided (a ratio whose interval holds the target); None without the figure."""
    figure = out.get(key)
    if figure is None:
        return None
    low, high = (figure["low"], figure["high"]) if isinstance(figure, dict) else (figure, figure)
    good, bad = (high <= target, low > target) if op == "<=" else (low >= target, high < target)
    return "met" if good else "missed" if bad else "undecided"


def use_peaks(results: dict) -> None:
    """Each row's share of the peak, from the higher of the peaks measured before and after the
    models (the machine's limit is what it reached; a row measured in between is judged by it)."""
    machine = results["machine"]
    peak = {key: max(machine[key], machine["after"][key]) for key in PEAK_KEY.values()}
    machine["peak_used"] = peak
    for m in results["models"].values():
        m["peak_used"] = peak
        eager = m["eager_achieved_gops"]
        m["eager_fraction_of_peak"] = eager / peak["fp32_gflops"] if eager else None
        for row in m["rows"].values():
            gops, key = row["achieved_gops"], PEAK_KEY.get(row["precision"])
            row["fraction_of_peak"] = gops / peak[key] if gops and key else None


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    peak = results["machine"]["peak_used"]
    table = Table(title=f"make bench: ratios measured side by side, [95% interval], ≈ = a tie; of peak: the "
                        f"row's GOP/s over this machine's GEMM peak for its precision (fp32 {peak['fp32_gflops']:.0f} "
                        f"GFLOP/s, int8 {peak['int8_gops']:.0f} GOP/s: the higher of the measurements before and "
                        "after the models)", title_justify="left")
    for col in ("model", "candidate", "prec", "p50 ms", "vs eager", "vs best peer (same prec)", "GOP/s",
                "of peak", "size vs ORT", "top-1 drop", "SQNR dB", "budget"):
        table.add_column(col, justify="left" if col in ("model", "candidate") else "right")
    for model, m in results["models"].items():
        table.add_row(model, "eager", "fp32", f"{m['eager_p50_ms']:.3f}", "1.00", "",
                      _fmt(m["eager_achieved_gops"], 1), _fmt(m["eager_fraction_of_peak"], pct=True), "", "", "", "")
        for name, r in sorted(m["rows"].items(), key=lambda kv: kv[1]["p50_ms"]):
            star = " *" if name == m["best_variant"] else ""
            same = f" (= {r['same_as']})" if r.get("same_as") else ""
            table.add_row("", name + star + same, r["precision"], f"{r['p50_ms']:.3f}",
                          _ratio(r["speedup_vs_eager"]), _ratio(r["vs_best_peer_of_its_precision"]),
                          _fmt(r["achieved_gops"], 1), _fmt(r["fraction_of_peak"], pct=True),
                          _fmt(r["size_vs_ort_default"]), _fmt(r.get("top1_drop")), _fmt(r.get("sqnr_db"), 1),
                          "yes" if r["within_budget"] else "no")
        spreads = [r["process_spread"] for r in m["rows"].values()]
        table.add_row("", f"noise: a candidate's worker processes differ by up to {100 * max(spreads, default=0):.0f}% "
                          f"(median {100 * statistics.median(spreads or [0.0]):.0f}%)", *[""] * 10)
        for key in [k for k in m if k == "best_speedup_vs_eager" or (k.startswith("speedup_vs_best_")
                                                                      and k.endswith("_peer"))]:
            pair = m[key.replace("speedup_vs_", "") + "_pair"]
            text = (f"{key}: {_ratio(m[key])} ({pair[1]} against {pair[0]})" if pair
                    else f"{key}: no pair inside the budget")
            table.add_row("", text, *[""] * 10)
        host = m["build_cost"].get("host") or next(iter(m["build_cost"].values()))
        table.add_row("", f"build: cold {host['cold_build_seconds']:.1f} s, unchanged re-build "
                          f"{host['rebuild_seconds']:.1f} s", *[""] * 10, end_section=True)
    Console(width=200).print(table)
    print(f"* fastest variant inside the budget ({next(iter(results['models'].values()))['budget']})")
    for model, m in results["models"].items():
        for name, r in m["rows"].items():
            if r.get("note"):
                print(f"{model}, {name}: {r['note']}")
    print_runtimes(results)
    print_openvino(results)
    print_cold(results)


def print_runtimes(results: dict) -> None:
    """Per model and precision, each runtime's fastest candidate inside the budget, side by side:
    which of OpenVINO, ONNX Runtime, ExecuTorch (and the others) is fastest (``by_runtime``)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fastest runtime per precision: each runtime's fastest candidate inside the budget "
                        "(edgeship's or a peer's), timed in the same rounds; the fastest (*) is that many times "
                        "faster [95% interval], ≈ = a tie", title_justify="left")
    for col in ("model", "prec", "runtime", "candidate", "p50 ms", "fastest is x faster", "top-1 drop",
                "SQNR dB", "budget"):
        table.add_column(col, justify="left" if col in ("model", "runtime", "candidate") else "right")
    for model, m in results["models"].items():
        groups = list((m.get("by_runtime") or {}).items())
        for g, (precision, group) in enumerate(groups):
            for i, (runtime, r) in enumerate(group["runtimes"].items()):
                star = " *" if runtime == group["fastest_runtime"] else ""
                table.add_row(model if g == 0 and i == 0 else "", precision if i == 0 else "", runtime + star,
                              r["candidate"], f"{r['p50_ms']:.3f}", _ratio(r["fastest_speedup_over_it"]),
                              _fmt(r.get("top1_drop")), _fmt(r.get("sqnr_db"), 1),
                              "yes" if r["within_budget"] else "no", end_section=i == len(group["runtimes"]) - 1
                              and g == len(groups) - 1)
    Console(width=200).print(table)


def print_openvino(results: dict) -> None:
    """The OpenVINO figures of every model that has them, each beside its target (not asserted)."""
    for model, m in results["models"].items():
        ov = m.get("openvino")
        if not ov:
            continue
        used = [p for p in ("int8", "bf16", "fp32", "fp16") if ov["variants"].get(p)]
        names = ", ".join(f"{p}: {ov['variants'][p]}" for p in used)
        print(f"{model} openvino ({names}):")
        print(f"  int8 p50 / fp32 p50: {_fmt(ov['int8_p50_over_fp32_p50'])} "
              f"(per round {_ratio(ov['int8_over_fp32'])}){_target(ov, 'int8_over_fp32')}")
        peer = "" if ov["nncf_default_ptq_peer"] else " (the peer was not timed)"
        print(f"  int8 vs {NNCF_PEER} (peer time / int8 time): {_ratio(ov['int8_vs_nncf_default_ptq'])}"
              f"{_target(ov, 'int8_vs_nncf_default_ptq')}{peer}")
        print(f"  int8 speedup over eager: {_ratio(ov['int8_speedup_vs_eager'])}")
        sqnr = [f"{p} {_fmt(ov[f'{p}_sqnr_db'], 1)} dB{_target(ov, f'{p}_sqnr_db')}" for p in used]
        print(f"  SQNR against the float model: {'; '.join(sqnr)}")
        drops = [f"{p} {_fmt(ov[f'{p}_top1_drop'])}" for p in used if ov.get(f"{p}_top1_drop") is not None]
        if drops:
            print(f"  top-1 drop (points): {'; '.join(drops)}")


def print_cold(results: dict) -> None:
    """Per model, every candidate's cold start and memory, each runtime's candidates side by side
    (edgeship's and the peers'), then which starts fastest and which holds least."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="cold start and memory: each candidate in fresh processes (one shot each: the median, and "
                        "the lowest-highest over its processes), loaded one at a time; start = load + first "
                        "inference (the runtime imported before); memory = peak RSS (VmHWM) after the warmup, and "
                        "over the process's own RSS before the import", title_justify="left")
    for col in ("model", "runtime", "candidate", "prec", "import ms", "load ms", "1st inference ms", "start ms",
                "with import ms", "steady p50 ms", "peak RSS MiB", "over baseline MiB"):
        table.add_column(col, justify="left" if col in ("model", "runtime", "candidate") else "right")
    for model, m in results["models"].items():
        cold = m.get("cold")
        if not cold:
            continue
        rows = {"eager": {**m["eager_cold"], "precision": "fp32", "p50_ms": m["eager_p50_ms"]}, **m["rows"]}
        for i, (runtime, group) in enumerate(cold["by_runtime"].items()):
            for j, entry in enumerate(group):
                r, name = rows[entry["candidate"]], entry["candidate"]
                record = r["cold_start"]
                same = (f" (same file as {entry['same_as']}{', its own loader' if entry['own_cold_start'] else ''})"
                        if entry.get("same_as") else "")
                cells = ([f"not measured: {record['not_measured']}", *[""] * 6] if "not_measured" in record else
                         [_fmt(r["import_ms"], 1), _fmt(r["load_ms"], 1), _fmt(r["first_inference_ms"], 1),
                          _spread(record["start_ms"], 1), _fmt(r["ready_ms"], 1), _fmt(r["p50_ms"], 3),
                          _fmt(r["peak_rss_mb"], 0), _spread(record["rss_over_baseline_mb"], 0)])
                table.add_row(model if i == j == 0 else "", runtime if j == 0 else "", name + same, r["precision"],
                              *cells, end_section=j == len(group) - 1 and i == len(cold["by_runtime"]) - 1)
    Console(width=200).print(table)
    for model, m in results["models"].items():
        cold = m.get("cold") or {}
        for key, _, what, unit in LEAST:
            best = cold.get(key)
            if best:
                print(f"{model}: {what}: {_least_text(best, unit)}")


def _least_text(best: dict, unit: str) -> str:
    key = best["figure"]
    text = f"{best['candidate']} ({best['runtime']}) {_spread(best[key], 1)} {unit}"
    if "runner_up" not in best:
        return text
    verdict = "apart" if best["apart"] else "≈ the ranges overlap: not separated"
    return (f"{text}; runner-up {best['runner_up']} ({best['runner_up_runtime']}) "
            f"{_spread(best['runner_up_' + key], 1)} {unit} ({verdict})")


def _spread(figure: dict | None, digits: int) -> str:
    """median [low-high] of a cold-start figure over the processes."""
    if not figure:
        return "-"
    return f"{figure['median']:.{digits}f} [{figure['low']:.{digits}f}-{figure['high']:.{digits}f}]"


def _target(ov: dict, key: str) -> str:
    verdict = ov["meets"].get(key)
    return f" (target {ov['targets'][key]}: {verdict})" if verdict else ""


def _ratio(r: dict | None) -> str:
    if not r:
        return "-"
    mark = "≈" if r["verdict"] == "tie" else ""
    return f"{mark}{r['value']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"


def _fmt(value, digits: int = 2, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.{digits}f}"
