"""make bench's figures for one model, from the candidates and their interleaved timings: each
row's ratios (with intervals), throughput against the machine's peak for its precision, and the
headlines, which compare like with like inside one accuracy budget."""
from __future__ import annotations

import statistics
from typing import Any

from stats import Ratio, ratio

TOP1_BUDGET = 1.0     # points, where the evaluation data has labels (the demo)
SQNR_BUDGET = 25.0    # dB against the float model, where it has none (the random-weight models)
MAX_WIDTH = 0.06      # a headline interval wider than 6% of its ratio gets more rounds
EXTRA_ROUNDS = 2
PEAK_KEY = {"fp32": "fp32_gflops", "int8": "int8_gops"}


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

    def headline_pairs(self) -> dict[str, tuple[str, str] | None]:
        """The headline comparisons as (reference, candidate): eager against the best variant, and
        the best peer against the best variant of each precision."""
        best = self.best("edgeship")
        pairs: dict[str, tuple[str, str] | None] = {"best_speedup_vs_eager": ("eager", best) if best else None}
        for precision in ("fp32", "int8"):
            variant, peer = self.best("edgeship", precision), self.best("peer", precision)
            pairs[f"speedup_vs_best_{precision}_peer"] = (peer, variant) if variant and peer else None
        return pairs


def refine(timing: Any, candidates: dict[str, dict[str, Any]], block: int, max_rounds: int) -> None:
    """More rounds for the candidates of every headline whose interval is still wider than
    MAX_WIDTH, until it is narrow enough or has had ``max_rounds``."""
    figures = Figures(candidates, timing)
    while True:
        wide = set()
        for pair in filter(None, figures.headline_pairs().values()):
            r = figures.ratio(*pair)
            if r.width > MAX_WIDTH and r.rounds < max_rounds:
                wide.update(figures.timed(n) for n in pair)
        if not wide:
            return
        print(f"  {len(wide)} candidate(s) of a headline still too noisy to call: {EXTRA_ROUNDS} more rounds",
              flush=True)
        timing.run(EXTRA_ROUNDS, block, sorted(wide))


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
                      "process_spread": round(timing.spread(figures.timed(name)), 4)}
    summary = {"eager_p50_ms": eager, "flops": found.flops,
               "eager_achieved_gops": found.flops / (eager / 1e3) / 1e9 if found.flops else None,
               "budget": f"top-1 drop <= {TOP1_BUDGET} point where labelled, else SQNR >= {SQNR_BUDGET} dB"}
    for key, pair in figures.headline_pairs().items():
        summary[key] = figures.ratio(*pair).as_dict() if pair else None
        summary[key.replace("speedup_vs_", "") + "_pair"] = list(pair) if pair else None
    best = figures.best("edgeship")
    summary.update(best_variant=best, best_precision=found.candidates[best]["precision"] if best else None,
                   best_fp32_variant=figures.best("edgeship", "fp32"),
                   best_int8_variant=figures.best("edgeship", "int8"),
                   best_fp32_peer=figures.best("peer", "fp32"), best_int8_peer=figures.best("peer", "int8"),
                   identical={n: c["same_as"] for n, c in found.candidates.items() if c.get("same_as")},
                   build_cost=cost, rows=rows)
    return summary


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
            gops = row["achieved_gops"]
            row["fraction_of_peak"] = gops / peak[PEAK_KEY[row["precision"]]] if gops else None


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
        for key in ("best_speedup_vs_eager", "speedup_vs_best_fp32_peer", "speedup_vs_best_int8_peer"):
            pair = m[key.replace("speedup_vs_", "") + "_pair"]
            text = (f"{key}: {_ratio(m[key])} ({pair[1]} against {pair[0]})" if pair
                    else f"{key}: no pair inside the budget")
            table.add_row("", text, *[""] * 10)
        host = m["build_cost"].get("host") or next(iter(m["build_cost"].values()))
        table.add_row("", f"build: cold {host['cold_build_seconds']:.1f} s, unchanged re-build "
                          f"{host['rebuild_seconds']:.1f} s", *[""] * 10, end_section=True)
    Console(width=200).print(table)
    print(f"* fastest variant inside the budget ({next(iter(results['models'].values()))['budget']})")


def _ratio(r: dict | None) -> str:
    if not r:
        return "-"
    mark = "≈" if r["verdict"] == "tie" else ""
    return f"{mark}{r['value']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"


def _fmt(value, digits: int = 2, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.{digits}f}"
