"""`porter predict` (issue 16 item 5): the JSON keys, every product, knobs, errors."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "porter", "predict", *args], capture_output=True, text=True,
                          timeout=120)


def test_json_keys_every_product_and_the_label():
    r = _run("blackwell", "--kernel", "gemm.fp8", "--shapes", "8192x8192x8192", "4096x4096x4096", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {x["product"] for x in rows} == {"B200", "GB200"}
    assert {x["shape"] for x in rows} == {"8192x8192x8192", "4096x4096x4096"}
    for x in rows:
        assert {"kernel", "product", "shape", "time_us", "tflops", "gb_s", "bound", "low", "high"} <= set(x)
        assert x["label"] == "predicted by porter's timing model, not measured"
        assert x["low"] <= x["time_us"] <= x["high"]


def test_text_output_says_it_is_a_model_and_set_applies():
    base = _run("hopper", "--kernel", "gemm.bf16", "--product", "H100 SXM", "--json")
    one = _run("hopper", "--kernel", "gemm.bf16", "--product", "H100 SXM", "--set", "consumers=1", "--json")
    assert json.loads(one.stdout)[0]["time_us"] > json.loads(base.stdout)[0]["time_us"]
    text = _run("hopper", "--kernel", "attention")
    assert text.returncode == 0 and "predicted by porter's timing model, not measured" in text.stdout


def test_bad_input_is_one_line():
    r = _run("hopper", "--product", "B200")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "B200" in r.stderr
    r = _run("hopper", "--kernel", "gemm.bf16", "--shapes", "8192x8192")
    assert r.returncode != 0 and "MxNxK" in r.stderr and "Traceback" not in r.stderr


def test_calibration_tables_name_the_one_fitted_factor_and_hold_back_blackwell():
    hop = _run("hopper", "--calibration")
    assert hop.returncode == 0, hop.stderr
    assert "one fitted factor" in hop.stdout and "| fast.cu GEMM | K7 |" in hop.stdout
    assert "no knob" in hop.stdout and "predicted by porter's timing model, not measured" in hop.stdout
    bw = _run("blackwell", "--calibration")
    assert bw.returncode == 0 and "nothing is fitted" in bw.stdout and "| B200 | gemm.bf16.pair |" in bw.stdout
