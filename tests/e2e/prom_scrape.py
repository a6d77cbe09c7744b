#!/usr/bin/env python3
"""Scrapes a traind metrics endpoint as Prometheus would and prints one line
per sample: `name{label="value",...} value`, labels sorted. The text must
parse with prometheus_client's own parser (the reference implementation of
the text format); a family without HELP and TYPE, a malformed line or a
sample that parses to the wrong type fails the run. Then checks that other
paths get 404 and other methods 405.

usage: prom_scrape.py http://127.0.0.1:PORT
"""
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    base = sys.argv[1]
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        ctype = r.headers.get("Content-Type", "")
        text = r.read().decode("utf-8")
    if not ctype.startswith("text/plain"):
        sys.exit(f"Content-Type {ctype!r}, not text/plain")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            kind = line.split()[3]
            if kind not in ("gauge", "counter"):
                sys.exit(f"unexpected metric type: {line}")
    families = list(text_string_to_metric_families(text))
    if not families:
        sys.exit("no metric families")
    for fam in families:
        if not fam.documentation:
            sys.exit(f"{fam.name}: no HELP text")
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            print(f"{s.name}{{{labels}}} {s.value!r}")
    for path, method, want in (("/nope", "GET", 404), ("/metrics", "POST", 405)):
        try:
            urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None),
                                   timeout=30)
            sys.exit(f"{method} {path}: answered 200")
        except urllib.error.HTTPError as e:
            if e.code != want:
                sys.exit(f"{method} {path}: {e.code}, expected {want}")


if __name__ == "__main__":
    main()
